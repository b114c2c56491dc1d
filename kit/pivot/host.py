"""What `kit doctor` reads from the host, as plain data: pure parsers, and one reader that calls them.

Parsers (text in, data out; tested on captured text):
    parse_lspci(text)              `lspci -D -vvv` -> {BDF: PciDevice(ACS control flags, ...)}
    upstream_bridges(sysfs_path)   /sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0 -> ['0000:00:01.1']
    iommu_mode(cmdline, ...)       command line + IOMMU units + group types -> off|passthrough|translated
    scan_model_cache(hub, repo)    the Hugging Face cache's folder for one repo -> complete, missing shards

`read_host(...)` gathers everything into `HostFacts`, recording for each part why it could not be read
(no driver, no engine, lspci missing, not root) instead of raising: doctor must run anywhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.runtime.nvml import GpuInventory, open_nvml

# -- PCIe ------------------------------------------------------------------------------------------

_BDF = re.compile(r"^([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(.*)$")
_BDF_ANYWHERE = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
# ACS bits that send peer-to-peer requests up to the root complex instead of across the switch.
REDIRECTING = ("SrcValid", "ReqRedir", "CmpltRedir")


@dataclass(frozen=True)
class PciDevice:
    bdf: str
    description: str
    acs_control: dict[str, bool] | None = None
    """ACSCtl flags ('SrcValid': True, ...) where the device has the capability and it was readable."""
    access_denied: bool = False
    """lspci could not read the capabilities (not root)."""

    @property
    def redirecting(self) -> tuple[str, ...]:
        return tuple(flag for flag in REDIRECTING if (self.acs_control or {}).get(flag))


def parse_lspci(text: str) -> dict[str, PciDevice]:
    devices: dict[str, PciDevice] = {}
    current: str | None = None
    description = ""
    acs: dict[str, bool] | None = None
    denied = False

    def close() -> None:
        if current is not None:
            devices[current] = PciDevice(current, description, acs, denied)

    for line in text.splitlines():
        head = _BDF.match(line)
        if head:
            close()
            current, description, acs, denied = head.group(1).lower(), head.group(2), None, False
            continue
        stripped = line.strip()
        if stripped.startswith("ACSCtl:"):
            flags = {}
            for token in stripped.removeprefix("ACSCtl:").split():
                if token[-1:] in "+-":
                    flags[token[:-1]] = token.endswith("+")
            acs = flags
        elif "<access denied>" in stripped:
            denied = True
    close()
    return devices


def upstream_bridges(sysfs_path: str) -> list[str]:
    """The PCI functions above a device, nearest last, from its resolved /sys/bus/pci/devices path."""
    parts = [p.lower() for p in Path(sysfs_path).parts if _BDF_ANYWHERE.match(p)]
    return parts[:-1]


def nvml_bdf(bus_id: str | None) -> str | None:
    """NVML's '00000000:17:00.0' -> lspci's '0000:17:00.0'."""
    if not bus_id:
        return None
    domain, _, rest = bus_id.partition(":")
    return f"{domain[-4:]}:{rest}".lower() if rest else None


# -- IOMMU -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IommuState:
    mode: str
    """off | passthrough | translated | unknown"""
    why: str
    cmdline_flags: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    group_types: tuple[str, ...] = ()


_IOMMU_FLAGS = re.compile(r"^(intel_iommu|amd_iommu|iommu|iommu\.passthrough|iommu\.strict)=(\S+)$")


def iommu_mode(cmdline: str | None, units: list[str], group_types: list[str]) -> IommuState:
    """How DMA (and peer-to-peer traffic) passes the IOMMU: not at all, 1:1, or translated."""
    flags = tuple(t for t in (cmdline or "").split() if _IOMMU_FLAGS.match(t))
    values = dict(t.split("=", 1) for t in flags)
    kinds = tuple(sorted(set(group_types)))
    off = values.get("iommu") == "off" or "off" in (values.get("intel_iommu"), values.get("amd_iommu"))
    if not units and not group_types:
        why = "no IOMMU unit in /sys/class/iommu" + (" (switched off on the command line)" if off else "")
        return IommuState("off", why, flags, tuple(units), kinds)
    if group_types:
        if all(kind == "identity" for kind in group_types):
            return IommuState(
                "passthrough", "every IOMMU group is identity-mapped", flags, tuple(units), kinds
            )
        translated = sorted({k for k in group_types if k.startswith("DMA")})
        if translated:
            return IommuState(
                "translated", f"IOMMU groups of type {', '.join(translated)}", flags, tuple(units), kinds
            )
    if values.get("iommu") == "pt" or values.get("iommu.passthrough") == "1":
        return IommuState("passthrough", "iommu=pt on the kernel command line", flags, tuple(units), kinds)
    if off:
        return IommuState("off", "switched off on the kernel command line", flags, tuple(units), kinds)
    return IommuState("unknown", "IOMMU units present, group types unreadable", flags, tuple(units), kinds)


# -- the Hugging Face cache ------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelCache:
    hub: str
    repo: str
    present: bool
    complete: bool
    snapshot: str | None = None
    files: int = 0
    bytes: int = 0
    missing: tuple[str, ...] = ()
    incomplete_blobs: int = 0
    """Blobs still named *.incomplete: a download that was interrupted or is running."""


def repo_folder(repo_id: str) -> str:
    return "models--" + repo_id.replace("/", "--")


def _snapshot(folder: Path) -> Path | None:
    ref = folder / "refs" / "main"
    with contextlib.suppress(OSError):
        named = folder / "snapshots" / ref.read_text().strip()
        if named.is_dir():
            return named
    snapshots = sorted(
        (p for p in (folder / "snapshots").glob("*") if p.is_dir()), key=lambda p: p.stat().st_mtime
    )
    return snapshots[-1] if snapshots else None


def scan_model_cache(hub: Path, repo_id: str) -> ModelCache:
    """Is REPO_ID in the cache and complete: its weight index's every shard present (or one file)."""
    folder = hub / repo_folder(repo_id)
    incomplete = len(list((folder / "blobs").glob("*.incomplete"))) if folder.is_dir() else 0
    snapshot = _snapshot(folder) if folder.is_dir() else None
    if snapshot is None:
        return ModelCache(str(hub), repo_id, False, False, incomplete_blobs=incomplete)
    files = [p for p in snapshot.rglob("*") if p.is_file()]  # is_file follows the blob symlinks
    size = sum(p.stat().st_size for p in files)
    names = {str(p.relative_to(snapshot)) for p in files}
    expected: set[str] = set()
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if index in names:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                expected |= set(json.loads((snapshot / index).read_text())["weight_map"].values())
    if not expected:
        singles = {"model.safetensors", "pytorch_model.bin"} & names
        expected = singles or {"model.safetensors"}
    missing = tuple(sorted(expected - names))
    complete = not missing and "config.json" in names and incomplete == 0
    return ModelCache(str(hub), repo_id, True, complete, snapshot.name, len(files), size, missing, incomplete)


# -- everything ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NvmlFacts:
    inventory: GpuInventory
    usage: tuple[tuple[int, int, int | None, int], ...] = ()
    """(index, memory used, utilisation %, processes) per device."""
    p2p: dict[str, dict[str, str]] = field(default_factory=dict)
    topology: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class DockerFacts:
    error: str | None = None
    version: str | None = None
    runtimes: tuple[str, ...] = ()
    default_runtime: str | None = None
    cdi_dirs: tuple[str, ...] = ()
    image_present: bool | None = None


@dataclass(frozen=True)
class HostFacts:
    nvml: NvmlFacts
    docker: DockerFacts
    toolkit_binaries: tuple[str, ...] = ()
    cdi_specs: tuple[str, ...] = ()
    """CDI spec files that describe nvidia.com/gpu devices."""
    lspci: dict[str, PciDevice] | None = None
    lspci_error: str | None = None
    gpu_paths: dict[str, list[str]] = field(default_factory=dict)
    """GPU BDF -> the bridges above it (from sysfs)."""
    iommu: IommuState | None = None
    shm_total: int | None = None
    shm_free: int | None = None
    memlock: int | None = None
    """Soft RLIMIT_MEMLOCK in bytes; -1 unlimited."""
    disk_path: str | None = None
    disk_free: int | None = None
    model_cache: ModelCache | None = None
    port: int | None = None
    port_free: bool | None = None
    port_error: str | None = None


def read_nvml(lib: Any | None = None) -> NvmlFacts:
    from kit.runtime.nvml import read_inventory

    gpus = open_nvml(lib)
    if gpus is None:
        return NvmlFacts(read_inventory(lib))
    try:
        return NvmlFacts(gpus.inventory(), gpus.device_usage(), gpus.p2p_matrix(), gpus.topology())
    finally:
        gpus.close()


def read_docker(image_ref: str | None) -> DockerFacts:
    from kit.errors import KitError
    from kit.runtime.engine import client, image_exists

    try:
        info = client().info()
        present = image_exists(image_ref) if image_ref else None
    except KitError as exc:
        return DockerFacts(error=exc.one_line())
    except Exception as exc:  # the engine answered ping but not info: say so, do not crash doctor
        return DockerFacts(error=f"{type(exc).__name__}: {exc}")
    return DockerFacts(
        version=info.get("ServerVersion"),
        runtimes=tuple(sorted(info.get("Runtimes") or {})),
        default_runtime=info.get("DefaultRuntime"),
        cdi_dirs=tuple(info.get("CDISpecDirs") or ()),
        image_present=present,
    )


CDI_DIRS = ("/etc/cdi", "/var/run/cdi")


def read_cdi_specs(dirs: tuple[str, ...]) -> tuple[str, ...]:
    found = []
    for directory in dirs:
        for path in sorted(Path(directory).glob("*")):
            if path.suffix in (".yaml", ".yml", ".json"):
                with contextlib.suppress(OSError):
                    if "nvidia.com/gpu" in path.read_text(errors="replace"):
                        found.append(str(path))
    return tuple(found)


def read_lspci() -> tuple[dict[str, PciDevice] | None, str | None]:
    binary = shutil.which("lspci")
    if binary is None:
        return None, "lspci is not installed (apt-get install pciutils)"
    try:
        done = subprocess.run([binary, "-D", "-vvv"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"lspci failed: {exc}"
    if done.returncode != 0:
        return None, f"lspci exited {done.returncode}: {done.stderr.strip()[:200]}"
    return parse_lspci(done.stdout), None


def read_gpu_paths(bdfs: list[str], sys_root: Path = Path("/sys")) -> dict[str, list[str]]:
    paths: dict[str, list[str]] = {}
    for bdf in bdfs:
        with contextlib.suppress(OSError):
            paths[bdf] = upstream_bridges(os.path.realpath(sys_root / "bus" / "pci" / "devices" / bdf))
    return paths


def read_iommu(gpu_bdfs: list[str], sys_root: Path = Path("/sys"), proc: Path = Path("/proc")) -> IommuState:
    cmdline = None
    with contextlib.suppress(OSError):
        cmdline = (proc / "cmdline").read_text()
    units = (
        sorted(p.name for p in (sys_root / "class" / "iommu").glob("*"))
        if (sys_root / "class").is_dir()
        else []
    )
    types: list[str] = []
    groups = (
        [sys_root / "bus" / "pci" / "devices" / bdf / "iommu_group" for bdf in gpu_bdfs]
        if gpu_bdfs
        else sorted((sys_root / "kernel" / "iommu_groups").glob("*"))
    )
    for group in groups:
        with contextlib.suppress(OSError):
            types.append((group / "type").read_text().strip())
    return iommu_mode(cmdline, units, types)


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


def read_host(
    *,
    image_ref: str | None = None,
    hf_cache: str | None = None,
    hf_repo: str | None = None,
    port: int | None = None,
    nvml_lib: Any | None = None,
) -> HostFacts:
    nvml = read_nvml(nvml_lib)
    gpu_bdfs = [b for d in nvml.inventory.devices if (b := nvml_bdf(d.pci_bus_id))]
    lspci, lspci_error = read_lspci()
    disk_path, disk_free = read_disk(hf_cache) if hf_cache else (None, None)
    cache = scan_model_cache(Path(hf_cache) / "hub", hf_repo) if hf_cache and hf_repo else None
    port_free, port_error = read_port(port) if port else (None, None)
    shm_total, shm_free = read_shm()
    docker = read_docker(image_ref)
    binaries = tuple(
        b
        for b in ("nvidia-ctk", "nvidia-container-runtime", "nvidia-container-runtime-hook")
        if shutil.which(b)
    )
    return HostFacts(
        nvml=nvml,
        docker=docker,
        toolkit_binaries=binaries,
        cdi_specs=read_cdi_specs(tuple(dict.fromkeys((*docker.cdi_dirs, *CDI_DIRS)))),
        lspci=lspci,
        lspci_error=lspci_error,
        gpu_paths=read_gpu_paths(gpu_bdfs),
        iommu=read_iommu(gpu_bdfs),
        shm_total=shm_total,
        shm_free=shm_free,
        memlock=read_memlock(),
        disk_path=disk_path,
        disk_free=disk_free,
        model_cache=cache,
        port=port,
        port_free=port_free,
        port_error=port_error,
    )
