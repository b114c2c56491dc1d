"""nvidia-smi's text, read; NVML's inventory set against it fact by fact (kit/hostcheck/smi.py)."""

from __future__ import annotations

from kit.hostcheck.smi import (
    bus_id_key,
    compare_inventory,
    parse_smi_csv,
    parse_smi_nvlinks,
    smi_cuda_version,
)

SMI_CSV = "0, NVIDIA H200, GPU-1111, 00000000:19:00.0, 143771, 580.95.05, 9.0\n"
SMI_NVLINK = "\n".join(
    [
        "GPU 0: NVIDIA H200 (UUID: GPU-1111)",
        "\t Link 0: 26.562 GB/s",
        "\t Link 1: 26.562 GB/s",
        "\t Link 2: <inactive>",
    ]
)


def test_nvidia_smi_text_is_read():
    assert parse_smi_csv(SMI_CSV) == [
        {
            "index": "0",
            "name": "NVIDIA H200",
            "uuid": "GPU-1111",
            "pci.bus_id": "00000000:19:00.0",
            "memory.total": "143771",
            "driver_version": "580.95.05",
            "compute_cap": "9.0",
        }
    ]
    assert parse_smi_nvlinks(SMI_NVLINK) == {0: 2}
    assert smi_cuda_version("Driver Version : 580.95.05\nCUDA Version                   : 13.0\n") == "13.0"
    assert smi_cuda_version("Driver Version : 580.95.05\n") is None
    assert bus_id_key("00000000:19:00.0") == bus_id_key("0000:19:00.0")
    assert bus_id_key("0000:19:00.0") != bus_id_key("0000:1a:00.0")


def test_nvml_against_nvidia_smi_names_each_disagreement():
    inventory = {
        "driver_version": "580.95.05",
        "cuda_driver_version": "13.0",
        "devices": [
            {
                "index": 0,
                "name": "NVIDIA H200",
                "uuid": "GPU-1111",
                "compute_capability": "9.0",
                "memory_total_bytes": 143771 * (1 << 20) + 5,
                "pci_bus_id": "0000:19:00.0",
                "nvlinks": 18,
            }
        ],
    }
    rows = compare_inventory(inventory, parse_smi_csv(SMI_CSV), {0: 2}, "13.0")
    differ = {r["field"] for r in rows if not r["agree"]}
    assert differ == {"nvlinks"}
    bus = next(r for r in rows if r["field"] == "pci_bus_id")
    assert bus["note"] == "same device, spelled differently"
    assert {r["field"] for r in rows} >= {
        "count",
        "name",
        "uuid",
        "memory_total_mib",
        "compute_capability",
        "driver_version",
    }
