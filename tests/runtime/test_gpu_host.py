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
import csv
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.runtime.nvml import open_nvml

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
REHEARSAL = ROOT / "scripts" / "gpu_hang_rehearsal.py"
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


def _smi(query: str, fields: str) -> list[dict[str, str]]:
    done = subprocess.run(
        ["nvidia-smi", f"--query-{query}={fields}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    names = fields.split(",")
    rows = csv.reader(io.StringIO(done.stdout))
    return [dict(zip(names, (v.strip() for v in row), strict=True)) for row in rows]


def test_nvml_inventory_agrees_with_nvidia_smi(gpus):
    inventory = gpus.inventory()
    rows = _smi("gpu", "index,name,uuid,pci.bus_id,memory.total,driver_version,compute_cap")
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_watch_names_a_real_nccl_rendezvous_hang_in_init_and_leaves_it_running(tmp_path, torch_python):
    """The mission's hang through the host path: rank 0 of TP 2 on a real GPU waits in NCCL's
    rendezvous for a rank that never comes (scripts/gpu_hang_rehearsal.py, SGLang 0.5.23's lines)."""
    import psutil

    log = tmp_path / "server.log"
    rehearsal = subprocess.Popen(
        [torch_python, str(REHEARSAL), "--log", str(log), "--port", str(_free_port())],
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
        [result] = [o for o in objects if o.get("type") == "result"]
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
    from kit.pivot.preflight_container import RANKS_SCRIPT, SGLANG_GROUPS
    from kit.pivot.steps import STEPS, PreflightRun, device_plan, nccl_version

    world = min(gpus.count, 2)
    for script in (RANKS_SCRIPT, SGLANG_GROUPS):
        shutil.copyfile(script, tmp_path / script.name)
    request = {
        "world_size": world, "device": "cuda", "backend": "nccl", "steps": list(STEPS), "until": None,
        "launch_argv": ["--model-path", "/nowhere", "--tp-size", str(world)], "server_args": [],
        "env_sources": {"NCCL_DEBUG": "kit"},
        "sweep": {"min_bytes": 8, "max_bytes": 1 << 24, "factor": 8, "iters": 3, "warmup": 1},
        "p2p_bytes": 1 << 20, "collective_timeout_s": 90, "run_timeout_s": 120,
    }  # fmt: skip
    (tmp_path / "request.json").write_text(json.dumps(request))
    started = time.monotonic()
    done = subprocess.run(
        [torch_python, "-u", str(tmp_path / RANKS_SCRIPT.name), str(tmp_path / "request.json")],
        capture_output=True, text=True, timeout=180, cwd=tmp_path, env={**os.environ, "NCCL_DEBUG": "INFO"},
    )  # fmt: skip
    run = PreflightRun(world, STEPS, device_plan("cuda"), 0.0)
    for line in (done.stdout + "\n" + done.stderr).splitlines():
        run.feed_line(line, time.monotonic() - started)
    verdict = run.verdict(time.monotonic() - started)
    assert done.returncode == 0 and verdict is not None and verdict.verdict == "ok", done.stdout[-3000:]
    assert nccl_version(run.nccl_lines)  # read from NCCL's own INFO lines
