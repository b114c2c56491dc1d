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


@dataclass(frozen=True)
class LoadProgress:
    """Bytes read since the load began, against the checkpoint's size on disk (the catalog's)."""

    read_bytes: int
    rate_bytes_s: float | None  # over the last samples; None until two samples are in
    total_bytes: int | None

    @property
    def fraction(self) -> float | None:
        if not self.total_bytes:
            return None
        return min(1.0, self.read_bytes / self.total_bytes)

    @property
    def eta_s(self) -> float | None:
        """Seconds to read the rest at the current rate (None: unknown size, or nothing moving)."""
        if not self.total_bytes or not self.rate_bytes_s or self.rate_bytes_s <= 0:
            return None
        return max(0.0, self.total_bytes - self.read_bytes) / self.rate_bytes_s

    def describe(self) -> str:
        parts = [f"{self.read_bytes / GB:.1f}"]
        if self.total_bytes:
            parts.append(f" of {self.total_bytes / GB:.1f} GB read ({100 * (self.fraction or 0):.0f} %)")
        else:
            parts.append(" GB read")
        if self.rate_bytes_s is not None:
            parts.append(f", {self.rate_bytes_s / MB:.0f} MB/s")
        eta = self.eta_s
        if eta is not None and (self.fraction or 0) < 1.0:
            parts.append(f", ETA {_duration(eta)}")
        return "".join(parts)


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
    samples: Sequence[ActivitySample], read_at_start: int | None, total_bytes: int | None
) -> LoadProgress | None:
    """The load's progress from the activity samples: None while no read counter is known."""
    last = next((s for s in reversed(samples) if s.read_bytes is not None), None)
    if last is None or last.read_bytes is None:
        return None
    read = max(0, last.read_bytes - (read_at_start or 0))
    return LoadProgress(read, read_rate(samples), total_bytes)


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
