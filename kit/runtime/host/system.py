"""The host's own limits and tools: /dev/shm, the memlock limit, free disk, a free port, the
NVIDIA tools (toolkit binaries and version, `nvidia-smi topo -m`) and Compose's version, and the
machine as its kernel reports it (kernel, OS, arch, CPUs, memory, cgroup: no engine involved).

Every reader returns data; what cannot be read is None with a reason, and a host tool is asked with
a timeout (a wedged driver can hang nvidia-smi).
"""

from __future__ import annotations

import os
import platform
import resource
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

TOOL_TIMEOUT_S = 15
TOOLKIT_BINARIES = ("nvidia-ctk", "nvidia-container-runtime", "nvidia-container-runtime-hook")


def read_shm(path: str = "/dev/shm") -> tuple[int | None, int | None]:
    try:
        stat = os.statvfs(path)
    except OSError:
        return None, None
    return stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize


def read_memlock() -> int | None:
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    except (OSError, ValueError):
        return None
    return -1 if soft == resource.RLIM_INFINITY else int(soft)


def read_disk(path: str) -> tuple[str, int | None]:
    """Free bytes on the filesystem that holds PATH (or its nearest existing parent)."""
    here = Path(path)
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        stat = os.statvfs(here)
    except OSError:
        return str(here), None
    return str(here), stat.f_bavail * stat.f_frsize


def read_port(port: int) -> tuple[bool | None, str | None]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == 98:  # EADDRINUSE
                return False, None
            return None, f"could not test it: {exc.strerror}"
    return True, None


def run_tool(argv: list[str], timeout_s: float = TOOL_TIMEOUT_S) -> tuple[str | None, str | None]:
    """(stdout, None) or (None, why) for a host tool, bounded by a timeout."""
    if shutil.which(argv[0]) is None:
        return None, f"{argv[0]} is not installed on this host"
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{' '.join(argv)} failed: {type(exc).__name__}"
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        return None, f"{' '.join(argv)} exited {done.returncode}: {why[-1] if why else 'no output'}"
    return done.stdout, None


@dataclass(frozen=True)
class ToolFacts:
    """The host's NVIDIA tools and Compose (text, or None with the reason in *_why)."""

    toolkit_binaries: tuple[str, ...] = ()
    toolkit_version: str | None = None
    toolkit_why: str | None = None
    smi_topo: str | None = None
    smi_topo_why: str | None = None
    compose_version: str | None = None
    compose_why: str | None = None


def read_tools(*, toolkit: bool = True, smi: bool = True, compose: bool = True) -> ToolFacts:
    """The tools asked for (each with a timeout); what is not asked says 'not read'."""
    binaries = tuple(b for b in TOOLKIT_BINARIES if shutil.which(b))
    version, why = None, "neither nvidia-ctk nor nvidia-container-cli is installed on this host"
    if not toolkit:
        why = "not read"
    for argv in (["nvidia-ctk", "--version"], ["nvidia-container-cli", "--version"]) if toolkit else ():
        out, _ = run_tool(argv)
        if out:
            version, why = out.strip().splitlines()[0], None
            break
    topo, topo_why = run_tool(["nvidia-smi", "topo", "-m"]) if smi else (None, "not read")
    compose_out, compose_why = (
        run_tool(["docker", "compose", "version", "--short"]) if compose else (None, "not read")
    )
    return ToolFacts(
        toolkit_binaries=binaries,
        toolkit_version=version,
        toolkit_why=why,
        smi_topo=topo,
        smi_topo_why=topo_why or (None if topo else "no output"),
        compose_version=compose_out.strip() if compose_out else None,
        compose_why=compose_why or (None if compose_out else "no answer"),
    )


# -- the machine, without an engine --------------------------------------------------------------


@dataclass(frozen=True)
class MachineFacts:
    """This machine as its kernel reports it: what a host process runs on (the engine's own view,
    EngineFacts, is what a container runs on). None: not readable."""

    kernel: str
    arch: str
    os: str | None = None  # /etc/os-release's PRETTY_NAME
    cpus: int | None = None
    memory_bytes: int | None = None  # /proc/meminfo's MemTotal
    cgroup: str = "1"  # "2" where the unified hierarchy is mounted


def os_name(os_release: str) -> str | None:
    """PRETTY_NAME from /etc/os-release's text. Pure."""
    name = None
    for line in os_release.splitlines():
        if line.startswith("PRETTY_NAME="):
            name = line.split("=", 1)[1].strip().strip('"')
    return name


def mem_total(meminfo: str) -> int | None:
    """MemTotal in bytes from /proc/meminfo's text (given in KiB). Pure."""
    memory = None
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            memory = int(line.split()[1]) * 1024
    return memory


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def read_machine(root: Path = Path("/")) -> MachineFacts:
    """Kernel, OS, arch, CPUs, memory and cgroup version of this machine."""
    return MachineFacts(
        kernel=platform.release(),
        arch=platform.machine(),
        os=os_name(_text(root / "etc/os-release") or ""),
        cpus=os.cpu_count(),
        memory_bytes=mem_total(_text(root / "proc/meminfo") or ""),
        cgroup="2" if (root / "sys/fs/cgroup/cgroup.controllers").exists() else "1",
    )
