"""On a GPU host without Docker (pytest -m gpu): the host path of the GPU half against a real driver.

The other `gpu` tests need the GPU image and an engine too (they are marked `docker` as well); these
need only NVIDIA GPUs and a Python with CUDA torch for the processes they watch ($KIT_TORCH_PYTHON,
else this interpreter when it has one). What they hold, each against the driver's own answer:
NVML's inventory against nvidia-smi, a process's GPU memory read by its host PID, `kit watch --pid`
naming a real NCCL rendezvous that never completes as HUNG in init while leaving it running, and
the preflight rank script passing on real NCCL. First run on an H200 on 2026-12-04
(docs/gpu-host-check.md); on a GPU runner, `--kit-require-gpu` turns any skip here into a failure.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kit.runtime.nvml import open_nvml

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
REHEARSAL = ROOT / "scripts" / "gpu_hang_rehearsal.py"
sys.path.insert(0, str(ROOT / "scripts"))
check = importlib.import_module("gpu_host_check")  # the GPU host check's own readers and rank run
GIB = 1 << 30
ALLOC = """
import sys, torch
block = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
print(torch.cuda.memory_reserved(0), flush=True)
sys.stdin.read()  # held until the test closes stdin
"""


@pytest.fixture(scope="module")
def torch_python() -> str:
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    for python in filter(None, (os.environ.get("KIT_TORCH_PYTHON"), sys.executable)):
        found = shutil.which(python) or Path(python).exists()
        if found and subprocess.run([python, "-c", probe], capture_output=True, timeout=120).returncode == 0:
            return python
    pytest.skip("no Python with CUDA torch here (set KIT_TORCH_PYTHON to one)")


@pytest.fixture
def gpus():
    opened = open_nvml()
    assert opened is not None  # the gpu marker already skipped where NVML does not answer
    yield opened
    opened.close()


def test_nvml_inventory_agrees_with_nvidia_smi(gpus):
    inventory = gpus.inventory()
    done = subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(check.SMI_FIELDS)}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    rows = check.parse_smi_csv(done.stdout)
    assert inventory.error is None and inventory.count == len(rows) > 0
    assert inventory.driver_version == rows[0]["driver_version"]
    for device, row in zip(inventory.devices, rows, strict=True):
        assert (device.name, device.uuid, device.compute_capability) == (
            row["name"], row["uuid"], row["compute_cap"],
        )  # fmt: skip
        assert device.memory_total_bytes // (1 << 20) == int(row["memory.total"])
        assert device.pci_bus_id.lower() == row["pci.bus_id"].lower()


def test_a_processs_gpu_memory_is_read_by_its_host_pid(gpus, torch_python):
    child = subprocess.Popen(
        [torch_python, "-c", ALLOC, str(2 * GIB)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        reserved = int(child.stdout.readline())
        usage = gpus.usage([child.pid])
        assert [r.index for r in usage.readings] == [0]
        if usage.readings[0].whole_device:  # no per-process figure here: the reading must say so
            assert usage.memory_bytes >= reserved
        else:  # the allocation plus the CUDA context, and not the whole card
            assert reserved <= usage.memory_bytes < reserved + 2 * GIB
        assert not gpus.usage([os.getpid() + 10_000_000]).readings  # a PID with nothing on a GPU
    finally:
        child.stdin.close()
        child.wait(30)


def test_watch_names_a_real_nccl_rendezvous_hang_in_init_and_leaves_it_running(tmp_path, torch_python):
    """The mission's hang through the host path: rank 0 of TP 2 on a real GPU waits in NCCL's
    rendezvous for a rank that never comes (scripts/gpu_hang_rehearsal.py, SGLang 0.5.23's lines)."""
    import psutil

    log = tmp_path / "server.log"
    rehearsal = subprocess.Popen(
        [torch_python, str(REHEARSAL), "--log", str(log), "--port", str(check.free_port())],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        watch = subprocess.run(
            [sys.executable, "-m", "kit", "watch", "--pid", str(rehearsal.pid), "--log", str(log),
             "--stall", "launch=60", "--stall", "init=15", "--json"],
            capture_output=True, text=True, timeout=150,
            env={**os.environ, "KIT_CACHE_DIR": str(tmp_path / "cache")},
        )  # fmt: skip
        objects = [json.loads(line) for line in watch.stdout.splitlines() if line.startswith("{")]
        result = check.result_line(watch.stdout.splitlines())
        assert [o for o in objects if o.get("type") == "result"] == [result]
        judged = (watch.returncode, result["verdict"], result["phase"])
        assert judged == (4, "hung", "init"), watch.stderr[-2000:]
        gpu_bytes = [o.get("gpu_mem_bytes") or 0 for o in objects if o.get("type") == "activity"]
        assert max(gpu_bytes) > 0  # NVML read the scheduler's memory by its PID
        assert "rendezvous" in {s.get("kind") for s in result.get("stacks") or []}
        tree = [psutil.Process(rehearsal.pid), *psutil.Process(rehearsal.pid).children(recursive=True)]
        assert len(tree) == 2 and all(p.status() != psutil.STATUS_ZOMBIE for p in tree)  # never harmed
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(rehearsal.pid, signal.SIGKILL)
        rehearsal.wait(30)


def test_the_preflight_rank_script_passes_on_nccl_with_one_rank_per_gpu(tmp_path, torch_python, gpus):
    """The request `kit preflight` sends, run on the host's torch and read back by PreflightRun."""
    result = check.ranks_run(tmp_path, min(gpus.count, 2), timeout=90, python=torch_python)
    assert result["device"] == "cuda" and result["exit_code"] == 0, result["stdout_tail"]
    assert (result["verdict"] or {}).get("verdict") == "ok", result["errors"]
    assert result["nccl"]  # read from NCCL's own INFO lines
