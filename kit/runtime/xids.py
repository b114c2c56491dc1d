"""Xids, NVIDIA's driver's error reports for a GPU: the ones that end a GPU's work (NVIDIA's Xid
catalog, kit/runtime/xids.toml, with the catalog's immediate action where it records one), as read
from NVML's events (kit/runtime/nvml.py) and the kernel's `NVRM: Xid` lines (kit/runtime/kernel_log.py).
Pure."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# The Xids that end a GPU's work (NVIDIA's Xid catalog; kit/runtime/xids.toml says where each is from),
# and the catalog's immediate action where the table records it.
_XIDS = tomllib.loads((Path(__file__).with_name("xids.toml")).read_text(encoding="utf-8"))
FATAL_XIDS: dict[int, str] = {int(code): row["meaning"] for code, row in _XIDS["fatal"].items()}
XID_ACTIONS: dict[int, str] = {
    int(code): row["action"] for code, row in _XIDS["fatal"].items() if "action" in row
}
ACTION_WORDS: dict[str, str] = dict(_XIDS["actions"])
# The kernel's words: `NVRM: Xid (PCI:0000:01:00): 119, pid=..., Timeout after 45s ...`.
_KERNEL_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+),?\s*(.*)")


def pci_key(bus_id: str | None) -> str | None:
    """A PCI address as one spelling, 'DDDD:BB:DD' (hex, lower case): NVML's busId
    '00000000:01:00.0' and the kernel's 'PCI:0000:01:00' name the same GPU."""
    if not bus_id:
        return None
    parts = bus_id.strip().removeprefix("PCI:").split(".")[0].split(":")
    try:
        numbers = [int(p, 16) for p in parts]
    except ValueError:
        return None
    if len(numbers) == 2:  # 'BB:DD': domain 0
        numbers = [0, *numbers]
    if len(numbers) != 3:
        return None
    domain, bus, device = numbers
    return f"{domain:04x}:{bus:02x}:{device:02x}"


@dataclass(frozen=True)
class XidEvent:
    """An Xid the driver reported for a GPU: through NVML's critical-error events or the kernel log."""

    xid: int
    index: int | None = None
    """The NVML index (None where the kernel log's PCI address matched no GPU NVML lists)."""
    pci: str | None = None
    source: str = "nvml"
    """'nvml' (an event) or 'kernel log' (an `NVRM: Xid` line)."""
    wall: float | None = None
    """When the kernel logged it (epoch seconds), where known."""

    @property
    def fatal(self) -> bool:
        return self.xid in FATAL_XIDS

    @property
    def action(self) -> str:
        """What NVIDIA's Xid catalog says to do first, in words (its immediate action)."""
        code = XID_ACTIONS.get(self.xid)
        if code is None:
            return "action: see NVIDIA's Xid catalog"
        return f"NVIDIA's Xid catalog: {code}, {ACTION_WORDS.get(code, code)}"

    def describe(self) -> str:
        where = f"GPU {self.index}" if self.index is not None else f"PCI {self.pci or '?'}"
        told = "NVML's Xid event" if self.source == "nvml" else "the kernel log"
        if self.fatal:  # "fatal Xid": the gpu-lost cause's mark (kit/logs/causes.toml)
            return f"fatal Xid {self.xid} on {where} ({FATAL_XIDS[self.xid]}; {self.action}; {told})"
        return f"Xid {self.xid} on {where} (not fatal in NVIDIA's Xid catalog; {told})"


def kernel_xid(line: str, wall: float | None = None) -> XidEvent | None:
    """The Xid of one kernel log line (`dmesg`, `journalctl -k`, /dev/kmsg), or None for any other."""
    found = _KERNEL_XID.search(line)
    if found is None:
        return None
    return XidEvent(int(found.group(2)), pci=pci_key(found.group(1)), source="kernel log", wall=wall)


def xid_error(events: Iterable[XidEvent]) -> str | None:
    """One line naming the fatal Xids seen (the gpu-lost cause's evidence), or None without one."""
    fatal = [e.describe() for e in events if e.fatal]
    return f"gpu error: {'; '.join(dict.fromkeys(fatal))}" if fatal else None
