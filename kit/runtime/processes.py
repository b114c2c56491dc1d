"""A server's processes on this host, read through /proc and psutil: the tree, its counters, its
compile caches, its stacks. What kit/runtime/host_source.py samples; no Docker involved.

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
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from kit.runtime.compile_cache import COMPILERS, ENV

PROC = Path("/proc")
CGROUP_ROOT = Path("/sys/fs/cgroup")
_PY_SPY_TIMEOUT_S = 20
# A cache walk stops here and says "unknown": a sample every 2 s must stay cheap.
MAX_CACHE_ENTRIES = 50_000

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
            compilers += process.name() in COMPILERS
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


# -- compile caches -----------------------------------------------------------------------------

# Where each cache lives when its variable is unset, read from the libraries' own code (the releases
# in the kit's images): triton/knobs.py (`~/.triton/cache`, TRITON_HOME moves it),
# torch/_inductor/runtime/cache_dir_utils.py (`$TMPDIR/torchinductor_<user>`),
# flashinfer/jit/env.py (`$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer`), tvm_ffi/cpp/extension.py
# (`~/.cache/tvm-ffi`), sglang/srt/environ.py (SGLANG_CACHE_DIR `~/.cache/sglang`; 0.5.23's
# redirect_third_party_caches() points triton, inductor, CUDA and flashinfer under it), deep_gemm
# under SGLANG_CACHE_DIR, and the CUDA driver's `~/.nv/ComputeCache`.


def compile_cache_dirs(env: Mapping[str, str], home: str, user: str) -> list[str]:
    """The folders a process's JIT compilers write to: its variables, else the defaults. Pure."""
    tmp = env.get("TMPDIR") or "/tmp"
    sglang = env.get("SGLANG_CACHE_DIR") or f"{home}/.cache/sglang"
    triton_home = env.get("TRITON_HOME") or home
    flashinfer_base = env.get("FLASHINFER_WORKSPACE_BASE") or home
    defaults = {
        "TRITON_CACHE_DIR": f"{triton_home}/.triton/cache",
        "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/torchinductor_{user}",
        "FLASHINFER_WORKSPACE_BASE": f"{flashinfer_base}/.cache/flashinfer",
        "SGLANG_DG_CACHE_DIR": f"{sglang}/deep_gemm",
        "TVM_FFI_CACHE_DIR": f"{home}/.cache/tvm-ffi",
        "CUDA_CACHE_PATH": f"{home}/.nv/ComputeCache",
        "SGLANG_JIT_CACHE_DIR": f"{sglang}/jit",  # 0.5.23 sglang/kernels/jit/utils/compile/cache.py
        "SGLANG_CACHE_DIR": sglang,
    }
    # FLASHINFER_WORKSPACE_BASE names a base; flashinfer appends .cache/flashinfer itself.
    dirs = [env.get(name) or defaults[name] for name in ENV if name != "FLASHINFER_WORKSPACE_BASE"]
    dirs += [defaults["FLASHINFER_WORKSPACE_BASE"], sglang]
    chosen: list[str] = []
    for folder in sorted({os.path.normpath(d) for d in dirs}, key=len):
        if not any(folder == c or folder.startswith(c.rstrip("/") + "/") for c in chosen):
            chosen.append(folder)  # a folder inside one already counted is not counted twice
    return sorted(chosen)


def dir_bytes(folders: Iterable[Path], max_entries: int = MAX_CACHE_ENTRIES) -> int | None:
    """Bytes of the files under FOLDERS (missing ones count 0); None past max_entries."""
    total, seen = 0, 0
    stack = [f for f in folders if f.is_dir()]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > max_entries:
                return None
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return total


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


def dump_stack(pid: int, timeout_s: int = _PY_SPY_TIMEOUT_S) -> str:
    """`py-spy dump --pid PID`, or one line in parentheses saying why there is no stack."""
    tool = py_spy()
    if tool is None:
        return "(no stack: py-spy is not installed here; pip install py-spy)"
    try:
        done = subprocess.run(
            [tool, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=timeout_s, check=False
        )
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
