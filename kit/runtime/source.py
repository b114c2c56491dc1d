"""What the watcher reads, behind one small interface: a `Source`.

Three implementations drive the same Watcher, tracker and verdict code:

    kit.runtime.docker_source.DockerSource   a server container (kit up, kit watch, the pytest plugin)
    kit.runtime.host_source.HostSource       host processes: a systemd unit or a PID (kit watch --unit/--pid)
    kit.scenarios.replay.ReplaySource        a scenario replayed on its own clock (GPU-shaped start-ups)

A source over real processes (docker, host) also answers `kernel_log()`: the kernel's lines since
the server's start (kit/runtime/kernel_log.py: /dev/kmsg, else `journalctl --dmesg`), whose OOM lines
name the processes it killed, or why they cannot be read; a replay has none. The Docker source also
answers `cgroup_now()`: the server cgroup's counters at the verdict (an OOM kill counted after the
last sample).

A source gives timed log text (split on both `\\n` and `\\r`, so tqdm's progress counts as output),
cumulative activity counters of the server's processes (CPU seconds, disk bytes read, network bytes
received, GPU memory and utilisation), the server's state, stacks on demand, and a clock that the
watcher sleeps on. Modelled on httpx's transports: one small surface, a real one and a replay.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import httpx

from kit.logs import ActivitySample


@dataclass(frozen=True)
class SourceState:
    """Is the server running; if not, how it ended. `restarts` counts restarts seen so far."""

    running: bool
    exit_code: int | None = None
    oom_killed: bool = False
    gone: bool = False
    restarts: int = 0
    restart_policy: str | None = None  # "no", "on-failure", "always", "unless-stopped"
    replaced_by_name: bool = False  # the supervisor starts a new container under the same name
    paused: bool = False  # the engine froze it (docker pause): running, but nothing in it runs

    @property
    def restarting(self) -> bool:
        """A stopped server that its supervisor will start again (a restart policy that applies)."""
        if self.running or self.oom_killed or (self.gone and not self.replaced_by_name):
            return False
        if self.restart_policy in ("always", "unless-stopped"):
            return True
        return self.restart_policy == "on-failure" and self.exit_code not in (0, None)


@dataclass(frozen=True)
class ProcessStack:
    pid: int
    title: str  # the process's command line / title, e.g. "sglang::scheduler_TP0"
    text: str  # py-spy dump output (or why there is none)
    state: str | None = None  # running, sleeping, stopped, tracing-stop, frozen (cgroup); None unknown
    compilers: tuple[str, ...] = ()  # live compiler children (names), for "waits on a compiler child"


@runtime_checkable
class Source(Protocol):
    name: str  # what is watched: a container name, a scenario name
    started_at: float  # when the server started, on this source's clock

    def clock(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def read(self) -> list[tuple[float, str]]:
        """Log lines (and `\\r` segments) that arrived since the last call, with their times."""
        ...

    def sample(self, t: float) -> ActivitySample | None:
        """Cumulative counters at `t`; None while nothing can be measured (not running)."""
        ...

    def state(self) -> SourceState: ...

    def drain(self, timeout_s: float) -> list[tuple[float, str]]:
        """After the server stopped: what is left of its output (waits up to timeout_s for the end)."""
        ...

    def stacks(self, want: Callable[[str], bool] = ..., *, nonblocking: bool = False) -> list[ProcessStack]:
        """py-spy stacks of the processes whose title `want` accepts. `nonblocking`: without
        suspending them (the samples the watcher takes while a stage is quiet)."""
        ...

    def log_text(self) -> str: ...

    def http_transport(self) -> httpx.BaseTransport | None:
        """How to reach the server's HTTP API: None for the network, a transport for a replay."""
        ...

    def environment(self) -> dict[str, str] | None:
        """The server's environment variables (its proxies decide where its own warm-up request
        goes), None when they cannot be read."""
        ...

    @property
    def base_url(self) -> str | None: ...


def take_all(lines: queue.Queue) -> list:
    """Everything a reader thread has queued so far, without waiting."""
    out = []
    while True:
        try:
            out.append(lines.get_nowait())
        except queue.Empty:
            return out


class LineSplitter:
    """Bytes in, lines out: a line ends at `\\n`, `\\r\\n` or a lone `\\r` (tqdm redraws its bar with
    `\\r` and writes `\\n` only when it finishes, so splitting on `\\n` alone hides a whole load).

    A chunk that starts with `\\r` is a redraw: it counts as a line the moment it arrives, not when
    the next redraw pushes it out (the last redraw before a hang would otherwise never be seen).
    Blank segments (the `\\r` before a `\\n`, a bar's clearing) are dropped.
    """

    def __init__(self) -> None:
        self._pending = b""
        self._cr = False  # the last chunk ended in '\r': a '\n' first in the next one belongs to it

    def feed(self, chunk: bytes) -> list[str]:
        if self._cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._cr = chunk.endswith(b"\r")
        redraw = chunk.startswith(b"\r")
        data = (self._pending + chunk).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *complete, self._pending = data.split(b"\n")
        if redraw and self._pending:
            complete.append(self._pending)
            self._pending = b""
        return [text for raw in complete if (text := raw.decode("utf-8", "replace")).strip()]

    def flush(self) -> list[str]:
        rest, self._pending = self._pending, b""
        text = rest.decode("utf-8", "replace")
        return [text] if text.strip() else []


def read_gpu_usage(gpus, pids: Iterable[int]) -> tuple[int | None, tuple[int | None, ...], str | None]:
    """(memory bytes, utilisation per device, why not) of the processes' GPUs through the kit's NVML
    reader. A GPU that stopped answering (NVML's GPU_IS_LOST after a hung collective) is a fact for
    the verdict, never an exception out of the watch: pynvml raises one NVMLError subclass per code,
    and a guarded reader may report the loss as data (`usage.error`) instead."""
    if gpus is None:
        return None, (), None
    try:
        usage = gpus.usage(list(pids))
    except Exception as exc:
        return None, (), f"NVML could not read the GPUs: {exc or type(exc).__name__}"
    error = getattr(usage, "error", None)
    if error and not usage.readings:
        return None, (), str(error)
    return usage.memory_bytes, usage.utilization, str(error) if error else None
