"""The NVML adapter over a fake pynvml: inventory, a container's GPU usage by host PID, P2P, topology;
processes counted once per PID; every call guarded, a lost GPU a fact rather than an exception."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit.runtime.kernel_log import KernelLog, parse_kmsg
from kit.runtime.nvml import lost_note, nvml_missing, open_nvml, read_inventory, xid_note
from kit.runtime.xids import kernel_xid, pci_key, xid_error
from kit.scenarios.fake_nvml import (
    FakeKernelLog,
    FakeNvml,
    NVMLError_GpuIsLost,
    NVMLError_NotSupported,
    NVMLError_ResetRequired,
    NVMLError_Unknown,
)

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


def test_a_process_in_both_the_compute_and_the_graphics_list_counts_once():
    nvml = four_cards()
    nvml.set_process(0, pid=4242, used_bytes=3 * GiB, graphics=True)  # e.g. a CUDA-GL interop context
    nvml.set_process(0, pid=4243, used_bytes=GiB)
    gpus = open_nvml(nvml)
    reading = gpus.usage([4242, 4243]).readings[0]
    assert reading.processes == 2 and reading.memory_used_bytes == 4 * GiB
    assert gpus.device_usage()[0][3] == 2


def test_one_failing_call_costs_that_fact_only():
    nvml = four_cards()
    nvml.fail("nvmlDeviceGetUtilizationRates", gpu=1)
    nvml.fail("nvmlDeviceGetPciInfo")  # every GPU
    nvml.fail("nvmlDeviceGetGraphicsRunningProcesses", gpu=0)
    nvml.set_process(1, pid=5, used_bytes=GiB)
    gpus = open_nvml(nvml)
    inventory = gpus.inventory()
    assert inventory.count == 4 and not inventory.lost
    assert all(d.pci_bus_id is None for d in inventory.devices)
    reading = gpus.usage([5]).readings[0]
    assert reading.utilization_pct is None and reading.memory_used_bytes == GiB


@pytest.mark.parametrize("error", [NVMLError_GpuIsLost, NVMLError_ResetRequired, NVMLError_Unknown])
def test_a_gpu_lost_before_it_is_opened_is_listed_not_raised(error):
    nvml = four_cards()
    nvml.lose(gpu=2, error=error())
    gpus = open_nvml(nvml)
    assert gpus is not None and gpus.count == 4
    inventory = gpus.inventory()
    assert [d.index for d in inventory.devices] == [0, 1, 3]
    assert [(g.index, g.error, g.lost) for g in inventory.lost] == [(2, error.words, True)]
    assert "2" not in gpus.p2p_matrix() and "2" not in gpus.topology()["0"]
    assert [row[0] for row in gpus.device_usage()] == [0, 1, 3]
    assert read_inventory(nvml).lost[0].index == 2


def test_a_gpu_lost_while_a_container_is_watched_becomes_part_of_the_reading_and_the_note():
    nvml = four_cards()
    for gpu in range(4):
        nvml.set_process(gpu, pid=100 + gpu, used_bytes=GiB)
    gpus = open_nvml(nvml)
    assert len(gpus.usage([100, 101, 102, 103]).readings) == 4
    nvml.lose(gpu=1)  # the P2P hang took it: every call on it now says GPU_IS_LOST
    usage = gpus.usage([100, 101, 102, 103])
    assert [r.index for r in usage.readings] == [0, 2, 3] and [g.index for g in usage.lost] == [1]
    note = lost_note(gpus)
    assert note.startswith("NVML: GPU 1: GPU is lost") and "nvidia-smi -r -i 1" in note
    assert lost_note(open_nvml(four_cards())) is None and lost_note(None) is None


def test_a_refused_required_call_is_recorded_as_an_unreadable_gpu_not_a_lost_one():
    nvml = four_cards()
    nvml.fail("nvmlDeviceGetUUID", gpu=3, error=NVMLError_NotSupported())
    inventory = read_inventory(nvml)
    assert [d.index for d in inventory.devices] == [0, 1, 2]
    assert [(g.index, g.lost) for g in inventory.lost] == [(3, False)]


CALLS = [
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetP2PStatus",
    "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetHandleByIndex",
]
ERRORS = [NVMLError_GpuIsLost, NVMLError_ResetRequired, NVMLError_Unknown, NVMLError_NotSupported]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(CALLS), st.one_of(st.none(), st.integers(0, 3)), st.sampled_from(ERRORS)),
        max_size=5,
    )
)
def test_no_planted_nvml_failure_escapes_the_adapter(failures):
    """Whatever call fails on whichever GPU, every reading returns data (doctor and kit up never see a
    traceback); a device that fails is either read without that fact or listed as lost/unreadable."""
    nvml = four_cards()
    nvml.set_process(0, pid=7, used_bytes=GiB)
    for call, gpu, error in failures:
        if call == "nvmlDeviceGetHandleByIndex" and gpu is None:
            continue  # the whole library refusing is "no NVML here", covered above
        nvml.fail(call, gpu=gpu, error=error())
    gpus = open_nvml(nvml)
    assert gpus is not None
    inventory = gpus.inventory()
    gpus.usage([7])
    gpus.device_usage()
    gpus.p2p_matrix()
    gpus.topology()
    listed = {d.index for d in inventory.devices} | {g.index for g in inventory.lost}
    assert listed == {0, 1, 2, 3}


@pytest.mark.gpu
def test_the_real_nvml_reads_this_hosts_gpus():
    inventory = read_inventory()
    assert inventory.error is None and inventory.count >= 1
    assert inventory.driver_version and inventory.cuda_driver_version
    assert all(d.memory_total_bytes > 0 and d.uuid.startswith(("GPU-", "MIG-")) for d in inventory.devices)


# -- Xid critical-error events ------------------------------------------------------------------------


def test_an_xid_event_is_read_in_the_sampler_and_becomes_the_readings_gpu_error():
    nvml = four_cards()
    nvml.set_process(gpu=2, pid=4242, used_bytes=GiB)
    gpus = open_nvml(nvml)
    assert gpus.usage([4242]).error is None  # nothing reported yet: no error
    assert nvml.registered == {i: nvml.nvmlEventTypeXidCriticalError for i in range(4)}
    nvml.xid(gpu=2, code=119)
    nvml.xid(gpu=0, code=13)  # an application's own fault (graphics engine exception): not fatal
    usage = gpus.usage([4242])
    assert [(x.xid, x.index) for x in usage.xids] == [(119, 2), (13, 0)]
    assert usage.error == (
        "gpu error: fatal Xid 119 on GPU 2 (GSP RPC timeout; action: see NVIDIA's Xid catalog; "
        "NVML's Xid event)"
    )
    assert gpus.usage([4242]).error == usage.error  # kept: the verdict may come minutes later
    assert not nvml.events  # every waiting event was taken, none waited for (timeout 0)


@pytest.mark.parametrize("code", [8, 48, 62, 74, 79, 92, 94, 95, 109, 119, 120, 154])
def test_every_fatal_xid_of_nvidias_catalog_is_gpu_lost_evidence(code):
    nvml = four_cards()
    nvml.set_process(gpu=1, pid=7, used_bytes=GiB)
    gpus = open_nvml(nvml)
    gpus.usage([7])  # the watch's first sample registers for the events
    nvml.xid(gpu=1, code=code)
    assert f"fatal Xid {code} on GPU 1" in gpus.usage([7]).error


def test_a_driver_that_offers_no_events_is_a_note_not_an_error():
    nvml = four_cards()
    nvml.fail("nvmlDeviceRegisterEvents")  # NVML_ERROR_NOT_SUPPORTED
    nvml.set_process(gpu=0, pid=7, used_bytes=GiB)
    gpus = open_nvml(nvml)
    usage = gpus.usage([7])
    assert usage.readings and usage.xids == () and usage.error is None
    assert "not offered" in gpus.events_note and "Not Supported" in gpus.events_note
    nvml.fail("nvmlEventSetCreate")
    other = open_nvml(nvml)
    assert other.usage([7]).error is None and "not offered" in other.events_note


def test_kernel_log_xid_lines_as_the_driver_prints_them():
    # NVIDIA/open-gpu-kernel-modules#1159 (Xid 8 on an RTX PRO 6000 under SGLang) and #1045 (Xid 119)
    xid8 = kernel_xid("NVRM: Xid (PCI:0000:01:00): 8, pid=48694, name=python3, channel 0x00000008")
    xid119 = kernel_xid(
        "kernel: NVRM: Xid (PCI:0000:2b:00): 119, pid=1012, name=nvidia-smi, "
        "Timeout after 45s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL)"
    )
    assert (xid8.xid, xid8.pci, xid8.fatal) == (8, "0000:01:00", True)
    assert xid119.xid == 119 and "fatal Xid 119 on PCI 0000:2b:00 (GSP RPC timeout" in xid119.describe()
    assert kernel_xid("NVRM: GPU at PCI:0000:2b:00: GPU-0b11d014") is None
    assert xid_error([kernel_xid("NVRM: Xid (PCI:0000:01:00): 13, Graphics Exception")]) is None


# -- which Xids are the server's, and the ones NVML's events cannot have (issue 38) ---------------------

KMSG_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "kernel" / "kmsg-xid.txt"


def test_xid_8s_action_is_the_catalogs_restart_app_not_a_reset():
    """NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), Xid 8
    ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT: immediate action RESTART_APP."""
    nvml = four_cards()
    nvml.set_process(gpu=1, pid=7, used_bytes=GiB)
    gpus = open_nvml(nvml)
    gpus.usage([7])
    nvml.xid(gpu=1, code=8)
    error = gpus.usage([7]).error
    assert "fatal Xid 8 on GPU 1 (GPU stopped processing" in error
    assert (
        "NVIDIA's Xid catalog: RESTART_APP, restart the server; the catalog asks no GPU reset for it" in error
    )
    assert "reset" not in error.split("RESTART_APP")[0]


def test_a_fatal_xid_on_a_gpu_the_server_does_not_use_is_not_its_error():
    nvml = four_cards()
    nvml.set_process(gpu=0, pid=7, used_bytes=GiB)  # the server: GPU 0 only
    gpus = open_nvml(nvml)
    gpus.usage([7])
    nvml.xid(gpu=3, code=79)  # another workload's GPU falls off the bus
    usage = gpus.usage([7])
    assert [(x.xid, x.index) for x in usage.xids] == [(79, 3)] and usage.server_gpus == (0,)
    assert usage.error is None
    assert "not the server's GPUs, left out: fatal Xid 79 on GPU 3" in xid_note(gpus)
    nvml.xid(gpu=0, code=79)
    assert "fatal Xid 79 on GPU 0" in gpus.usage([7]).error


def test_an_xid_before_nvmls_registration_comes_from_the_kernel_log_alone():
    nvml = four_cards()
    nvml.set_process(gpu=2, pid=7, used_bytes=GiB)
    nvml.xid(gpu=2, code=119)  # before anyone registered: NVML keeps no event, the kernel logs it
    blind = open_nvml(nvml)
    assert blind.usage([7]).error is None  # NVML's events alone miss it
    assert "before them: the kernel log not read" in xid_note(blind)
    gpus = open_nvml(nvml)
    gpus.read_kernel_from(FakeKernelLog(nvml))
    usage = gpus.usage([7])
    assert usage.error == (
        "gpu error: fatal Xid 119 on GPU 2 (GSP RPC timeout; action: see NVIDIA's Xid catalog; "
        "the kernel log)"
    )
    assert "NVML's Xid events from " in xid_note(gpus) and "before them: the kernel log" in xid_note(gpus)
    # After the registration the same Xid comes both ways: NVML's event is kept, the line is not doubled.
    nvml.xid(gpu=2, code=120)
    assert [(x.xid, x.source) for x in gpus.usage([7]).xids] == [(119, "kernel log"), (120, "nvml")]


def test_recorded_kernel_lines_read_as_kmsg_matched_to_nvmls_gpus_by_pci_address(tmp_path):
    """Records as /dev/kmsg gives them (Documentation/ABI/testing/dev-kmsg), with the driver's own
    Xid lines (NVIDIA/open-gpu-kernel-modules#1045: Xid 119; #1159: Xid 8); the fake host's GPU 1 is
    at 0000:37:00, GPU 3 at 0000:77:00."""
    boot = 1_700_000_000.0
    assert parse_kmsg("4,11021,61000000,-;NVRM: Xid (PCI:0000:77:00): 8, pid=1", boot) == (
        boot + 61.0,
        "NVRM: Xid (PCI:0000:77:00): 8, pid=1",
    )
    assert parse_kmsg(" DEVICE=+pci:0000:37:00.0", boot) is None
    log = KernelLog(since_wall=None, path=str(KMSG_FIXTURE), journal=False)
    lines = log.read()
    assert "from boot" in log.note and len(lines) == 5 and log.read() == []  # nothing new since
    assert all(wall >= log._boot_wall for wall, _ in lines)
    nvml = four_cards()
    nvml.set_process(gpu=1, pid=7, used_bytes=GiB)
    gpus = open_nvml(nvml)
    gpus.read_kernel_from(KernelLog(since_wall=None, path=str(KMSG_FIXTURE), journal=False))
    usage = gpus.usage([7])
    assert [(x.xid, x.index, x.pci) for x in usage.xids] == [
        (119, 1, "0000:37:00"),
        (8, 3, "0000:77:00"),
        (13, 0, "0000:17:00"),
    ]
    assert usage.error.startswith("gpu error: fatal Xid 119 on GPU 1 (GSP RPC timeout")  # GPU 3's is not ours
    later = KernelLog(since_wall=log._boot_wall + 60.5, path=str(KMSG_FIXTURE), journal=False)
    assert [text[:26] for _, text in later.read()] == [
        "NVRM: Xid (PCI:0000:77:00)",
        "NVRM: Xid (PCI:0000:17:00)",
    ]


def test_a_kernel_log_nobody_may_read_is_said_so():
    log = KernelLog(since_wall=None, path="/nonexistent/kmsg", journal=False)
    assert log.read() == []
    assert "the kernel log cannot be read here" in log.note and "are unknown" in log.note


def test_pci_addresses_in_nvmls_and_the_kernels_spelling_are_one():
    assert pci_key("00000000:37:00.0") == pci_key("PCI:0000:37:00") == pci_key("37:00") == "0000:37:00"
    assert pci_key("0001:AB:1F.3") == "0001:ab:1f" and pci_key("not a bus") is None and pci_key(None) is None
