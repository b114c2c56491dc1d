"""On a GPU host (pytest -m gpu): doctor's NVML checks against real GPUs, and preflight's NCCL path
(eager communicator init, CUDA IPC writes between every GPU pair, the 8 B - 128 MiB sweep).

The same code as the CPU rehearsal with another device; these only skip (with the reason) where
NVML sees no GPU or the CUDA image is not built.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from pivot_helpers import run_kit

from kit.launch import resolve
from kit.pivot.steps import device_plan

pytestmark = [pytest.mark.gpu, pytest.mark.docker]
SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "schema" / "doctor.json"
NVML_CHECKS = ("nvidia-driver", "container-toolkit", "gpu-count", "compute-capability", "gpu-busy")


@pytest.fixture
def gpu_count() -> int:
    from kit.runtime.nvml import open_nvml

    gpus = open_nvml()
    if gpus is None:
        pytest.skip("no NVIDIA GPU answers NVML")
    try:
        return gpus.inventory().count
    finally:
        gpus.close()


def test_doctor_reads_the_gpus_and_its_json_validates(gpu_count):
    proc = subprocess.run(
        [sys.executable, "-m", "kit", "doctor", "--json"], capture_output=True, text=True, timeout=120
    )
    document = json.loads(proc.stdout)
    jsonschema.validate(document, json.loads(SCHEMA.read_text()))
    checks = {c["id"]: c for c in document["checks"]}
    for check_id in NVML_CHECKS:
        assert checks[check_id]["status"] != "not-checked", checks[check_id]
    assert f"{gpu_count} GPU(s)" in checks["gpu-count"]["summary"]
    if gpu_count >= 2:
        assert checks["p2p-topology"]["details"]["topology"]
    assert proc.returncode == document["exit_code"]


def test_preflight_runs_nccl_on_every_gpu_with_transports_pairs_and_the_full_sweep(gpu_count, new_containers):
    spec = resolve("qwen-base")
    from kit.runtime.engine import image_exists

    if not image_exists(spec.image_ref):
        pytest.skip(f"image {spec.image_ref} not built (kit image build {spec.image})")
    ranks = min(gpu_count, spec.gpus)
    if ranks < 2:
        pytest.skip("one GPU: nothing to peer with")
    code, result, _, _ = run_kit("preflight", "qwen-base", "--tp", str(ranks), timeout=900)
    assert result["backend"] == "nccl" and result["nccl"]
    if code != 0:  # a host with the known P2P hang: the verdict must name it either way
        assert result["verdict"] in ("hung", "deadline") and result["p2p"] in ("P2P", "not P2P"), result
        return
    assert result["transports"], "NCCL_DEBUG=INFO's channel lines were kept"
    assert len(result["pairs"]) == ranks * (ranks - 1)
    assert all(p["peer_access"] is not None for p in result["pairs"])
    assert result["sweep"][-1]["bytes"] == device_plan("cuda").sweep["max_bytes"]
    assert not new_containers()
