"""The GPUs' PCIe paths and the IOMMU: what peer-to-peer traffic crosses. Parsers are pure (tested on
captured text); the readers return data and a reason instead of raising.

    parse_lspci(text)              `lspci -D -vvv` -> {BDF: PciDevice(ACS control flags, ...)}
    upstream_bridges(sysfs_path)   /sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0 -> ['0000:00:01.1']
    iommu_mode(cmdline, ...)       command line + IOMMU units + group types -> off|passthrough|translated
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

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
