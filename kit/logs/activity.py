"""Activity counters: which prove that a start-up makes progress, which only that it is alive, and
what shape the activity had when a verdict was reached. Pure.

Progress is data moving: log output (tqdm's `\\r` redraws included, counted by the tracker), bytes
read from disk, bytes received from the network (a download, a peer's weights), GPU memory growing
(weights and the KV pool landing on the device). Neither GPU utilisation nor, after the launch stage,
CPU time is: a hung NCCL collective spins its GPU at 100 % and its scheduler at 100 % of a core
(CUDA's spin-wait), so both look busy forever. Where CPU time is real progress (imports before the
first milestone; every phase of the CPU rehearsal, which computes on CPU) the profile says so, with
its reason (`timing.cpu_progress_in` in the catalog).

A JIT compile is the other busy-but-quiet case: on a first start Triton, flashinfer, inductor and
deep_gemm compile kernels during autotune, capture and the warm-up request, with few lines and GPU
memory flat. There, bytes written into the compile caches and compiler processes alive under the
server (kit/runtime/compile_cache.py) are progress; a spin with neither is not.

Alive is weaker than progress: any counter moving at all, CPU included. After a fatal line the kit
waits for the server to exit or to stop showing life before it calls the start CRASHED, so a server
that logs an error and goes on is never removed on the strength of one line.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class CgroupReading:
    """The server cgroup's counters at one moment; None where unread (kit/runtime/cgroup.py reads
    cgroup v2's memory.events, cgroup.events, cpu.stat; v1's memory.oom_control, freezer.state)."""

    oom: int | None = None
    oom_kill: int | None = None
    frozen: bool | None = None
    throttled_s: float | None = None
    where: str = ""  # the cgroup's path, for the lines


@dataclass(frozen=True, slots=True)
class ActivitySample:
    """Cumulative counters of the server's processes at monotonic time `t`; None where not measurable."""

    t: float
    cpu_seconds: float | None = None
    read_bytes: int | None = None
    net_rx_bytes: int | None = None
    gpu_mem_bytes: int | None = None
    gpu_util: tuple[int | None, ...] = ()  # per device, percent: shown, never counted as progress
    compile_bytes: int | None = None  # bytes the processes wrote to storage (/proc/PID/io write_bytes)
    compilers: int | None = None  # live compiler processes under the server (nvcc, ptxas, cc1plus, ...)
    # CPU seconds per scheduler rank ("TP0", ...), where the source can tell the processes apart.
    rank_cpu_seconds: tuple[tuple[str, float], ...] = ()
    # Why the GPUs could not be read (NVML: a GPU lost after a hang): a fact for the verdict.
    gpu_error: str | None = None
    # Each scheduler rank's process as (rank, pid, state: running, sleeping, stopped, zombie, ...);
    # None where the source cannot see them. After READY a rank missing here has exited and a
    # stopped one (SIGSTOP, a debugger) serves nothing (kit/logs/serving.py).
    rank_processes: tuple[tuple[str, int, str], ...] | None = None
    # The checkpoint's pages the ranks hold mapped now (kit/runtime/mapped.py): resident bytes of the
    # mapped shard files, their mapped size, and the storage they are on ("nfs4: the network (NFS)").
    checkpoint_resident: int | None = None
    checkpoint_mapped: int | None = None
    storage: str | None = None
    # Where compile_bytes came from: "proc" (the processes' /proc/PID/io) or "cgroup" (the
    # container's block-I/O write bytes, where /proc/PID/io cannot be read); kit/logs/counters.py.
    writes_via: str | None = None
    # The server cgroup's counters (OOM kills, frozen, throttling); None where unreadable.
    cgroup: CgroupReading | None = None

    @property
    def frozen(self) -> bool:
        """The cgroup freezer holds every process (docker pause): nothing measured now is progress."""
        return bool(self.cgroup and self.cgroup.frozen)


def _delta(before: float | None, after: float | None) -> float:
    if before is None or after is None or after < before:  # unknown, or the counter was reset
        return 0.0
    return after - before


def what_moved(
    before: ActivitySample,
    after: ActivitySample,
    *,
    cpu_counts: bool,
    cpu_busy_cores: float,
    min_read_bytes: int,
    min_net_bytes: int,
    min_gpu_mem_bytes: int,
    compile_counts: bool = False,
    min_compile_bytes: int = 1,
) -> str | None:
    """The first counter between two samples that shows progress ('disk', 'network', 'gpu memory',
    'compile', 'cpu'), or None when nothing that counts moved."""
    dt = after.t - before.t
    if dt <= 0 or after.frozen:  # a frozen process is never progress, a compiler's included
        return None
    if moved := _io_moved(before, after, min_read_bytes, min_net_bytes):
        return moved
    if _delta(before.gpu_mem_bytes, after.gpu_mem_bytes) >= min_gpu_mem_bytes:
        return "gpu memory"
    if compile_counts and _compiling(before, after, min_compile_bytes):
        return "compile"
    if cpu_counts and _delta(before.cpu_seconds, after.cpu_seconds) / dt >= cpu_busy_cores:
        return "cpu"
    return None


def _io_moved(before: ActivitySample, after: ActivitySample, min_read_bytes: int, min_net_bytes: int):
    """'disk' or 'network' when that counter moved by its minimum: both progress and life."""
    if _delta(before.read_bytes, after.read_bytes) >= min_read_bytes:
        return "disk"
    if _delta(before.net_rx_bytes, after.net_rx_bytes) >= min_net_bytes:
        return "network"
    return None


def _compiling(before: ActivitySample, after: ActivitySample, min_compile_bytes: int) -> bool:
    return _delta(before.compile_bytes, after.compile_bytes) >= min_compile_bytes or bool(after.compilers)


def signs_of_life(
    before: ActivitySample,
    after: ActivitySample,
    *,
    cpu_alive_cores: float,
    min_read_bytes: int,
    min_net_bytes: int,
    min_gpu_mem_bytes: int,
) -> str | None:
    """Any counter that moved between two samples, progress or not: 'disk', 'network', 'gpu memory'
    (either way: freeing is life too), 'compile', 'cpu' (above `cpu_alive_cores`); None when the
    server's processes did nothing measurable at all."""
    dt = after.t - before.t
    if dt <= 0 or after.frozen:
        return None
    if moved := _io_moved(before, after, min_read_bytes, min_net_bytes):
        return moved
    gpu_before, gpu_after = before.gpu_mem_bytes, after.gpu_mem_bytes
    if gpu_before is not None and gpu_after is not None and abs(gpu_after - gpu_before) >= min_gpu_mem_bytes:
        return "gpu memory"
    if _compiling(before, after, 1):
        return "compile"
    if _delta(before.cpu_seconds, after.cpu_seconds) / dt >= cpu_alive_cores:
        return "cpu"
    return None


# -- the shape of the activity at a verdict ---------------------------------------------------------

QUIET_CORES_PER_RANK = 0.15  # ranks waiting in a rendezvous, a bootstrap or a store: ~0 CPU
SPIN_CORES_PER_RANK = 0.5  # CUDA's spin-wait in a hung collective: ~1 core per rank
SPIN_GPU_UTIL = 90  # a hung NCCL kernel holds its GPU at 100 %
QUIET_GPU_UTIL = 10


@dataclass(frozen=True, slots=True)
class ActivitySummary:
    """What the server's processes did over the last `seconds` before a verdict (rates per second).

    `shape` reads it for the causes book: "quiet" (ranks waiting: ~0 CPU, GPUs idle, nothing
    read), "spinning" (a core per rank or GPUs at 100 % while no data moves: a hung collective),
    None when neither fits (data moving, or too few samples to tell).
    """

    seconds: float
    cpu_cores: float | None = None
    rank_cores: tuple[tuple[str, float], ...] = ()
    read_mb_s: float | None = None
    net_mb_s: float | None = None
    gpu_mem_delta_gib: float | None = None
    gpu_util: tuple[int | None, ...] = ()
    compile_mb: float | None = None
    compilers: int | None = None
    gpu_error: str | None = None
    shape: str | None = None

    def describe(self) -> str:
        """One line for people and for the causes book's word search."""
        parts = [f"activity over the last {self.seconds:.0f} s:"]
        if self.rank_cores:
            per_rank = ", ".join(f"{rank} {cores:.2f}" for rank, cores in self.rank_cores)
            parts.append(f"cpu {per_rank} cores")
        elif self.cpu_cores is not None:
            parts.append(f"cpu {self.cpu_cores:.2f} cores")
        if self.read_mb_s is not None:
            parts.append(f"read {self.read_mb_s:.1f} MB/s")
        if self.gpu_mem_delta_gib is not None:
            parts.append(f"gpu memory {self.gpu_mem_delta_gib:+.2f} GiB")
        if self.gpu_util:
            parts.append("gpu util " + "/".join("-" if u is None else str(u) for u in self.gpu_util) + " %")
        if self.compile_mb or self.compilers:
            parts.append(f"compile {self.compile_mb or 0:.1f} MB written, {self.compilers or 0} compilers")
        elif self.compile_mb is None:  # /proc/PID/io unreadable: unknown, which is not "no compile"
            parts.append("compile writes unknown")
        if self.gpu_error:
            parts.append(f"gpu error: {self.gpu_error}")
        if self.shape:
            parts.append(f"activity={self.shape}")
        return " ".join(parts)


def _rate(first: ActivitySample, last: ActivitySample, name: str, scale: float) -> float | None:
    a, b = getattr(first, name), getattr(last, name)
    if a is None or b is None:
        return None
    return _delta(a, b) / scale / (last.t - first.t)


def summarize(samples: Sequence[ActivitySample], ranks: int = 0) -> ActivitySummary | None:
    """The activity between the first and the last of `samples` (oldest first); None with fewer
    than two. `ranks`: scheduler processes, to read a container-wide CPU figure per rank."""
    if len(samples) < 2 or samples[-1].t <= samples[0].t:
        return None
    first, last = samples[0], samples[-1]
    seconds = last.t - first.t
    before = dict(first.rank_cpu_seconds)
    rank_cores = tuple(
        (rank, round(_delta(before[rank], cpu) / seconds, 3))
        for rank, cpu in last.rank_cpu_seconds
        if rank in before
    )
    gpu_delta = None
    if first.gpu_mem_bytes is not None and last.gpu_mem_bytes is not None:
        gpu_delta = round((last.gpu_mem_bytes - first.gpu_mem_bytes) / (1 << 30), 3)
    compile_mb = None
    if first.compile_bytes is not None and last.compile_bytes is not None:
        compile_mb = round(_delta(first.compile_bytes, last.compile_bytes) / 1e6, 3)
    cpu = _rate(first, last, "cpu_seconds", 1.0)
    summary = ActivitySummary(
        seconds=round(seconds, 1),
        cpu_cores=None if cpu is None else round(cpu, 3),
        rank_cores=rank_cores,
        read_mb_s=_round(_rate(first, last, "read_bytes", 1e6)),
        net_mb_s=_round(_rate(first, last, "net_rx_bytes", 1e6)),
        gpu_mem_delta_gib=gpu_delta,
        gpu_util=last.gpu_util,
        compile_mb=compile_mb,
        compilers=max((s.compilers for s in samples if s.compilers is not None), default=None),
        gpu_error=next((s.gpu_error for s in reversed(samples) if s.gpu_error), None),
    )
    return _with_shape(summary, ranks)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _with_shape(summary: ActivitySummary, ranks: int) -> ActivitySummary:
    if summary.rank_cores:
        per_rank = max(cores for _, cores in summary.rank_cores)
    elif summary.cpu_cores is not None:
        per_rank = summary.cpu_cores / max(ranks, 1)
    else:
        per_rank = None
    utils = [u for u in summary.gpu_util if u is not None]
    util = max(utils) if utils else None
    moving = (
        (summary.read_mb_s or 0) >= 1
        or (summary.net_mb_s or 0) >= 1
        or bool(summary.compile_mb or summary.compilers)
    )
    moving = moving or (summary.gpu_mem_delta_gib or 0) >= 16 / 1024
    shape = None
    if not moving:
        spinning = (per_rank is not None and per_rank >= SPIN_CORES_PER_RANK) or (
            util is not None and util >= SPIN_GPU_UTIL
        )
        quiet = (
            per_rank is not None
            and per_rank < QUIET_CORES_PER_RANK
            and (util is None or util <= QUIET_GPU_UTIL)
        )
        shape = "spinning" if spinning else "quiet" if quiet else None
    return replace(summary, shape=shape)


# -- the activity over the whole watch, for the picture ---------------------------------------------


class SampleHistory:
    """Every sample of a watch, at most `keep`: when full, every other one is dropped (the picture
    keeps its whole span at a coarser step). Oldest first."""

    def __init__(self, keep: int = 240):
        self.keep = keep
        self.samples: list[ActivitySample] = []

    def add(self, sample: ActivitySample | None) -> None:
        if sample is None or (self.samples and sample.t <= self.samples[-1].t):
            return
        self.samples.append(sample)
        if len(self.samples) > self.keep:
            self.samples = [*self.samples[:-1:2], self.samples[-1]]


def series_rows(samples: Sequence[ActivitySample], started_at: float) -> tuple[dict, ...]:
    """Rates between consecutive samples, at the later one's time (seconds since `started_at`):
    CPU cores per rank (or the server's), reads MB/s, GPU memory GiB, compile MB written."""
    rows = []
    for before, after in itertools.pairwise(samples):
        dt = after.t - before.t
        if dt <= 0:
            continue
        earlier = dict(before.rank_cpu_seconds)
        cpu = {
            rank: round(_delta(earlier[rank], s) / dt, 3)
            for rank, s in after.rank_cpu_seconds
            if rank in earlier
        }
        if not cpu and before.cpu_seconds is not None and after.cpu_seconds is not None:
            cpu = {"all": round(_delta(before.cpu_seconds, after.cpu_seconds) / dt, 3)}
        rows.append(
            {
                "t": round(after.t - started_at, 2),
                "cpu": cpu,
                "read_mb_s": round(_delta(before.read_bytes, after.read_bytes) / 1e6 / dt, 3),
                "gpu_mem_gib": None
                if after.gpu_mem_bytes is None
                else round(after.gpu_mem_bytes / (1 << 30), 3),
                "compile_mb": round(_delta(before.compile_bytes, after.compile_bytes) / 1e6, 3),
            }
        )
    return tuple(rows)
