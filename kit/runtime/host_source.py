"""A server that runs as host processes (a systemd unit, a bare PID) as a watcher `Source`.

The third source beside DockerSource and ReplaySource (kit/runtime/source.py):

    HostSource.for_pid(4242, log="/var/log/sglang.log")     # a process and its descendants
    HostSource.for_unit("sglang-qwen")                      # a unit: its main PID and cgroup, journal

- **the processes**: a given PID and its descendants, or a unit's cgroup (every process of the
  service) with its main PID from `systemctl show`; a unit that systemd restarts is followed through
  its next main PID (kit/runtime/unit.py translates `Restart=` for the watcher);
- **the output**: a file followed like `tail -F` (kit/runtime/logfile.py), or the unit's journal
  (kit/runtime/journal.py); a unit whose StandardOutput= is a file is followed in that file, and a
  bare PID whose stdout is a regular file is followed there without --log;
- **activity** (kit/runtime/processes.py): CPU seconds and storage bytes read of the processes,
  network bytes only in a namespace of their own, GPU memory and utilisation through NVML by host
  PID, and compile activity: compilers running under the server (by process name) and the bytes its
  processes wrote to storage (/proc/PID/io write_bytes; unknown, and said so, where unreadable);
- **stacks**: `py-spy dump --pid` of each process whose title the caller wants, or why there is none.

It never signals, stops or restarts what it watches.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import psutil

from kit.errors import EnvironmentProblem, InputError
from kit.logs import ActivitySample
from kit.runtime import processes as procs
from kit.runtime.journal import JournalFollower, journal_argv
from kit.runtime.kernel_log import KernelLog
from kit.runtime.logfile import FileFollower
from kit.runtime.nvml import NvmlGpus
from kit.runtime.source import ProcessStack, SourceState
from kit.runtime.unit import SystemdUnit, UnitProblem, UnitStatus, watcher_policy

# -- where the processes are --------------------------------------------------------------------


class Processes(Protocol):
    name: str
    started_wall: float

    def main_pid(self) -> int | None: ...

    def pids(self) -> list[int]: ...

    def state(self) -> SourceState: ...


class PidTree:
    """A process and its descendants. No supervisor is known: when it ends, the watch ends."""

    def __init__(self, pid: int):
        try:
            self._process = psutil.Process(pid)
            self.started_wall = self._process.create_time()
        except psutil.NoSuchProcess:
            raise InputError("--pid", f"no process {pid}", "give the PID of the server's launcher") from None
        except psutil.AccessDenied:
            raise InputError(
                "--pid", f"process {pid} cannot be read", "run kit as its user or root"
            ) from None
        self.pid = pid
        self.name = f"pid {pid}"

    def _alive(self) -> bool:
        try:
            # The same process, not a new one that got the PID after it ended.
            same = self._process.create_time() == self.started_wall
            return same and self._process.is_running() and self._process.status() != psutil.STATUS_ZOMBIE
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False

    def main_pid(self) -> int | None:
        return self.pid if self._alive() else None

    def pids(self) -> list[int]:
        return [p.pid for p in procs.process_tree(self.pid)] if self._alive() else []

    def state(self) -> SourceState:
        # A watcher that is not the parent cannot learn the exit code: None says "unknown".
        return SourceState(running=self._alive(), restart_policy="no")


class UnitProcesses:
    """A systemd service: its main PID, every process in its cgroup, its state and restarts."""

    def __init__(self, unit: SystemdUnit, *, wall: Callable[[], float] = time.time):
        self.unit = unit
        self.name = unit.name
        try:
            self.status = unit.status()
        except UnitProblem as exc:
            if exc.no_systemd:  # the host lacks systemd: ENVIRONMENT, whatever the name
                raise EnvironmentProblem(
                    f"--unit {unit.name}: no systemd to ask here ({exc})",
                    hint="run on the host whose systemd runs the service, or use --pid N",
                ) from None
            raise InputError("--unit", str(exc), "name a loaded service ('systemctl list-units')") from None
        self._restarts_before = self.status.restarts
        started = self.status.started_mono_s
        # systemd's monotonic timestamps are CLOCK_MONOTONIC, the clock time.monotonic() reads.
        self.started_wall = wall() - (time.monotonic() - started) if started else wall()

    def _refresh(self) -> UnitStatus:
        try:
            self.status = self.unit.status()
        except UnitProblem as exc:
            raise EnvironmentProblem(
                f"systemd stopped answering about {self.name} ({exc})", hint="check 'systemctl status'"
            ) from exc
        return self.status

    def main_pid(self) -> int | None:
        return self.status.main_pid if self.status.running else None

    def pids(self) -> list[int]:
        status = self.status
        found = procs.cgroup_pids(status.cgroup) if status.cgroup else None
        if found is None:
            found = [p.pid for p in procs.process_tree(status.main_pid)] if status.main_pid else []
        return found

    def state(self) -> SourceState:
        status = self._refresh()
        return SourceState(
            running=status.running,
            exit_code=None if status.running else status.exit_code,
            restarts=max(0, status.restarts - self._restarts_before),
            restart_policy=watcher_policy(status),
        )


# -- the log ------------------------------------------------------------------------------------


class _FileLog:
    def __init__(self, follower: FileFollower):
        self.follower = follower
        self.where = f"file {follower.path}"

    def take(self) -> list[tuple[float, str]]:
        return self.follower.take()

    def drain(self, timeout_s: float) -> list[tuple[float, str]]:
        return self.follower.drain()

    def text(self) -> str:
        return self.follower.text()

    def close(self) -> None:
        self.follower.close()


class _JournalLog:
    def __init__(self, follower: JournalFollower, unit: str):
        self.follower = follower
        self.where = f"the journal of {unit}"

    def take(self) -> list[tuple[float, str]]:
        return self.follower.take()

    def drain(self, timeout_s: float) -> list[tuple[float, str]]:
        return self.follower.drain(timeout_s)

    def text(self) -> str:
        return self.follower.text()

    def close(self) -> None:
        self.follower.close()


def log_of_pid(pid: int, given: str | None) -> str:
    """The file a bare PID's output goes to: --log, else its stdout when that is a regular file."""
    if given:
        return given
    target = procs.stdout_target(pid)
    if target and target.startswith("/") and not target.startswith(("/dev/", "/proc/")):
        path = procs.host_path(pid, target.removesuffix(" (deleted)"))
        if path.is_file():
            return str(path)
    shown = target or "unreadable"
    raise InputError(
        "--log",
        f"process {pid} writes its output to {shown}, not to a file the kit can follow",
        "name its log file with --log FILE, or watch its unit with --unit NAME",
    )


# -- the source ---------------------------------------------------------------------------------


class HostSource:
    """Source over host processes; `gpus` is NVML where the host has it, `port` the server's port."""

    def __init__(
        self,
        where: Processes,
        log: _FileLog | _JournalLog,
        *,
        gpus: NvmlGpus | None = None,
        base_url: str | None = None,
    ):
        self.where = where
        self.log = log
        self.name = where.name
        self.gpus = gpus
        self._base_url = base_url
        wall, mono = time.time(), time.monotonic()
        self.started_at = min(mono, where.started_wall + (mono - wall))
        self.notes: list[str] = [f"output from {log.where}"]
        self._writes = procs.WriteMeter()
        self._writes_note_given = False
        self._kernel: KernelLog | None = None  # the kernel's log from the server's start, once asked

    @classmethod
    def for_pid(cls, pid: int, *, log: str | None = None, gpus=None, base_url=None) -> HostSource:
        tree = PidTree(pid)
        path = log_of_pid(pid, log)
        if not Path(path).parent.is_dir():
            raise InputError("--log", f"no folder {Path(path).parent}", "give the server's log file")
        return cls(
            tree, _FileLog(FileFollower(path, since_wall=tree.started_wall)), gpus=gpus, base_url=base_url
        )

    @classmethod
    def for_unit(cls, name: str, *, log: str | None = None, gpus=None, base_url=None) -> HostSource:
        unit = UnitProcesses(SystemdUnit(name))
        path = log or unit.status.log_file
        if path:
            follower: _FileLog | _JournalLog = _FileLog(FileFollower(path, since_wall=unit.started_wall))
        else:
            argv = journal_argv(unit.name, since_wall=unit.started_wall)
            follower = _JournalLog(JournalFollower(argv), unit.name)
        return cls(unit, follower, gpus=gpus, base_url=base_url)

    # -- clock ------------------------------------------------------------------------------------

    def clock(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    # -- output -----------------------------------------------------------------------------------

    def read(self) -> list[tuple[float, str]]:
        return self.log.take()

    def drain(self, timeout_s: float) -> list[tuple[float, str]]:
        return self.log.drain(timeout_s)

    def log_text(self) -> str:
        return self.log.text()

    def close(self) -> None:
        self.log.close()
        if self._kernel is not None:
            self._kernel.close()

    # -- counters and state -----------------------------------------------------------------------

    def state(self) -> SourceState:
        return self.where.state()

    def sample(self, t: float) -> ActivitySample | None:
        pids = self.where.pids()
        if not pids:
            return None
        tree = procs.processes(pids)
        counted = procs.counters(tree)
        main = self.where.main_pid() or pids[0]
        gpu_mem, gpu_util = None, ()
        if self.gpus is not None:
            usage = self.gpus.usage(pids)
            gpu_mem, gpu_util = usage.memory_bytes, usage.utilization
        written = self._compile_bytes(tree)
        return ActivitySample(
            t=t,
            cpu_seconds=counted.cpu_seconds,
            read_bytes=counted.read_bytes,
            net_rx_bytes=procs.net_rx_bytes(main),
            gpu_mem_bytes=gpu_mem,
            gpu_util=gpu_util,
            compile_bytes=written,
            compilers=counted.compilers,
            writes_via=None if written is None else "proc",
        )

    def _compile_bytes(self, tree: list[psutil.Process]) -> int | None:
        """Bytes the server's processes wrote since the watch began (/proc/PID/io write_bytes)."""
        written = self._writes.read(procs.write_readings(tree))
        if written is None and not self._writes_note_given:
            self.notes.append(
                "compile progress unknown: /proc/PID/io of the server's processes cannot be read "
                "(run kit as the server's user or as root)"
            )
            self._writes_note_given = True
        return written

    # -- diagnosis and HTTP -----------------------------------------------------------------------

    def stacks(
        self, want: Callable[[str], bool] = lambda title: True, *, nonblocking: bool = False
    ) -> list[ProcessStack]:
        found = []
        for process in sorted(procs.processes(self.where.pids()), key=lambda p: p.pid):
            name = procs.title(process)
            if name and want(name):
                try:
                    state = str(process.status())
                except (psutil.Error, OSError):
                    state = None
                text = procs.dump_stack(process.pid, nonblocking=nonblocking)
                found.append(ProcessStack(process.pid, name, text, state))
        return found

    def kernel_log(self) -> tuple[tuple[str, ...], str | None]:
        """The kernel's lines since the server's start (its OOM lines name the server's processes),
        or why it cannot be read (kit/runtime/kernel_log.py)."""
        if self._kernel is None:
            self._kernel = KernelLog(since_wall=self.where.started_wall)
        return self._kernel.kept()

    @property
    def base_url(self) -> str | None:
        return self._base_url

    def http_transport(self):
        return None

    def environment(self) -> dict[str, str] | None:
        """The server process's environment (/proc/PID/environ: readable for its own user or root)."""
        pid = self.where.main_pid()
        if pid is None:
            return None
        try:
            return dict(psutil.Process(pid).environ())
        except (psutil.Error, OSError):
            return None
