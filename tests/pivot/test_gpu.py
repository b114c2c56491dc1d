"""On a GPU host (pytest -m gpu): doctor's NVML checks against real GPUs, and preflight's NCCL path
(SGLang's own group init with its warm-up all_reduce, CUDA IPC writes between every GPU pair, the
8 B - 128 MiB sweep) under the qwen profile's own environment.

The same code as the CPU rehearsal with another device (tests/pivot/test_preflight_docker.py and
test_settings_docker.py run it on gloo in CI); these only skip (with the reason) where NVML sees no
GPU or the CUDA image is not built.
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
from kit.pivot.sglang_rules import gpu_nvlink, launch_facts, sglang_skip
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


def test_preflight_runs_sglangs_groups_on_every_gpu_and_names_transports_under_the_qwen_profile(
    built_image, gpu_count, new_containers
):
    spec = resolve("qwen-base")

    built_image(spec.image_ref, spec.image)
    ranks = min(gpu_count, spec.gpus)
    if ranks < 2:
        pytest.skip("one GPU: nothing to peer with")
    # The profile's own environment, which would silence NCCL's transport lines (WARN), goes in as it is
    assert spec.env.get("NCCL_DEBUG") == "WARN"
    code, result, _, _ = run_kit("preflight", "qwen-base", "--tp", str(ranks), timeout=900)
    assert result["backend"] == "nccl" and result["nccl"]
    settings = result["settings"]
    assert settings["NCCL_DEBUG"] == {"value": "INFO", "source": "kit"}  # whatever the profile says
    assert settings["HF_HUB_OFFLINE"] == {"value": "1", "source": "profile"}
    assert any("NCCL_DEBUG=INFO for preflight (the profile's WARN" in note for note in result["notes"])
    # SGLang's own environment and groups (entrypoints/engine.py, distributed/bootstrap.py)
    assert (settings["NCCL_CUMEM_ENABLE"]["value"], settings["NCCL_CUMEM_ENABLE"]["source"]) == (
        "0",
        "sglang",
    )
    assert (
        settings["NCCL_NVLS_ENABLE"]["value"] == "0"
        and settings["CUDA_DEVICE_MAX_CONNECTIONS"]["value"] == "8"
    )
    if code != 0:  # a host with the known P2P hang: the verdict must name it either way
        assert result["verdict"] in ("hung", "deadline") and result["p2p"] in ("P2P", "not P2P"), result
        return
    assert result["groups"] == "sglang" and result["tp_group"]["backend"] == "nccl"
    assert result["tp_group"]["pynccl"] is True  # its communicator, and SGLang's warm-up all_reduce, ran
    # SGLang's custom all-reduce is off exactly where bisect's rule says so (more than two PCIe-only GPUs)
    facts = launch_facts(resolve("qwen-base", overrides=(f"tp={ranks}",)), nvlink=gpu_nvlink(ranks))
    custom = result["tp_group"]["custom_all_reduce"]
    if sglang_skip("no-custom-all-reduce", facts):
        assert custom is None or custom.endswith("(disabled)"), custom
    elif facts.nvlink is not None:
        assert custom and not custom.endswith("(disabled)"), custom
    # NCCL named its transports, and none is the cuMem P2P path: SGLang's NCCL_CUMEM_ENABLE=0 took hold
    assert result["transports"], "NCCL_DEBUG=INFO's channel lines were kept"
    assert not [t for t in result["transports"] if "CUMEM" in t], result["transports"]
    assert len(result["pairs"]) == ranks * (ranks - 1)
    assert all(p["peer_access"] is not None for p in result["pairs"])
    assert result["sweep"][-1]["bytes"] == device_plan("cuda").sweep["max_bytes"]
    # The graph step: bf16 all-reduces captured inside SGLang's graph_capture() and replayed at the
    # profile's decode and prefill-chunk widths, and one PyNccl size (kit/pivot/graph_step.py)
    graph = result["graph"]
    row = next(s for s in result["steps"] if s["step"] == "graph")
    assert row["status"] == "ok" and "graph_capture()" in row["detail"], row
    assert [s["name"] for s in graph["sizes"]] == ["decode", "prefill"]
    assert all(s["hidden"] == 3072 and s["replay_us"] > 0 and s["capture_s"] > 0 for s in graph["sizes"])
    assert graph["pynccl"]["bytes"] == 16 << 20 and graph["pynccl"]["busbw_gbps"] > 0
    if sglang_skip("no-custom-all-reduce", facts):  # the PCIe TP 4 case: every graph reduces via PyNccl
        assert graph["path"] == "PyNccl", graph["path"]
    assert not new_containers()
