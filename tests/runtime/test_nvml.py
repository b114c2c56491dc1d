"""The NVML adapter over a fake pynvml: inventory, a container's GPU usage by host PID, P2P, topology."""

from __future__ import annotations

import pytest

from kit.runtime.nvml import nvml_missing, open_nvml, read_inventory
from kit.scenarios.fake_nvml import FakeNvml

GiB = 1 << 30


def four_cards(**kwargs) -> FakeNvml:
    return FakeNvml.of(4, **kwargs)


def test_inventory_reads_driver_cuda_and_every_device():
    inventory = read_inventory(four_cards())
    assert (inventory.driver_version, inventory.cuda_driver_version) == ("580.95.05", "13.0")
    assert inventory.count == 4 and inventory.error is None
    first = inventory.devices[0]
    assert first.name == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    assert first.compute_capability == "12.0"
    assert first.memory_total_bytes == 96 * GiB
    assert first.nvlinks == 0 and first.pci_bus_id.endswith(":00.0")
    assert len({d.uuid for d in inventory.devices}) == 4


def test_no_driver_is_an_empty_inventory_that_says_why():
    inventory = read_inventory(FakeNvml(available=False))
    assert inventory.count == 0 and "NVML is not available" in inventory.error
    assert "NVML is not available" in nvml_missing(FakeNvml(available=False))
    assert nvml_missing(FakeNvml()) == "NVML sees 0 devices"
    assert open_nvml(FakeNvml(available=False)) is None


def test_usage_counts_only_the_containers_processes():
    nvml = four_cards()
    nvml.set_process(0, pid=4242, used_bytes=GiB)  # ours
    nvml.set_process(1, pid=4243, used_bytes=2 * GiB)  # ours
    nvml.set_process(1, pid=9999, used_bytes=40 * GiB)  # someone else's job on the same card
    nvml.set_utilization(1, 100)
    gpus = open_nvml(nvml)
    usage = gpus.usage([4242, 4243, 1])
    assert usage.memory_bytes == 3 * GiB
    assert [r.index for r in usage.readings] == [0, 1]
    assert usage.utilization == (0, 100)
    assert not any(r.whole_device for r in usage.readings)


def test_without_per_process_figures_the_whole_device_stands_in_and_says_so():
    nvml = four_cards()
    nvml.set_process(2, pid=77, used_bytes=None)  # vGPU/WSL: NVML gives no per-process number
    nvml.devices[2].other_used = 5 * GiB
    reading = open_nvml(nvml).usage([77]).readings[0]
    assert reading.whole_device and reading.memory_used_bytes == 5 * GiB


def test_p2p_matrix_and_topology_in_nvidia_smi_words():
    nvml = four_cards(p2p={(0, 1): 1}, topology={(0, 1): 10, (1, 0): 10})
    gpus = open_nvml(nvml)
    p2p = gpus.p2p_matrix()
    assert p2p["1"]["2"] == "OK"
    assert p2p["0"]["1"] == "read chipset not supported, write chipset not supported"
    topology = gpus.topology()
    assert topology["0"]["1"] == "PIX" and topology["2"]["3"] == "PHB"


def test_nvlink_cards_show_nv_links():
    nvml = FakeNvml.of(2, name="NVIDIA H100 80GB HBM3", capability=(9, 0), memory_gib=80)
    for device in nvml.devices:
        device.nvlinks = 18
    gpus = open_nvml(nvml)
    assert gpus.topology()["0"]["1"] == "NV18"
    assert gpus.inventory().devices[0].nvlinks == 18


def test_device_usage_sees_every_process():
    nvml = four_cards()
    nvml.set_process(3, pid=1, used_bytes=GiB)
    nvml.set_utilization(3, 100)
    rows = open_nvml(nvml).device_usage()
    assert rows[3] == (3, GiB, 100, 1) and rows[0] == (0, 0, 0, 0)


@pytest.mark.gpu
def test_the_real_nvml_reads_this_hosts_gpus():
    inventory = read_inventory()
    assert inventory.error is None and inventory.count >= 1
    assert inventory.driver_version and inventory.cuda_driver_version
    assert all(d.memory_total_bytes > 0 and d.uuid.startswith(("GPU-", "MIG-")) for d in inventory.devices)
