"""verify's comparison, without Docker: a report that matches its manifest passes, and each kind of
drift is one failing row."""

from __future__ import annotations

import copy
import json
import runpy
import subprocess
import sys

import pytest
from image_helpers import ROOT

from kit.errors import KitError
from kit.images.manifest import load_manifest
from kit.images.verify import (
    MARKER,
    PROBE,
    arch_names,
    compare,
    parse_probe_output,
    version_matches,
)

IMAGES = ROOT / "images"
CPU = load_manifest("sglang-0.5.23-cpu", IMAGES)
CU130 = load_manifest("sglang-0.5.23-cu130-sm120", IMAGES)
CU129 = load_manifest("sglang-0.5.10.post1-cu129-sm120", IMAGES)

# The distributions the in-image probe reports on, read from the probe itself (one list, not two).
NO_DISTS = dict.fromkeys(runpy.run_path(str(PROBE))["DISTRIBUTIONS"])

# What the probe printed inside kit/sglang:sglang-0.5.23-cpu (trimmed to what compare reads).
CPU_REPORT = {
    "schema": 1,
    "python": "3.11.2",
    "env": {"CUDA_VERSION": None, "NCCL_VERSION": None, "TORCH_CUDA_ARCH_LIST": ""},
    "distributions": {**NO_DISTS, "torch": "2.13.0+cpu", "sglang": "0.5.23", "triton": "3.9.0"},
    "modules": {
        "flashinfer": {"found": False},
        "sgl_kernel": {
            "found": True,
            "origin": "/opt/kit/rehearsal/shims/sgl_kernel/__init__.py",
            "stand_in": True,
            "version": "0.0.0+kit.cpu.rehearsal",
        },
        "torchvision": {
            "found": True,
            "origin": "/opt/kit/rehearsal/shims/torchvision/__init__.py",
            "stand_in": True,
            "version": "0.0.0+kit.cpu.rehearsal",
        },
    },
    "torch": {
        "imported": True,
        "version": "2.13.0+cpu",
        "cuda": None,
        "nccl": None,
        "arch_list": [],
        "cuda_available": False,
        "device_count": 0,
        "gpus": [],
    },
}

ARCHES_CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]
GPU_ENTRY = {"index": 0, "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "capability": "12.0",
             "ok": True, "ms": 1.7, "error": None}  # fmt: skip


def gpu_report(manifest, gpus=()) -> dict:
    pins = manifest.pins
    return {
        "schema": 1,
        "python": "3.12.3",
        "env": {"CUDA_VERSION": manifest.base.image.split(":")[1].split("-")[0], "NCCL_VERSION": "2.27.3-1"},
        "distributions": {
            **NO_DISTS,
            "torch": pins.torch,
            "torchvision": pins.torchvision,
            "sglang": pins.sglang,
            "sglang-kernel": pins.sglang_kernel,
            "flashinfer-python": pins.flashinfer,
            pins.nccl_package: pins.nccl,
        },
        "modules": {"sgl_kernel": {"found": True, "origin": "/opt/venv/.../sgl_kernel/__init__.py"}},
        "torch": {
            "imported": True,
            "version": pins.torch,
            "cuda": pins.cuda,
            "nccl": pins.nccl,
            "arch_list": ARCHES_CU130,
            "cuda_available": bool(gpus),
            "device_count": len(gpus),
            "gpus": list(gpus),
        },
    }


def failing(rows) -> dict[str, str]:
    return {r.check: r.found for r in rows if not r.ok}


def test_the_cpu_rehearsal_report_matches():
    rows = compare(CPU, CPU_REPORT, gpus="no NVIDIA runtime")
    assert failing(rows) == {}
    checks = [r.check for r in rows]
    assert checks == [
        "python", "torch", "torch.version.cuda", "NCCL wheel", "sglang", "sglang-kernel", "flashinfer",
        "torchvision", "compiled arch list",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("damage", "check"),
    [
        (lambda r: r["distributions"].update({"sglang": "0.5.22"}), "sglang"),
        (lambda r: r["torch"].update({"version": "2.14.1"}), "torch"),
        (lambda r: r.update({"python": "3.12.3"}), "python"),
        (lambda r: r["torch"].update({"cuda": "13.0"}), "torch.version.cuda"),
        (lambda r: r["torch"].update({"arch_list": ["sm_90"]}), "compiled arch list"),
        (lambda r: r["distributions"].update({"nvidia-nccl-cu13": "2.30.7"}), "NCCL wheel"),
        (lambda r: r["distributions"].update({"sglang-kernel": "0.4.10"}), "sglang-kernel"),
        (lambda r: r["modules"].update({"sgl_kernel": {"found": False}}), "sglang-kernel"),
        (lambda r: r["modules"].update({"sgl_kernel": {"found": True, "origin": "/x", "stand_in": False}}),
         "sglang-kernel"),
        (lambda r: r["distributions"].update({"flashinfer-python": "0.7.2"}), "flashinfer"),
        (lambda r: r["modules"].update({"flashinfer": {"found": True, "origin": "/x"}}), "flashinfer"),
        (lambda r: r["distributions"].update({"torchvision": "0.29.1"}), "torchvision"),
        (lambda r: r["torch"].update({"imported": False, "error": "ImportError: libx"}), "torch"),
    ],
)  # fmt: skip
def test_cpu_drift_is_one_failing_row(damage, check):
    report = copy.deepcopy(CPU_REPORT)
    damage(report)
    assert list(failing(compare(CPU, report, gpus="x"))) == [check]


@pytest.mark.parametrize("manifest", [CU129, CU130], ids=lambda m: m.name)
def test_a_gpu_report_that_matches_passes(manifest):
    rows = compare(manifest, gpu_report(manifest, [GPU_ENTRY]))
    assert failing(rows) == {}
    found = {r.check: r.found for r in rows}
    assert found["NCCL (torch reports)"] == manifest.pins.nccl
    assert "sm_120" in found["compiled arch list"]
    assert found["GPU 0 matmul"].startswith("NVIDIA RTX PRO 6000") and "sm 12.0" in found["GPU 0 matmul"]


def test_a_gpu_image_on_a_host_without_gpus_skips_the_op():
    rows = compare(CU130, gpu_report(CU130), gpus="no NVIDIA runtime on this engine")
    assert failing(rows) == {}
    gpu = [r for r in rows if r.check == "GPU op"]
    assert gpu and gpu[0].note == "skipped" and "no NVIDIA runtime" in gpu[0].found
    rows = compare(CU130, gpu_report(CU130), gpus="requested")
    assert [r.found for r in rows if r.check == "GPU op"] == ["no GPU visible (skipped)"]


@pytest.mark.parametrize(
    ("damage", "check"),
    [
        (lambda r: r["torch"].update({"nccl": "2.27.5"}), "NCCL (torch reports)"),
        (lambda r: r["distributions"].update({"nvidia-nccl-cu13": "2.28.3"}), "NCCL wheel nvidia-nccl-cu13"),
        (lambda r: r["distributions"].update({"nvidia-nccl-cu12": "2.28.9"}), "NCCL wheel nvidia-nccl-cu12"),
        (lambda r: r["torch"].update({"arch_list": ["sm_80", "sm_90", "sm_100"]}), "compiled arch list"),
        (lambda r: r["torch"].update({"cuda": "12.8"}), "torch.version.cuda"),
        (lambda r: r["env"].update({"CUDA_VERSION": "13.0.2"}), "CUDA toolkit (base image)"),
        (lambda r: r["distributions"].update({"flashinfer-python": "0.7.4"}), "flashinfer-python"),
        (lambda r: r["distributions"].update({"flashinfer-cubin": "0.6.13"}), "flashinfer-cubin"),
        (lambda r: r["distributions"].update({"sglang-kernel": None}), "sglang-kernel"),
        (lambda r: r["distributions"].update({"torchvision": "0.29.1+cu128"}), "torchvision"),
        (lambda r: r["torch"]["gpus"][0].update({"ok": False, "error": "no kernel image is available"}),
         "GPU 0 matmul"),
    ],
)  # fmt: skip
def test_gpu_drift_is_one_failing_row(damage, check):
    report = gpu_report(CU130, [dict(GPU_ENTRY)])
    damage(report)
    assert list(failing(compare(CU130, report))) == [check]


def test_a_cuda_torch_without_sm120_is_named():
    report = gpu_report(CU129)
    report["torch"]["arch_list"] = ["sm_80", "sm_90"]
    row = next(r for r in compare(CU129, report, gpus="x") if r.check == "compiled arch list")
    assert not row.ok and row.expected == "covers sm_120" and row.note == "missing 12.0"


def test_version_rules():
    assert version_matches("2.14.1", "2.14.1+cu130")
    assert not version_matches("2.14.1+cu130", "2.14.1")
    assert not version_matches("2.14.1+cu130", "2.14.1+cu128")
    assert not version_matches("0.5.2", "0.5.23")
    assert not version_matches("1", None)
    assert {"sm_120", "compute_120"} <= arch_names("12.0") and "sm_120" in arch_names("12.0+PTX")
    assert "sm_120a" in arch_names("12.0a")


def test_probe_output_is_found_after_banners():
    out = "==========\n== CUDA ==\n==========\nCUDA Version 13.0.1\n" + MARKER + json.dumps(CPU_REPORT) + "\n"
    assert parse_probe_output(out) == CPU_REPORT
    with pytest.raises(KitError, match="printed no result"):
        parse_probe_output("banner only\n")


def test_the_probe_runs_on_a_plain_interpreter():
    """The in-image script is self-contained: here (no torch in the kit's venv) it still prints one
    JSON object, reporting torch as not importable rather than crashing."""
    done = subprocess.run(
        [sys.executable, str(PROBE), "--skip-gpu"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    report = parse_probe_output(done.stdout)
    assert report["schema"] == 1 and report["python"] == ".".join(map(str, sys.version_info[:3]))
    assert set(report["distributions"]) >= {"torch", "sglang", "sglang-kernel", "flashinfer-python"}
    assert set(report["modules"]) == {"sgl_kernel", "torchvision", "flashinfer"}
    if report["torch"]["imported"]:
        assert report["torch"]["gpus"] == []  # --skip-gpu
    else:
        assert "error" in report["torch"]
