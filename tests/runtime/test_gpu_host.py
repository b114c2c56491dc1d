"""On a GPU host without Docker (pytest -m gpu): the host path of the GPU half against a real driver.

The other `gpu` tests need the GPU image and an engine too (they are marked `docker` as well); these
need only NVIDIA GPUs and a Python with CUDA torch for the processes they watch ($KIT_TORCH_PYTHON,
else this interpreter when it has one). What they hold, each against the driver's own answer:
NVML's inventory against nvidia-smi, a process's GPU memory read by its host PID (NVML's own
per-process figure wherever NVML gives one), `kit watch --pid` naming a rank that waits in torch's
TCPStore rendezvous (`_create_c10d_store`, before any NCCL communicator exists) as HUNG in init
while leaving it running, the preflight rank script on one GPU (NCCL initialises; no peer traffic)
and, on two GPUs or more, between two ranks. First run on an H200 on 2026-12-04
(docs/gpu-host-check.md, docs/evidence/); on a GPU runner, `--kit-require-gpu` turns any skip here
(the two-GPU test on a one-GPU runner included) into a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kit.hostcheck.judge import result_line
from kit.hostcheck.nvml_step import nvml_processes
from kit.hostcheck.preflight import ranks_run
from kit.hostcheck.record import free_port
from kit.hostcheck.smi import SMI_FIELDS, parse_smi_csv
from kit.runtime.nvml import open_nvml

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
REHEARSAL = ROOT / "kit" / "hostcheck" / "rehearsal" / "hang.py"
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
        ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    rows = parse_smi_csv(done.stdout)
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
        # NVML's own answer, read raw: does it give this PID a figure of its own here?
        raw = [r for r in nvml_processes(gpus.lib) if r.get("pid") == child.pid and r["kind"] == "compute"]
        assert raw, "NVML does not list the child's host PID"
        per_process = all(r["used_bytes"] is not None for r in raw)
        usage = gpus.usage([child.pid])
        assert [r.index for r in usage.readings] == [0]
        if not per_process:
            pytest.skip(
                "NVML gives no per-process figure on this host (usedGpuMemory not available): "
                f"the reading is the whole device's, flagged so: {usage.readings[0].whole_device}"
            )
        # Per-process figures: the reading is NVML's figure for this PID, never the whole-device stand-in;
        # the allocation plus the CUDA context, and not the whole card.
        assert not usage.readings[0].whole_device
        assert usage.memory_bytes == sum(r["used_bytes"] for r in raw)
        assert reserved <= usage.memory_bytes < reserved + 2 * GIB
        assert not gpus.usage([os.getpid() + 10_000_000]).readings  # a PID with nothing on a GPU
    finally:
        child.stdin.close()
        child.wait(30)


def test_watch_names_a_tcpstore_rendezvous_wait_hung_in_init_and_leaves_it_running(tmp_path, torch_python):
    """The mission's hang shape through the host path: rank 0 of TP 2 holds a real GPU and waits in
    torch's TCPStore rendezvous (init_process_group -> _create_c10d_store) for a rank that never
    comes, before any NCCL communicator exists (kit/hostcheck/rehearsal/hang.py, SGLang 0.5.23's lines).
    It shows the watch on a quiet wait in init; it does not show an NCCL collective hanging."""
    import psutil

    log = tmp_path / "server.log"
    rehearsal = subprocess.Popen(
        [torch_python, str(REHEARSAL), "--log", str(log), "--port", str(free_port())],
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
        result = result_line(watch.stdout.splitlines())
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


def test_the_preflight_rank_script_on_one_gpu_initialises_nccl_and_says_no_peer_traffic(
    tmp_path, torch_python, gpus
):
    """The request `kit preflight` sends, one rank, run on the host's torch and read back by
    PreflightRun: NCCL initialises and its one-rank collectives pass; no byte crosses between GPUs."""
    result = ranks_run(tmp_path, 1, timeout=90, python=torch_python)
    assert result["device"] == "cuda" and result["exit_code"] == 0, result["stdout_tail"]
    assert (result["verdict"] or {}).get("verdict") == "ok", result["errors"]
    assert result["nccl"]  # read from NCCL's own INFO lines
    steps = {row["step"]: row for row in result["steps"]}
    assert all("no peer traffic tested" in steps[s]["detail"] for s in ("allreduce", "p2p", "sweep"))


def test_the_preflight_rank_script_moves_data_between_two_gpus_over_nccl(tmp_path, torch_python, gpus):
    """Peer traffic needs peers: two ranks on two GPUs, every pair written and checked, NCCL's own
    transport lines naming how the bytes crossed."""
    if gpus.count < 2:
        pytest.skip(f"peer traffic needs two GPUs; this host has {gpus.count}")
    result = ranks_run(tmp_path, 2, timeout=90, python=torch_python)
    assert result["device"] == "cuda" and result["exit_code"] == 0, result["stdout_tail"]
    assert (result["verdict"] or {}).get("verdict") == "ok", result["errors"]
    steps = {row["step"]: row for row in result["steps"]}
    assert int(steps["p2p"]["detail"].split()[0]) >= 1, steps["p2p"]  # "N pairs written and checked"
    assert result["transports"], "NCCL said nothing about how ranks 0 and 1 connect"
    assert not any("no peer traffic" in row["detail"] for row in result["steps"])
