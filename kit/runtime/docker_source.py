"""A server container as a watcher `Source` (kit/runtime/source.py): its output, counters and state.

Output comes two ways, joined without gaps or repeats:
- the engine's log with its own timestamps, for everything written before the kit attached (a
  container that Compose started ten minutes ago keeps its real phase times);
- a raw attach stream from then on. The engine's log driver only hands over a line at `\\n` (or at
  16 KB), so tqdm's `\\r` progress of a 234 GB load would arrive in one piece at the end; the attach
  stream carries the bytes as they are written.

Counters per sample: CPU seconds and block-I/O read bytes from the engine's stats (with the
processes' own /proc/PID/io where cgroup v1 gives none), network bytes received, and through NVML
the GPU memory and utilisation of the container's processes (matched by host PID). From the host's
/proc, under the container's PID 1 (`State.Pid`): CPU seconds per scheduler rank, compiler
processes alive (kit/runtime/compile_cache.py COMPILERS), and the bytes those processes wrote to
storage (/proc/PID/io write_bytes through kit/runtime/processes.py `WriteMeter`; where the host
cannot read them, the container cgroup's block-I/O write bytes from the engine's stats, and `notes`
says which). An NVML failure (a GPU lost after a hang) becomes
`gpu_error` in the sample, a fact for the verdict, never an exception out of the watch.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import psutil
import requests
from docker.errors import DockerException, NotFound
from docker.models.containers import Container

from kit.errors import EnvironmentProblem
from kit.logs import ActivitySample
from kit.logs.activity import CgroupReading
from kit.logs.stacks import rank_of_process
from kit.proxyenv import env_from_list
from kit.runtime import processes as procs
from kit.runtime import server as runtime
from kit.runtime.cgroup import read_cgroup
from kit.runtime.compile_cache import is_compiler
from kit.runtime.engine import LABEL_RESTART
from kit.runtime.kernel_log import KernelLog
from kit.runtime.nvml import NvmlGpus
from kit.runtime.processes import WriteMeter, processes, write_readings
from kit.runtime.source import LineSplitter, ProcessStack, SourceState, read_gpu_usage, take_all

_ERRORS = (DockerException, requests.RequestException, OSError, ValueError)


def parse_docker_time(text: str) -> float | None:
    """'2026-12-02T17:32:56.123456789Z' (the engine's RFC 3339 with nanoseconds) -> epoch seconds."""
    stamp = text.strip()
    if not stamp or stamp.startswith("0001-"):
        return None
    head, dot, rest = stamp.partition(".")
    if dot:
        digits = "".join(c for c in rest if c.isdigit())
        zone = rest[len(digits) :]
        stamp = f"{head}.{digits[:6]}{zone}"
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class ContainerOutput:
    """Follows one run of a container in a thread: history (timestamped) first, then the live stream."""

    def __init__(self, container: Container, to_mono: Callable[[float], float], *, after_wall: float | None):
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        self.done = threading.Event()
        self.last_wall = after_wall  # the newest log timestamp handed over
        self._container = container
        self._to_mono = to_mono
        self._stream = None
        self.attached = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="kit-output", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed = True
        if self._stream is not None:
            with contextlib.suppress(Exception):
                self._stream.close()

    def _history(self, attached_wall: float) -> None:
        since = {"since": int(self.last_wall)} if self.last_wall is not None else {}
        raw = self._container.logs(stdout=True, stderr=True, timestamps=True, **since)
        for line in raw.decode("utf-8", "replace").split("\n"):
            stamp, _, text = line.partition(" ")
            wall = parse_docker_time(stamp)
            if wall is None or wall >= attached_wall:
                continue  # the live stream has it
            if self.last_wall is not None and wall <= self.last_wall:
                continue  # handed over by an earlier run of this follower
            self.last_wall = wall
            splitter = LineSplitter()
            for part in [*splitter.feed(text.encode()), *splitter.flush()]:
                self.lines.put((self._to_mono(wall), part))

    def _run(self) -> None:
        splitter = LineSplitter()
        try:
            attached_wall = time.time()
            try:
                self._stream = self._container.attach(stdout=True, stderr=True, stream=True, logs=False)
            except _ERRORS:
                self._stream = None  # not running (yet, or any more): its history is all there is
            self._history(attached_wall)
            self.attached = self._stream is not None
            for chunk in self._stream or ():
                if self._closed:
                    break
                now = time.monotonic()
                for line in splitter.feed(chunk):
                    self.lines.put((now, line))
                self.last_wall = time.time()
        except _ERRORS:
            pass  # the container or the engine went away; the watcher notices through its state
        finally:
            for line in splitter.flush():
                self.lines.put((time.monotonic(), line))
            self.done.set()

    def take(self) -> list[tuple[float, str]]:
        return take_all(self.lines)


def blkio_bytes(stats: dict, op: str) -> int | None:
    """The container's block-I/O bytes for OP ("read" or "write") over all devices, as the engine
    reports them (cgroup v2 io.stat rbytes/wbytes as ops "read"/"write", v1 blkio "Read"/"Write");
    None where the engine reports none (cgroup v1 without blkio)."""
    entries = (stats.get("blkio_stats") or {}).get("io_service_bytes_recursive") or []
    if not entries:
        return None
    return sum(int(e.get("value", 0)) for e in entries if str(e.get("op", "")).lower() == op)


def stats_counters(stats: dict) -> tuple[float | None, int | None, int | None]:
    usage = ((stats.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage")
    networks = stats.get("networks") or {}
    rx = sum(int(n.get("rx_bytes", 0)) for n in networks.values()) if networks else None
    return (None if usage is None else usage / 1e9, blkio_bytes(stats, "read"), rx)


def proc_read_bytes(pids: list[int], proc: Path = Path("/proc")) -> int | None:
    """Bytes the processes fetched from storage (/proc/PID/io read_bytes); None where unreadable."""
    total, readable = 0, False
    for pid in pids:
        try:
            text = (proc / str(pid) / "io").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("read_bytes:"):
                total += int(line.split()[1])
                readable = True
    return total if readable else None


def host_pids(container: Container) -> list[int]:
    """The container's processes as host PIDs (what NVML reports), through the engine's `top`."""
    try:
        top = container.top()
    except _ERRORS:
        return []
    titles = top.get("Titles") or []
    if "PID" not in titles:
        return []
    column = titles.index("PID")
    return [int(row[column]) for row in top.get("Processes") or [] if str(row[column]).isdigit()]


def process_tree(root_pid: int | None) -> list[psutil.Process]:
    """The container's PID 1 and every process under it, as the host sees them (psutil over the
    host's /proc: no engine call, nothing started in the container). Empty where the host cannot
    see them (the kit in another PID namespace)."""
    if not root_pid:
        return []
    try:
        root = psutil.Process(root_pid)
        return [root, *root.children(recursive=True)]
    except (psutil.Error, OSError):
        return []


def compilers_running(processes: list[psutil.Process]) -> int | None:
    """How many of the processes are compilers (by comm: nvcc, ptxas, cicc, cc1plus, ld, ...) that
    can run: a stopped compiler (SIGSTOP, a debugger) is no progress."""
    if not processes:
        return None
    return len(compiler_names(processes))


_HELD = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)


def compiler_names(processes: list[psutil.Process]) -> list[str]:
    """The names of the compilers among the processes that are not stopped."""
    names = []
    for proc in processes:
        with contextlib.suppress(psutil.Error, OSError):
            if is_compiler(proc.name()) and proc.status() not in _HELD:
                names.append(proc.name())
    return names


def rank_cpu_seconds(processes: list[psutil.Process]) -> tuple[tuple[str, float], ...]:
    """CPU seconds (user + system) per scheduler rank, read off the ranks' process titles
    (`sglang::scheduler_TP1`, set by SGLang with setproctitle); their own threads included."""
    found: dict[str, float] = {}
    for proc in processes:
        try:
            rank = rank_of_process(" ".join(proc.cmdline()))
            if rank is None:
                continue
            times = proc.cpu_times()
            found[rank] = found.get(rank, 0.0) + times.user + times.system
        except (psutil.Error, OSError):
            continue
    return tuple(sorted(found.items()))


def zombie_exit(pid: int, proc: Path = Path("/proc")) -> str:
    """How an exited process not yet reaped ended, from /proc/PID/stat's last field (exit_code,
    Linux 3.5+, as waitpid reports it): 'killed by SIGKILL', 'exit code 1'."""
    try:
        code = int((proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[-1])
    except (OSError, ValueError, IndexError):
        return "exited"
    if code & 0x7F:
        try:
            return f"killed by {signal.Signals(code & 0x7F).name}"
        except ValueError:
            return f"killed by signal {code & 0x7F}"
    return f"exit code {code >> 8}"


def rank_processes(processes: list[psutil.Process]) -> tuple[tuple[str, int, str], ...] | None:
    """(rank, pid, state) of each scheduler rank's process (psutil's status: running, sleeping,
    stopped, zombie, ...); None when the host sees no process at all (unknown, not "all gone")."""
    if not processes:
        return None
    found = []
    for proc in processes:
        try:
            rank = rank_of_process(" ".join(proc.cmdline()))
            if rank is not None:
                status = str(proc.status())
                if status == psutil.STATUS_ZOMBIE:
                    status = f"zombie: {zombie_exit(proc.pid)}"
                found.append((rank, proc.pid, status))
        except (psutil.Error, OSError):
            continue
    return tuple(sorted(found))


class DockerSource:
    """Source over a running (or restarting) container. `gpus` is NVML where the host has it."""

    def __init__(self, container: Container, *, gpus: NvmlGpus | None = None, port: int | None = None):
        self.container = container
        self.name = container.name
        self.gpus = gpus
        self._port = port
        wall, mono = time.time(), time.monotonic()
        self._to_mono = lambda w: w + (mono - wall)
        self.started_at = self._started_at(mono)
        self._replacements = 0
        self._last_exit: int | None = None
        # A supervisor outside Docker (systemd's Restart=on-failure runs a new container under the
        # same name each time) declares its policy with this label; Docker's own policy needs none.
        self._supervisor_policy = container.labels.get(LABEL_RESTART)
        self._restarts = self._restart_count()
        self._output = ContainerOutput(container, self._to_mono, after_wall=None)
        self._base_url: str | None = None
        self._writes = WriteMeter()
        self._cgroup_writes_at_start: int | None = None
        self.notes: list[str] = []
        # Every host pid seen in the container, named (a rank, "main" for the launcher, else its
        # name): the kernel's OOM lines name host pids, which outlive the container.
        self.pid_names: dict[int, str] = {}
        self._kernel: KernelLog | None = None  # the kernel's log from the container's start, once asked

    def _started_at(self, mono_now: float) -> float:
        state = self.container.attrs.get("State") or {}
        wall = parse_docker_time(str(state.get("StartedAt") or ""))
        return mono_now if wall is None else min(mono_now, self._to_mono(wall))

    def _restart_count(self) -> int:
        """Restarts in place (the engine's restart policy) plus replacements under the same name."""
        return int(self.container.attrs.get("RestartCount") or 0) + self._replacements

    # -- clock ------------------------------------------------------------------------------------

    def clock(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    # -- output -----------------------------------------------------------------------------------

    def read(self) -> list[tuple[float, str]]:
        lines = self._output.take()
        if self._output.done.is_set() and self._runs_again():
            # Restarted by its restart policy: follow the new run from where the last one stopped.
            self._restarts = self._restart_count()
            self._output = ContainerOutput(self.container, self._to_mono, after_wall=self._output.last_wall)
        return lines

    def _runs_again(self) -> bool:
        """From the state last read (state() refreshes it): a new run began since we followed."""
        running = bool((self.container.attrs.get("State") or {}).get("Running"))
        return running and (self._restart_count() > self._restarts or not self._output.attached)

    def drain(self, timeout_s: float) -> list[tuple[float, str]]:
        self._output.done.wait(timeout=timeout_s)
        return self._output.take()

    def log_text(self) -> str:
        return runtime.logs_text(self.container)

    def close(self) -> None:
        self._output.close()
        if self._kernel is not None:
            self._kernel.close()

    # -- counters and state -----------------------------------------------------------------------

    def sample(self, t: float) -> ActivitySample | None:
        try:
            stats = self.container.stats(stream=False, one_shot=True)
        except _ERRORS:
            return None
        cpu, read, rx = stats_counters(stats)
        root_pid = (self.container.attrs.get("State") or {}).get("Pid")
        tree = process_tree(root_pid)
        pids = [proc.pid for proc in tree]
        self._name_pids(tree)
        if not pids and (read is None or self.gpus is not None):
            pids = host_pids(self.container)
        if read is None:
            read = proc_read_bytes(pids)
        gpu_mem, gpu_util, gpu_error = self._gpu_usage(pids)
        written, writes_via = self._written(tree or processes(pids), blkio_bytes(stats, "write"))
        return ActivitySample(
            t=t,
            cpu_seconds=cpu,
            read_bytes=read,
            net_rx_bytes=rx,
            gpu_mem_bytes=gpu_mem,
            gpu_util=gpu_util,
            compile_bytes=written,
            compilers=compilers_running(tree),
            rank_cpu_seconds=rank_cpu_seconds(tree),
            gpu_error=gpu_error,
            rank_processes=rank_processes(tree),
            writes_via=writes_via,
            cgroup=read_cgroup(root_pid),
            **self._checkpoint_pages(pids),
        )

    def _name_pids(self, tree: list[psutil.Process]) -> None:
        """Name each new pid: its rank, "main" for the launcher (PID 1, or the child of docker-init
        when the container runs with --init), else its process name."""
        if not tree:
            return
        with contextlib.suppress(psutil.Error, OSError):
            root = tree[0]
            init = root.name() == "docker-init"
            launcher = next((p.pid for p in tree[1:] if p.ppid() == root.pid), None) if init else root.pid
            for proc in tree:
                if proc.pid not in self.pid_names:
                    rank = rank_of_process(procs.title(proc))
                    self.pid_names[proc.pid] = rank or ("main" if proc.pid == launcher else proc.name())

    def _checkpoint_pages(self, pids: list[int]) -> dict:
        """The checkpoint's pages the ranks hold mapped (kit/runtime/mapped.py): what a load moves on
        a warm page cache or a network share, where block-I/O counters show nothing."""
        from kit.runtime.mapped import read_mapped

        mapped = read_mapped(pids)
        if mapped is None or not mapped.files:
            return {}
        return {
            "checkpoint_resident": mapped.resident_bytes,
            "checkpoint_mapped": mapped.mapped_bytes,
            "storage": mapped.storage,
        }

    def _written(self, tree: list[psutil.Process], cgroup_bytes: int | None) -> tuple[int | None, str | None]:
        """Bytes the container's processes wrote since the watch began, and where that was read:
        the host's /proc/PID/io of the tree under the container's init PID ("proc": the processes
        the per-rank CPU is read from; `docker top`'s host PIDs where the host cannot walk the
        tree), else the engine's block-I/O write bytes of the container's cgroup ("cgroup": a
        non-root user in the docker group, the Compose watcher without SYS_PTRACE). The cgroup
        counts writes when they reach the disk (writeback, seconds later), the processes' counters
        when pages are dirtied; both are bytes the server wrote, and neither reading is zero."""
        written = self._writes.read(write_readings(tree))
        if written is not None:
            return written, "proc"
        if cgroup_bytes is not None:
            if self._cgroup_writes_at_start is None:
                self._cgroup_writes_at_start = cgroup_bytes
            self._note_once(
                "writes read from the container's cgroup (the engine's block-I/O write bytes): its "
                "/proc/PID/io cannot be read from here (no ptrace on another user's processes)"
            )
            return max(0, cgroup_bytes - self._cgroup_writes_at_start), "cgroup"
        self._note_once(
            "compile progress unknown: the container's /proc/PID/io cannot be read from here "
            "(a rootless kit watching a root container, or the kit in another PID namespace)"
        )
        return None, None

    def _note_once(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def _gpu_usage(self, pids: list[int]) -> tuple[int | None, tuple[int | None, ...], str | None]:
        self._read_kernel_xids()
        return read_gpu_usage(self.gpus, pids)

    def _read_kernel_xids(self) -> None:
        """Once: NVML's Xid events count from their registration (the watch's first sample), so the
        kernel's own `NVRM: Xid` lines are read too, from the container's start on
        (kit/runtime/kernel_log.py)."""
        gpus = self.gpus
        if not isinstance(gpus, NvmlGpus) or gpus.kernel is not None:
            return
        gpus.read_kernel_from(KernelLog(since_wall=self._started_wall()))

    def _started_wall(self) -> float:
        return time.time() - (time.monotonic() - self.started_at)

    def _replacement(self) -> Container | None:
        """A new container under the watched name (its supervisor started it again), if there is one."""
        try:
            found = self.container.client.containers.get(self.name)
        except (DockerException, requests.RequestException):
            return None
        return found if found.id != self.container.id else None

    def state(self) -> SourceState:
        """Raises EnvironmentProblem when the engine itself stopped answering."""
        try:
            self.container.reload()
        except NotFound:
            successor = self._replacement() if self._supervisor_policy else None
            if successor is None:
                return SourceState(
                    False,
                    exit_code=self._last_exit,  # how the removed run ended decides a restart
                    gone=True,
                    restart_policy=self._supervisor_policy,
                    replaced_by_name=True,
                )
            self._output.close()
            self.container = successor
            self._replacements += 1
            self._restarts = self._restart_count()
            self._output = ContainerOutput(successor, self._to_mono, after_wall=None)
            return self.state()
        except (DockerException, requests.RequestException) as exc:
            raise EnvironmentProblem(
                "the Docker engine stopped answering while watching the server",
                hint=f"container {self.name} may still exist: 'kit down {self.name}' once the engine is back",
            ) from exc
        attrs = self.container.attrs
        state = attrs.get("State") or {}
        running = bool(state.get("Running")) and not state.get("Restarting")
        policy = ((attrs.get("HostConfig") or {}).get("RestartPolicy") or {}).get("Name") or "no"
        by_name = policy == "no" and self._supervisor_policy is not None
        self._last_exit = None if running else state.get("ExitCode")
        return SourceState(
            running=running,
            exit_code=None if running else state.get("ExitCode"),
            oom_killed=bool(state.get("OOMKilled")),
            restarts=self._restart_count(),
            restart_policy=self._supervisor_policy if by_name else policy,
            replaced_by_name=by_name,
            paused=running and bool(state.get("Paused")),
        )

    # -- diagnosis and HTTP -----------------------------------------------------------------------

    def stacks(
        self, want: Callable[[str], bool] = lambda title: True, *, nonblocking: bool = False
    ) -> list[ProcessStack]:
        """py-spy stacks of the container's processes whose title `want` accepts. From the host where
        the kit can (root in the host's PID namespace: py-spy's own CPU is then not the server's,
        and a paused container's frozen processes read all the same), else through `docker exec`
        (refused while the container is paused)."""
        tree = process_tree((self.container.attrs.get("State") or {}).get("Pid"))
        if tree and os.geteuid() == 0 and procs.py_spy() is not None:
            return self._host_stacks(tree, want, nonblocking)
        found = []
        for pid, title in sorted(runtime.list_processes(self.container).items()):
            if want(title):
                text = runtime.dump_stack(self.container, pid, nonblocking=nonblocking)
                found.append(ProcessStack(pid, title, text))
        return found

    def _host_stacks(
        self, tree: list[psutil.Process], want: Callable[[str], bool], nonblocking: bool
    ) -> list[ProcessStack]:
        frozen = bool((read_cgroup(tree[0].pid) or CgroupReading()).frozen)
        found = []
        for proc in tree:
            name = procs.title(proc)
            if not name or not want(name):
                continue
            try:
                state = "frozen" if frozen else str(proc.status())
                children = proc.children(recursive=True)
            except (psutil.Error, OSError):
                continue
            text = procs.dump_stack(proc.pid, nonblocking=nonblocking)
            found.append(ProcessStack(proc.pid, name, text, state, tuple(compiler_names(children))))
        return found

    def cgroup_now(self) -> CgroupReading | None:
        """The server cgroup's counters read now, while its first process lives: a verdict's last look
        (an OOM kill the kernel counted after the last 2 s sample); None once it has gone."""
        root_pid = (self.container.attrs.get("State") or {}).get("Pid")
        return read_cgroup(root_pid) if root_pid else None

    def kernel_log(self) -> tuple[tuple[str, ...], str | None]:
        """The kernel's lines since the container's start (its OOM lines name the server's
        processes), or why it cannot be read (kit/runtime/kernel_log.py)."""
        if self._kernel is None:
            self._kernel = KernelLog(since_wall=self._started_wall())
        return self._kernel.kept()

    @property
    def base_url(self) -> str | None:
        if self._base_url is None and self._port is not None:
            port = runtime.published_port(self.container, self._port)
            self._base_url = f"http://127.0.0.1:{port}" if port else None
        return self._base_url

    def http_transport(self):
        return None

    def environment(self) -> dict[str, str] | None:
        """The container's Config.Env: the target's env and what Docker injected (the client's
        configured proxies)."""
        return env_from_list((self.container.attrs.get("Config") or {}).get("Env"))
