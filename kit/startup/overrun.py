"""A phase past its deadline while it still moves, and a load's progress against the model's size. Pure.

A deadline is the profile's guess of how long a phase should take; a 234 GB load over a slow disk or
a busy network share can take longer and still be fine. So in `kit up` and `kit watch` a passed
deadline is news, not a verdict: the watch says it once, live ("load passed its 3600 s deadline,
still moving: 41.0 GB read, 60 MB/s"), records it in the result and goes on to READY, HUNG or
CRASHED; the container is removed only on a verdict of harm (HUNG: nothing moved for the stall
window; CRASHED). In the smoke tests (`kit smoke`, the pytest fixtures) the deadline is the
assertion itself, so there it ends the watch with DEADLINE (exit 5): `DeadlinePolicy` is the one
switch between the two, read by the one watcher (kit/startup/watch.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from kit.logs import ActivitySample

GB = 1_000_000_000
MB = 1_000_000


class DeadlinePolicy(StrEnum):
    """What a phase past its deadline (while still moving) does to a watch."""

    REPORT = "report"  # kit up / kit watch: say so, keep watching; only HUNG or CRASHED end it early
    VERDICT = "verdict"  # kit smoke, the pytest fixtures, --strict-deadlines: DEADLINE ends the watch


@dataclass(frozen=True)
class Overrun:
    """One stage of one launch attempt that ran past its deadline and went on."""

    stage: str
    limit_s: float
    noticed_s: float  # seconds into the stage when the watch saw it (the limit, give or take a step)
    attempt: int
    moving: str  # what still moved when it was noticed: "41.0 GB read, 60 MB/s", "output 2 s ago"

    def describe(self) -> str:
        return f"{self.stage} passed its {self.limit_s:.0f} s deadline, still moving: {self.moving}"


@dataclass(frozen=True)
class DeadlineRow:
    """An overrun as the result reports it (UpResult.deadlines_passed, `--json`)."""

    phase: str
    limit_s: float
    took_s: float | None  # how long the stage lasted in the end (still open: so far)
    moving: str
    attempt: int = 1


# SGLang 0.5.23's bar over the shard files (srt/model_loader/weight_utils.py
# safetensors_weights_iterator, tqdm with its BAR_FORMAT):
#   Loading safetensors checkpoint shards:  29% Completed | 4/14 [00:02<00:05,  1.77it/s]
_SHARD_BAR = re.compile(
    r"Loading safetensors checkpoint shards:\s*\d+% Completed \| (\d+)/(\d+) \[([0-9:]+)<([0-9:?]+)"
)


@dataclass(frozen=True)
class ShardBar:
    """SGLang's own count of the shard files loaded, with tqdm's own time estimate."""

    done: int
    total: int
    remaining_s: float | None  # tqdm's estimate ('<00:05'); None while it has none ('<?')


def _clock(text: str) -> float | None:
    try:
        parts = [int(p) for p in text.split(":")]
    except ValueError:
        return None
    seconds = 0
    for part in parts:
        seconds = seconds * 60 + part
    return float(seconds)


def shard_bar(line: str) -> ShardBar | None:
    """SGLang's shard bar in one output line (its last drawing where `\r` joined several), or None."""
    found = _SHARD_BAR.findall(line)
    if not found:
        return None
    done, total, _, remaining = found[-1]
    return ShardBar(int(done), int(total), _clock(remaining))


@dataclass(frozen=True)
class LoadProgress:
    """How far the load is, from what moves on a real host, and what it rests on (`basis`):

    - SGLang's shard bar (k of N files loaded), refined by the pages of the shard being loaded now
      that the ranks hold mapped (resident / mapped size): right on a warm page cache (no block I/O
      at all), on NFS (no block I/O counted) and under memory pressure (re-reads count nothing);
    - without the bar (before rank 0 draws it, another loader), the mapped pages alone;
    - without either, block-I/O bytes read against the checkpoint's size (the old measure: it reads
      0 on a warm start and overshoots under memory pressure, so it is said as what it is).
    """

    read_bytes: int  # block I/O since the load began (what the disks were asked for)
    rate_bytes_s: float | None  # of read_bytes, over the last samples; None until two samples are in
    total_bytes: int | None  # the checkpoint's size on disk (the catalog's)
    shards: ShardBar | None = None
    resident_bytes: int | None = None  # of the shard files mapped now
    mapped_bytes: int | None = None
    storage: str | None = None

    @property
    def basis(self) -> str:
        if self.shards is not None:
            return "SGLang's shard bar"
        if self.mapped_bytes:
            return "the ranks' mapped checkpoint pages"
        return "block I/O read"

    @property
    def fraction(self) -> float | None:
        bar = self.shards
        current = min(1.0, (self.resident_bytes or 0) / self.mapped_bytes) if self.mapped_bytes else 0.0
        if bar is not None and bar.total:
            if bar.done >= bar.total:
                return 1.0
            return min(1.0, (bar.done + current) / bar.total)
        if not self.total_bytes:
            return None
        if self.mapped_bytes:
            return min(1.0, (self.resident_bytes or 0) / self.total_bytes)
        return min(1.0, self.read_bytes / self.total_bytes)

    @property
    def loaded_bytes(self) -> int | None:
        fraction = self.fraction
        if fraction is None or not self.total_bytes:
            return None
        return int(fraction * self.total_bytes)

    @property
    def eta_s(self) -> float | None:
        """Seconds left: tqdm's own estimate on SGLang's bar, else the rest at the read rate."""
        if self.shards is not None:
            return self.shards.remaining_s
        if self.mapped_bytes or not self.total_bytes or not self.rate_bytes_s or self.rate_bytes_s <= 0:
            return None
        return max(0.0, self.total_bytes - self.read_bytes) / self.rate_bytes_s

    def describe(self) -> str:
        """'110.4 of 251.0 GB (44 %; shard 17/38 by SGLang's shard bar; on nfs4: the network (NFS);
        ETA 5 min)'."""
        fraction, loaded = self.fraction, self.loaded_bytes
        if loaded is not None and self.total_bytes:
            head, details = (
                f"{loaded / GB:.1f} of {self.total_bytes / GB:.1f} GB",
                [f"{100 * (fraction or 0):.0f} %"],
            )
        elif fraction is not None:
            head, details = f"{100 * fraction:.0f} %", []
        else:
            head, details = f"{self.read_bytes / GB:.1f} GB read", []
        bar = self.shards
        details.append(
            f"shard {bar.done}/{bar.total} by {self.basis}" if bar is not None else f"by {self.basis}"
        )
        if self.rate_bytes_s is not None and self.rate_bytes_s >= MB:
            details.append(f"disk {self.rate_bytes_s / MB:.0f} MB/s")
        if self.storage:
            details.append(f"on {self.storage}")
        eta = self.eta_s
        if eta is not None and (fraction or 0) < 1.0:
            details.append(f"ETA {_duration(eta)}")
        return f"{head} ({'; '.join(details)})"


def _size(n: float) -> str:
    return f"{n / GB:.1f} GB" if n >= GB else f"{n / MB:.0f} MB"


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds // 3600:.0f} h {seconds % 3600 / 60:02.0f} min"
    if seconds >= 90:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def read_rate(samples: Sequence[ActivitySample]) -> float | None:
    """Bytes read per second over the given samples (oldest first), None without two readings."""
    known = [s for s in samples if s.read_bytes is not None]
    if len(known) < 2 or known[-1].t <= known[0].t:
        return None
    first, last = known[0], known[-1]
    assert first.read_bytes is not None and last.read_bytes is not None
    return max(0, last.read_bytes - first.read_bytes) / (last.t - first.t)


def load_progress(
    samples: Sequence[ActivitySample],
    read_at_start: int | None,
    total_bytes: int | None,
    shards: ShardBar | None = None,
) -> LoadProgress | None:
    """The load's progress from SGLang's shard bar (the newest drawing seen), the samples' mapped
    checkpoint pages and their read counter: None while none of them is known."""
    last_read = next((s for s in reversed(samples) if s.read_bytes is not None), None)
    latest = samples[-1] if samples else None
    mapped = latest.checkpoint_mapped if latest is not None else None  # the shard open right now
    if last_read is None and not mapped and shards is None:
        return None
    read = max(0, (last_read.read_bytes or 0) - (read_at_start or 0)) if last_read is not None else 0
    return LoadProgress(
        read,
        read_rate(samples),
        total_bytes,
        shards=shards,
        resident_bytes=latest.checkpoint_resident if mapped and latest is not None else None,
        mapped_bytes=mapped or None,
        storage=next((s.storage for s in reversed(samples) if s.storage), None),
    )


def still_moving(
    samples: Sequence[ActivitySample],
    *,
    quiet_for_s: float,
    read_at_stage_start: int | None = None,
    min_rate_bytes_s: float = MB,
) -> str:
    """What moved lately, in a few words: reads (bytes and rate), GPU memory, compile writes, output.

    Called when the tracker judged the stage still active (it is not HUNG), so something moved
    within the stall window; this names it for a person."""
    parts: list[str] = []
    rate = read_rate(samples)
    if rate is not None and rate >= min_rate_bytes_s:
        last_read = next((s.read_bytes for s in reversed(samples) if s.read_bytes is not None), 0) or 0
        read = max(0, last_read - (read_at_stage_start or 0))
        parts.append(f"{_size(read)} read, {rate / MB:.0f} MB/s")
    if len(samples) >= 2:
        first, last = samples[0], samples[-1]
        if first.gpu_mem_bytes is not None and last.gpu_mem_bytes is not None:
            grew = last.gpu_mem_bytes - first.gpu_mem_bytes
            if grew >= 16 << 20:
                parts.append(f"GPU memory +{grew / (1 << 30):.2f} GiB")
        if first.compile_bytes is not None and last.compile_bytes is not None:
            wrote = last.compile_bytes - first.compile_bytes
            if wrote > 0:
                parts.append(f"compile writes +{wrote / MB:.1f} MB")
        if last.compilers:
            parts.append(f"{last.compilers} compilers alive")
        if first.cpu_seconds is not None and last.cpu_seconds is not None and last.t > first.t:
            cores = (last.cpu_seconds - first.cpu_seconds) / (last.t - first.t)
            if cores >= 0.25:
                parts.append(f"CPU {cores:.1f} cores")
    parts.append(f"last progress {quiet_for_s:.0f} s ago")
    return ", ".join(parts)
