"""Which activity counters the watcher can read on this host, said once live and kept in the result
and the bundle. Pure: read off an ActivitySample, where None means "cannot be measured here".

A counter the host hides (another user's /proc/PID/io without ptrace, a process tree in another
PID namespace, no NVML) is unknown, never zero: a verdict resting on it says so. Where the
processes' own write counters are unreadable the Docker source falls back on the container's
cgroup (the engine's block-I/O write bytes), and the row names it (`writes via cgroup`).

A HUNG rests on the counters only as far as they could be read: `unread_for_hang` names the ones it
needs (HANG_NEEDS) that this host hid, and `kit up` removes a hung server only when there are none.
"""

from __future__ import annotations

from dataclasses import dataclass

from kit.logs.activity import ActivitySample

# (what people read, where it comes from when readable)
_WRITES_VIA = {
    "proc": "/proc/PID/io",
    "cgroup": "the container's cgroup block-I/O writes; /proc/PID/io unreadable",
}


# What a HUNG needs to have read to say "nothing moved": every counter the watch counts as progress
# (kit/logs/activity.py what_moved: disk reads, network, GPU memory, compile writes and compilers,
# CPU) and the ranks' processes (a rank stopped or frozen, a rank that exited). GPU memory only where
# the run has a GPU: a CPU run has none to move.
HANG_NEEDS = ("cpu", "disk reads", "network", "writes", "compilers", "ranks' processes")


@dataclass(frozen=True)
class Readable:
    """The counters read and those that could not be, in the order the live view lists them."""

    read: tuple[str, ...]
    unread: tuple[str, ...]

    def line(self) -> str:
        text = "counters read: " + (", ".join(self.read) or "none")
        return text + (f"; not readable here: {', '.join(self.unread)}" if self.unread else "")

    def as_dict(self) -> dict[str, list[str]]:
        return {"read": list(self.read), "unread": list(self.unread)}


def readable_counters(sample: ActivitySample) -> Readable:
    """Which of the sample's counters hold a reading."""
    read: list[str] = []
    unread: list[str] = []

    def put(name: str, known: bool) -> None:
        (read if known else unread).append(name)

    put("cpu", sample.cpu_seconds is not None)
    put("disk reads", sample.read_bytes is not None)
    put("network", sample.net_rx_bytes is not None)
    put("gpu memory", sample.gpu_mem_bytes is not None and not sample.gpu_error)
    via = _WRITES_VIA.get(sample.writes_via or "")
    put(f"writes ({via})" if via else "writes", sample.compile_bytes is not None)
    put("compilers", sample.compilers is not None)
    # The process tree under the server: per-rank CPU and each rank's state come with it.
    put("ranks' processes", sample.rank_processes is not None)
    return Readable(tuple(read), tuple(unread))


def unread_for_hang(readable: Readable | None, *, gpu: bool) -> tuple[str, ...]:
    """The counters a HUNG needs (HANG_NEEDS, and GPU memory where the run has a GPU) that could not
    be read; ("every counter: no sample was taken",) without a sample."""
    if readable is None:
        return ("every counter: no sample was taken",)
    needed = (*HANG_NEEDS, "gpu memory") if gpu else HANG_NEEDS
    return tuple(name for name in readable.unread if name.split(" (")[0] in needed)
