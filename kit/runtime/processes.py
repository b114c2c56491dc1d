"""A server's processes on this host, read through /proc and psutil: the tree, its counters, its
writes (compile progress), its stacks. What kit/runtime/host_source.py samples; no Docker involved.

A container's processes are host processes too (the engine's `docker top` lists their host PIDs),
so everything here works for a server in a container as for one under systemd: files the process
sees are reached through /proc/PID/root when it lives in another mount namespace.

Counters are summed over the live processes (CPU seconds including reaped children, storage bytes
read from /proc/PID/io). Network bytes received are read only for a process in its own network
namespace (a container's): on the host's namespace they count every download on the machine, which
would make a hung server look alive. Stacks come from `py-spy dump --pid`, which needs ptrace
permission (root, CAP_SYS_PTRACE, or kernel.yama.ptrace_scope 0 for one's own processes).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from kit.runtime.compile_cache import is_compiler

PROC = Path("/proc")
CGROUP_ROOT = Path("/sys/fs/cgroup")
_PY_SPY_TIMEOUT_S = 20

# -- /proc --------------------------------------------------------------------------------------


def read_cmdline(pid: int, proc: Path = PROC) -> list[str] | None:
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode("utf-8", "replace") for part in raw.rstrip(b"\0").split(b"\0")] if raw else []


def read_environ(pid: int, proc: Path = PROC) -> dict[str, str] | None:
    """The environment the process started with; None where it cannot be read (another user's)."""
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.decode("utf-8", "replace").partition("=")
        if sep and key:
            env[key] = value
    return env


def stdout_target(pid: int, proc: Path = PROC) -> str | None:
    """Where fd 1 points: a path, 'pipe:[N]', 'socket:[N]' (journald), '/dev/pts/N'; None if unreadable."""
    try:
        return os.readlink(proc / str(pid) / "fd" / "1")
    except OSError:
        return None


def _same_namespace(pid: int, kind: str, proc: Path = PROC) -> bool:
    try:
        return os.stat(proc / str(pid) / "ns" / kind).st_ino == os.stat(proc / "self" / "ns" / kind).st_ino
    except OSError:
        return True  # cannot tell: assume the host's (the cautious answer for network counters)


def host_path(pid: int, path: str, proc: Path = PROC) -> Path:
    """PATH as process PID sees it, reachable from here (through /proc/PID/root in another mount ns)."""
    if _same_namespace(pid, "mnt", proc):
        return Path(path)
    return proc / str(pid) / "root" / path.lstrip("/")


def unit_of(pid: int, proc: Path = PROC) -> str | None:
    """The systemd service a process runs in, from its cgroup path ('.../sglang-qwen.service')."""
    try:
        text = (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        for part in reversed(path.split("/")):
            if part.endswith(".service"):
                return part
    return None


# -- the tree -----------------------------------------------------------------------------------


def process_tree(pid: int) -> list[psutil.Process]:
    """PID and all its descendants that are alive (zombies left out); [] when PID is gone."""
    try:
        root = psutil.Process(pid)
        found = [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []
    return [p for p in found if _alive(p)]


# Python's own options that take a value (python -X dev -W error -m sglang.launch_server ...).
_PYTHON_OPTS_WITH_VALUE = frozenset({"-X", "-W", "-Q"})


def sglang_launcher_argv(argv: list[str]) -> bool:
    """Is this the SGLang launcher's command line: a Python running `-m sglang.launch_server`,
    `-m sglang ...`, the `sglang serve` console script or launch_server.py? Not a shell whose `-c`
    names it (bash -c "... python -m sglang.launch_server"), not `uv run`/`conda run` (conda is
    itself a Python script: its script is conda), not the schedulers (sglang::scheduler_TP0)."""
    if not argv or not re.fullmatch(r"python[\d.]*", Path(argv[0]).name):
        return False
    rest = iter(argv[1:])
    for arg in rest:
        if arg in _PYTHON_OPTS_WITH_VALUE:
            next(rest, None)
        elif arg == "-m":
            module = next(rest, "")
            return module in ("sglang.launch_server", "sglang.launch_server.py") or (
                module == "sglang" and next(rest, "") == "serve"
            )
        elif arg == "-c":
            return False
        elif arg.startswith("-m") and len(arg) > 2:
            return arg[2:] == "sglang.launch_server"
        elif arg.startswith("-"):
            continue
        else:  # the script: a console script named sglang, or launch_server.py itself
            script = Path(arg)
            if script.name == "sglang":
                return next(rest, "") == "serve"
            return script.name == "launch_server.py" and script.parent.name == "sglang"
    return False


def find_launcher(pid: int) -> int | None:
    """The SGLang launcher in the tree under PID (PID itself included): the one nearest PID, for
    a PID that is docker-init, tini, a shell, `uv run` or `conda run` around it. None: none there."""
    best: tuple[int, int] | None = None
    for process in process_tree(pid):
        try:
            if not sglang_launcher_argv(process.cmdline()):
                continue
            depth, up = 0, process
            while up is not None and up.pid != pid:
                depth, up = depth + 1, up.parent()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if best is None or (depth, process.pid) < best:
            best = (depth, process.pid)
    return best[1] if best else None


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def cgroup_pids(cgroup: str, root: Path = CGROUP_ROOT) -> list[int] | None:
    """Every process in a cgroup and its children (a unit's whole service); None where unreadable.

    cgroup v2 keeps it at ROOT/CGROUP; v1 in the named `systemd` hierarchy."""
    for base in (root / cgroup.lstrip("/"), root / "systemd" / cgroup.lstrip("/")):
        if not base.is_dir():
            continue
        pids: list[int] = []
        for procs in sorted(base.rglob("cgroup.procs")):
            try:
                pids += [int(line) for line in procs.read_text().split() if line.isdigit()]
            except OSError:
                continue
        return sorted(set(pids))
    return None


def processes(pids: Iterable[int]) -> list[psutil.Process]:
    found = []
    for pid in pids:
        try:
            process = psutil.Process(pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if _alive(process):
            found.append(process)
    return found


def title(process: psutil.Process) -> str:
    """The command line as the process shows it (SGLang's setproctitle: 'sglang::scheduler_TP0')."""
    try:
        return " ".join(process.cmdline()) or process.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


# -- counters -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Counters:
    cpu_seconds: float | None
    read_bytes: int | None
    compilers: int | None


def counters(procs: Iterable[psutil.Process]) -> Counters:
    cpu, read, compilers = 0.0, 0, 0
    cpu_known = read_known = names_known = False
    for process in procs:
        try:
            times = process.cpu_times()
            cpu += times.user + times.system + times.children_user + times.children_system
            cpu_known = True
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
        try:
            read += process.io_counters().read_bytes
            read_known = True
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, AttributeError):
            pass
        try:
            compilers += is_compiler(process.name())
            names_known = True
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return Counters(
        cpu if cpu_known else None, read if read_known else None, compilers if names_known else None
    )


def net_rx_bytes(pid: int, proc: Path = PROC) -> int | None:
    """Bytes received on the process's network namespace, only when it has its own (a container's)."""
    if _same_namespace(pid, "net", proc):
        return None
    try:
        text = (proc / str(pid) / "net" / "dev").read_text()
    except OSError:
        return None
    total = 0
    for line in text.splitlines()[2:]:
        name, _, fields = line.partition(":")
        if name.strip() != "lo" and fields.split():
            total += int(fields.split()[0])
    return total


# -- writes: compile progress ------------------------------------------------------------------
#
# A JIT compile (Triton's LLVM stage in the server's own process, nvcc/ptxas children, flashinfer's
# ninja) ends in files written to a cache. The kernel counts what each process sends to storage in
# /proc/PID/io `write_bytes` (psutil's io_counters().write_bytes), at the moment the pages are
# dirtied (not at writeback), and adds a reaped child's count to its parent's. So the bytes the
# server's process tree wrote are read without walking any cache: a cache of any size costs one read
# per process. Not counted: files on tmpfs (no writeback), pipes and sockets (its log lines).


def write_readings(procs: Iterable[psutil.Process]) -> dict[tuple[int, float], int] | None:
    """{(pid, start time): write_bytes} of each process whose /proc/PID/io can be read; None when none
    can (another user's processes without CAP_SYS_PTRACE, the kit in another PID namespace)."""
    found: dict[tuple[int, float], int] = {}
    for process in procs:
        try:
            found[(process.pid, process.create_time())] = int(process.io_counters().write_bytes)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, AttributeError, OSError):
            continue
    return found or None


class WriteMeter:
    """Bytes a process tree wrote since the first reading, from successive `write_readings`. Pure.

    Each process counts from its own previous reading; one first seen after the first reading (a
    compiler started since) counts from zero, since all it wrote it wrote while watched. A process
    keyed by (pid, start time), so a reused PID is a new process. A child that exits between two
    readings is counted through its parent, which the kernel credits at reaping; a child seen before
    it exits may then count twice, which only overstates how much moved, never that something did.
    None readings (nothing readable) give None: unknown, never zero progress."""

    def __init__(self) -> None:
        self._last: dict[tuple[int, float], int] | None = None
        self._written = 0

    def read(self, readings: dict[tuple[int, float], int] | None) -> int | None:
        if readings is None:
            return None
        if self._last is not None:
            for key, value in readings.items():
                self._written += max(0, value - self._last.get(key, 0))
        self._last = dict(readings)
        return self._written


# -- stacks -------------------------------------------------------------------------------------


def py_spy() -> str | None:
    """py-spy on PATH, else beside this interpreter (the kit's venv installs it)."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() else None


def ptrace_scope(proc: Path = PROC) -> str | None:
    try:
        return (proc / "sys" / "kernel" / "yama" / "ptrace_scope").read_text().strip()
    except OSError:
        return None


def dump_stack(pid: int, timeout_s: int = _PY_SPY_TIMEOUT_S, *, nonblocking: bool = False) -> str:
    """`py-spy dump --pid PID`, or one line in parentheses saying why there is no stack.

    `nonblocking`: read the stack without suspending the process (the samples taken while a stage
    is quiet: they never pause what they watch, and a frozen or stopped process reads all the same)."""
    tool = py_spy()
    if tool is None:
        return "(no stack: py-spy is not installed here; pip install py-spy)"
    flags = ["--nonblocking"] if nonblocking else []
    try:
        command = [tool, "dump", *flags, "--pid", str(pid)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return f"(no stack: py-spy dump --pid {pid} did not answer within {timeout_s} s)"
    except OSError as exc:
        return f"(no stack: py-spy could not be run: {exc.strerror or exc})"
    if done.returncode != 0 and "Failed to suspend" in (done.stderr or done.stdout):
        # A stopped process (SIGSTOP, a debugger): read it without suspending (it is not running).
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            done = subprocess.run(
                [tool, "dump", "--nonblocking", "--pid", str(pid)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
    if done.returncode == 0:
        return done.stdout
    said = (done.stderr or done.stdout).strip()
    if any(word in said.lower() for word in ("permission denied", "operation not permitted", "eperm")):
        scope = ptrace_scope()
        why = f"kernel.yama.ptrace_scope={scope}" if scope is not None else "no CAP_SYS_PTRACE"
        return (
            f"(no stack: ptrace is not allowed on pid {pid} ({why}); run kit as root or with "
            "CAP_SYS_PTRACE, or set kernel.yama.ptrace_scope=0)"
        )
    return f"(no stack: py-spy dump exited {done.returncode}: {said.splitlines()[-1] if said else ''})"
