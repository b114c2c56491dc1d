"""nvidia-smi's text, read; NVML's inventory set against it, fact by fact (pure: text and data in,
rows out; tests/hostcheck/test_smi.py)."""

from __future__ import annotations

import contextlib
import csv
import io
import re

MIB = 1 << 20
SMI_FIELDS = ("index", "name", "uuid", "pci.bus_id", "memory.total", "driver_version", "compute_cap")


def parse_smi_csv(text: str) -> list[dict[str, str]]:
    """`nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits` -> one dict per GPU."""
    rows = []
    for row in csv.reader(io.StringIO(text)):
        if not row or not "".join(row).strip():
            continue
        cells = [c.strip() for c in row]
        rows.append(dict(zip(SMI_FIELDS, cells, strict=False)))
    return rows


def parse_smi_nvlinks(text: str) -> dict[int, int]:
    """`nvidia-smi nvlink -s`: active links per GPU index ('Link 3: <inactive>' does not count)."""
    links: dict[int, int] = {}
    gpu = None
    for line in text.splitlines():
        head = re.match(r"^GPU (\d+):", line)
        if head:
            gpu = int(head[1])
            links.setdefault(gpu, 0)
        elif gpu is not None and re.match(r"^\s*Link \d+:", line) and "inactive" not in line.lower():
            links[gpu] += 1
    return links


def smi_cuda_version(query_text: str) -> str | None:
    """'CUDA Version : 13.0' from `nvidia-smi -q`."""
    match = re.search(r"^\s*CUDA Version\s*:\s*(\S+)", query_text, re.M)
    return match[1] if match else None


def bus_id_key(bus_id: str | None) -> str | None:
    """'00000000:19:00.0' and '0000:19:00.0' name one device: domain as a number, the rest lower."""
    if not bus_id:
        return None
    parts = bus_id.strip().lower().split(":")
    if len(parts) == 3:
        with contextlib.suppress(ValueError):
            parts[0] = str(int(parts[0], 16))
    return ":".join(parts)


def compare_inventory(
    inventory: dict, smi_rows: list[dict[str, str]], smi_links: dict[int, int] | None, smi_cuda
):
    """Rows {index, field, nvml, nvidia_smi, agree, note} for every fact both sides give."""
    rows = [
        {
            "index": None,
            "field": "count",
            "nvml": len(inventory.get("devices") or ()),
            "nvidia_smi": len(smi_rows),
        },
        {
            "index": None,
            "field": "cuda_driver_version",
            "nvml": inventory.get("cuda_driver_version"),
            "nvidia_smi": smi_cuda,
        },
    ]
    by_index = {int(r["index"]): r for r in smi_rows if r.get("index", "").isdigit()}
    for device in inventory.get("devices") or ():
        smi = by_index.get(device["index"], {})
        memory = smi.get("memory.total", "")
        smi_mib = int(memory) if memory.isdigit() else None
        pairs = {  # field: (NVML's answer, nvidia-smi's)
            "name": (device["name"], smi.get("name")),
            "uuid": (device["uuid"], smi.get("uuid")),
            "memory_total_mib": (device["memory_total_bytes"] // MIB, smi_mib),
            "compute_capability": (device["compute_capability"], smi.get("compute_cap")),
            "pci_bus_id": (device["pci_bus_id"], smi.get("pci.bus_id")),
            "driver_version": (inventory.get("driver_version"), smi.get("driver_version")),
            "nvlinks": (device["nvlinks"], None if smi_links is None else smi_links.get(device["index"], 0)),
        }
        rows += [
            {"index": device["index"], "field": field, "nvml": nvml, "nvidia_smi": theirs}
            for field, (nvml, theirs) in pairs.items()
        ]
    for row in rows:
        a, b = row["nvml"], row["nvidia_smi"]
        if row["field"] == "pci_bus_id" and a != b and bus_id_key(a) == bus_id_key(b):
            row["agree"], row["note"] = True, "same device, spelled differently"
        else:
            row["agree"] = a == b
    return rows
