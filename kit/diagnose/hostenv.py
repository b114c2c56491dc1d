"""Reads what a fingerprint of a server running as host processes holds: the Python environment
that actually ran it, its argv and environment, its unit and the machine. The fingerprint itself is
made by kit/diagnose/fact_sources.py (HostProcessFacts) with the one builder, fingerprint.build.

    env = read_python_env(pid)                 # interpreter, site-packages, every installed version

Versions are read from the interpreter's site-packages metadata (`*.dist-info/METADATA`), never by
importing anything in it: a CUDA import in a colleague's environment could hang or grab a GPU.
Which site-packages: the folders the process has loaded extension modules from (/proc/PID/maps:
torch's libraries sit in its site-packages), its PYTHONPATH and virtualenv, then the system's, in
the order Python searches them; the first folder that has a distribution wins, as for `import`.
Files are read through /proc/PID/root, so a process in a container is read as it sees itself.

The `image` section says no kit image ran it and carries the environment's package list as its
`lock` (so `kit bundle diff` compares it with an image's lock); `versions` has the same fields as an
image's; `process` holds what only a host process has (interpreter, site-packages, unit file, the
whole environment, masked). `launch.env` keeps only the variables that decide a start-up (NCCL_,
CUDA_, SGLANG_, ...): PATH or HOME of a workstation mean nothing in a replay's container.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kit.diagnose import fingerprint as fp
from kit.images.lock import Package, normalize
from kit.runtime import processes as procs
from kit.runtime.compile_cache import ENV as COMPILE_CACHE_ENV
from kit.runtime.host import MachineFacts

# -- pure: reading what /proc and the metadata files say ----------------------------------------

_SITE = re.compile(r"(/\S*?/(?:site|dist)-packages)(?:/|$)")
_STDLIB = re.compile(r"/lib(?:64)?/python(\d+\.\d+)/")
_EXE_VERSION = re.compile(r"python(\d+\.\d+)$")


def site_dirs_from_maps(maps: str) -> list[str]:
    """site-/dist-packages folders the process has mapped files from, in first-seen order."""
    found: list[str] = []
    for line in maps.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and (match := _SITE.search(parts[5])) and match[1] not in found:
            found.append(match[1])
    return found


def python_version(exe: str | None, maps: str, pyvenv_cfg: str | None = None) -> str | None:
    """'3.11' (or '3.11.2' from a venv's pyvenv.cfg): from the config, the stdlib path, the exe name."""
    if pyvenv_cfg:
        for line in pyvenv_cfg.splitlines():
            key, _, value = line.partition("=")
            if key.strip() in ("version", "version_info") and value.strip():
                return value.strip()
    if match := _STDLIB.search(maps):
        return match[1]
    if exe and (match := _EXE_VERSION.search(exe)):
        return match[1]
    return None


def parse_metadata(text: str) -> tuple[str, str] | None:
    """(Name, Version) from a METADATA / PKG-INFO header (RFC 822 style, the headers end at a blank line)."""
    name = version = None
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        if key == "Name":
            name = value.strip()
        elif key == "Version":
            version = value.strip()
    return (name, version) if name and version else None


def _flag(argv: Sequence[str], *names: str) -> str | None:
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


@dataclass(frozen=True)
class LaunchFacts:
    """What SGLang's own flags in an argv say (defaults are SGLang's: device cuda, port 30000)."""

    launcher: bool  # argv runs sglang.launch_server (or the `sglang serve` entry point)
    model_path: str | None
    served_model_name: str | None
    device: str
    host: str
    port: int
    api_key: str | None

    @property
    def model(self) -> str | None:
        return self.served_model_name or self.model_path

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"


def launch_facts(argv: Sequence[str]) -> LaunchFacts:
    joined = " ".join(argv)
    port = _flag(argv, "--port")
    return LaunchFacts(
        launcher="sglang.launch_server" in joined
        or "sglang serve" in joined
        or "sglang/launch_server" in joined,
        model_path=_flag(argv, "--model-path", "--model"),
        served_model_name=_flag(argv, "--served-model-name"),
        device=_flag(argv, "--device") or "cuda",
        host=_flag(argv, "--host") or "127.0.0.1",
        port=int(port) if port and port.isdigit() else 30000,
        api_key=_flag(argv, "--api-key"),
    )


# Variables that decide a start-up, kept in launch.env (and replayed); the rest stays in process.env.
_LAUNCH_PREFIXES = (
    "NCCL_",
    "CUDA_",
    "SGLANG_",
    "SGL_",
    "TORCH_",
    "PYTORCH_",
    "TORCHINDUCTOR_",
    "TRITON_",
    "FLASHINFER_",
    "NVIDIA_",
    "GLOO_",
    "OMP_",
    "MKL_",
    "HF_",
    "HUGGING_FACE_",
    "TRANSFORMERS_",
    "TOKENIZERS_",
    "KIT_",
)
_LAUNCH_NAMES = {"MASTER_ADDR", "MASTER_PORT", "TP_SOCKET_IFNAME"}
# Paths of this host that mean nothing inside a replay's image (the replay mounts its own compile
# cache, kit/runtime/compile_cache.py, and its image has its own CUDA).
_HOST_ONLY = {
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_ROOT",
    "HF_HOME",
    "TRITON_HOME",
    "SGLANG_CACHE_DIR",
    "TORCH_EXTENSIONS_DIR",
    *COMPILE_CACHE_ENV,
}


def launch_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of a host process that decide a start-up (what a replay sets)."""
    return {
        k: v
        for k, v in sorted(env.items())
        if (k.startswith(_LAUNCH_PREFIXES) or k in _LAUNCH_NAMES) and k not in _HOST_ONLY
    }


# -- reading a process ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PythonEnv:
    exe: str | None  # as the process sees it, e.g. /usr/bin/python3.11
    python: str | None  # '3.11'
    site_packages: tuple[str, ...]  # as the process sees them, search order
    packages: dict[str, Package] = field(default_factory=dict)  # normalized name -> the first found
    why_none: str | None = None  # why no package could be read

    @property
    def source(self) -> str:
        return f"site-packages metadata of {self.exe or 'the interpreter'} ({', '.join(self.site_packages)})"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _candidate_dirs(env: Mapping[str, str], maps: str, python: str | None) -> list[str]:
    """site-packages folders in Python's search order: PYTHONPATH, the venv, what is mapped, the system's."""
    short = ".".join(python.split(".")[:2]) if python else None
    order: list[str] = [p for p in (env.get("PYTHONPATH") or "").split(":") if p]
    if env.get("VIRTUAL_ENV") and short:
        order.append(f"{env['VIRTUAL_ENV']}/lib/python{short}/site-packages")
    order += site_dirs_from_maps(maps)
    if short:
        order += [
            f"/usr/local/lib/python{short}/dist-packages",
            "/usr/lib/python3/dist-packages",
            f"/usr/lib/python{short}/site-packages",
            f"/usr/local/lib/python{short}/site-packages",
        ]
    unique: list[str] = []
    for folder in order:
        if folder not in unique:
            unique.append(folder)
    return unique


def _venv_cfg(pid: int, argv0: str | None) -> str | None:
    """pyvenv.cfg of the venv the process was started from (its argv[0] is the venv's python)."""
    if not argv0 or not argv0.startswith("/"):
        return None
    return _read(procs.host_path(pid, str(Path(argv0).parent.parent / "pyvenv.cfg")))


def read_python_env(pid: int) -> PythonEnv:
    base = procs.PROC / str(pid)
    try:
        exe = os.readlink(base / "exe")
    except OSError:
        exe = None
    maps = _read(base / "maps") or ""
    env = procs.read_environ(pid) or {}
    argv = procs.read_cmdline(pid) or []
    python = python_version(exe, maps, _venv_cfg(pid, argv[0] if argv else None))
    dirs = _candidate_dirs(env, maps, python)
    packages: dict[str, Package] = {}
    searched: list[str] = []
    for folder in dirs:
        where = procs.host_path(pid, folder)
        if not where.is_dir():
            continue
        searched.append(folder)
        for meta in sorted([*where.glob("*.dist-info/METADATA"), *where.glob("*.egg-info/PKG-INFO")]):
            parsed = parse_metadata(_read(meta) or "")
            if parsed and normalize(parsed[0]) not in packages:
                packages[normalize(parsed[0])] = Package(parsed[0], parsed[1])
    why = (
        None
        if packages
        else (f"no site-packages readable for pid {pid}" if not maps else "no metadata found")
    )
    return PythonEnv(exe, python, tuple(searched), packages, why)


def machine_section(machine: MachineFacts) -> dict:
    """The fingerprint's `host` section of a host process: the machine as its kernel reports it
    (kit.runtime.host.read_machine), no engine. Pure."""
    why = "a host process: no Docker engine ran it"
    memory = machine.memory_bytes
    memory_gib = round(memory / (1 << 30), 1) if memory is not None else None
    return {
        "kernel": machine.kernel,
        "os": machine.os or fp.unknown("/etc/os-release is not readable"),
        "arch": machine.arch,
        "cpus": machine.cpus or fp.unknown("not reported"),
        "memory_gib": memory_gib if memory_gib is not None else fp.unknown("/proc/meminfo is not readable"),
        "cgroup": machine.cgroup,
        "docker_engine": fp.unknown(why),
        "docker_api": fp.unknown(why),
        "compose": fp.unknown(why),
    }


def unit_facts(unit: str | None) -> dict:
    """The unit's file (with drop-ins) and Restart=, or why they are unknown."""
    from kit.runtime.unit import SystemdUnit, UnitProblem, restart_of, split_cat

    if unit is None:
        why = "the process runs in no systemd service"
        return {"unit": fp.unknown(why), "unit_file": fp.unknown(why), "restart": "no"}
    try:
        text = SystemdUnit(unit).unit_text()
    except UnitProblem as exc:
        return {"unit": unit, "unit_file": fp.unknown(str(exc)), "restart": fp.unknown(str(exc))}
    return {"unit": unit, "unit_file": text, "restart": restart_of(*split_cat(text))}


def versions_of(env: PythonEnv) -> dict:
    """The fingerprint's `versions` section from an environment's metadata (an image's field names)."""
    if not env.packages:
        return fp.versions_unknown(env.why_none or "no package metadata")
    labels = {"io.kit.pin.python": f"python{'.'.join(env.python.split('.')[:2])}"} if env.python else {}
    versions = fp.versions_from_lock(env.packages, labels, env.source)
    if not env.python:
        versions["python"] = fp.unknown("the interpreter's version could not be read")
    return versions


def started_iso(pid: int) -> str | None:
    import psutil

    try:
        return datetime.fromtimestamp(psutil.Process(pid).create_time(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def dialect_of(python: PythonEnv, pid: int) -> Any:
    """The dialect of the release the process runs, or unknown: never the one a target assumes."""
    from kit.dialects import dialect_for
    from kit.errors import KitError

    package = python.packages.get("sglang")
    if package is None:
        why = python.why_none or "no sglang package"
        return fp.unknown(f"the sglang release of pid {pid} could not be read ({why})")
    try:
        return dialect_for(package.version).name
    except KitError as exc:  # a release no dialect covers (or several)
        return fp.unknown(f"no dialect covers sglang {package.version} ({exc})")


def infer_target(argv: Sequence[str]) -> str | None:
    """The catalog target whose model path the argv serves, when exactly one does."""
    from kit.errors import KitError
    from kit.launch import list_targets, resolve

    model = launch_facts(argv).model_path
    if not model:
        return None
    found = []
    for target in list_targets():
        try:
            spec = resolve(target)
        except KitError:
            continue
        if model in (spec.model_path, spec.hf_repo):
            found.append(target)
    return found[0] if len(found) == 1 else None
