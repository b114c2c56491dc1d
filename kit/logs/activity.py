"""Activity counters, and which of them prove that a start-up is still making progress. Pure.

Progress is data moving: log output (tqdm's `\\r` redraws included, counted by the tracker), bytes
read from disk, bytes received from the network (a download, a peer's weights), GPU memory growing
(weights and the KV pool landing on the device). Neither GPU utilisation nor, after the launch stage,
CPU time is: a hung NCCL collective spins its GPU at 100 % and its scheduler at 100 % of a core
(CUDA's spin-wait), so both look busy forever. Where CPU time is real progress (imports before the
first milestone; every phase of the CPU rehearsal, which computes on CPU) the profile says so, with
its reason (`timing.cpu_progress_in` in the catalog).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ActivitySample:
    """Cumulative counters of the server's processes at monotonic time `t`; None where not measurable."""

    t: float
    cpu_seconds: float | None = None
    read_bytes: int | None = None
    net_rx_bytes: int | None = None
    gpu_mem_bytes: int | None = None
    gpu_util: tuple[int | None, ...] = ()  # per device, percent: shown, never counted as progress


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
) -> str | None:
    """The first counter between two samples that shows progress ('disk', 'network', 'gpu memory',
    'cpu'), or None when nothing that counts moved."""
    dt = after.t - before.t
    if dt <= 0:
        return None
    if _delta(before.read_bytes, after.read_bytes) >= min_read_bytes:
        return "disk"
    if _delta(before.net_rx_bytes, after.net_rx_bytes) >= min_net_bytes:
        return "network"
    if _delta(before.gpu_mem_bytes, after.gpu_mem_bytes) >= min_gpu_mem_bytes:
        return "gpu memory"
    if cpu_counts and _delta(before.cpu_seconds, after.cpu_seconds) / dt >= cpu_busy_cores:
        return "cpu"
    return None
