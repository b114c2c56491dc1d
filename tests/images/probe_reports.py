"""The probe reports the verify tests compare, and the GPU access cases they use.

CPU_REPORT was recorded from the built rehearsal image. GPU_REPORT is CONSTRUCTED (no GPU host was
available) in the probe's own schema, and says so in its _source.
"""

from __future__ import annotations

import copy
import json
import runpy
from pathlib import Path

from image_helpers import ROOT

from kit.images.gpu_access import Attempt, GpuPlan, granted, not_asked, refused
from kit.images.manifest import load_manifest
from kit.images.verify import PROBE

IMAGES = ROOT / "images"
FIXTURES = Path(__file__).parent / "fixtures"
CPU = load_manifest("sglang-0.5.23-cpu", IMAGES)
CU130 = load_manifest("sglang-0.5.23-cu130-sm120", IMAGES)
CU129 = load_manifest("sglang-0.5.10.post1-cu129-sm120", IMAGES)

CPU_REPORT = json.loads((FIXTURES / "probe-sglang-0.5.23-cpu.json").read_text(encoding="utf-8"))
GPU_REPORT = json.loads(
    (FIXTURES / "probe-sglang-0.5.23-cu130-sm120-4gpu.constructed.json").read_text(encoding="utf-8")
)
assert GPU_REPORT["_source"].startswith("CONSTRUCTED, not measured")

# The distributions the in-image probe reports on, read from the probe itself (one list, not two).
PROBE_DISTS = runpy.run_path(str(PROBE))["DISTRIBUTIONS"]

GIVEN = granted(
    "auto", GpuPlan("gpu-request", "the nvidia runtime is registered (docker info: Runtimes)", True), [], []
)
NO_GPU = refused(
    "auto",
    [Attempt("gpu-request", 'could not select device driver "" with capabilities: [[gpu]]')],
    ["engine 20.10.24+dfsg1 does not report CDI (Engine 25+ does)"],
)
NONE = not_asked("none", "--gpus none")
CPU_ACCESS = not_asked("auto", "a CPU image: its checks need no GPU")


def gpu_report(manifest, *, gpus: bool = True) -> dict:
    """The constructed 4-GPU report, with this manifest's pins; without GPUs, what the probe
    reports when it ran with --skip-gpu (kernels imported, no op, no matmul, no all_reduce)."""
    report = copy.deepcopy(GPU_REPORT)
    pins = manifest.pins
    dists = report["distributions"]
    dists.update({"nvidia-nccl-cu12": None, "nvidia-nccl-cu13": None, "torchaudio": None})
    dists.update(
        {
            "torch": pins.torch,
            "torchvision": pins.torchvision,
            "sglang": pins.sglang,
            "sglang-kernel": pins.sglang_kernel,
            "flashinfer-python": pins.flashinfer,
            pins.nccl_package: pins.nccl,
        }
    )
    report["env"]["CUDA_VERSION"] = manifest.base.image.split(":")[1].split("-")[0]
    report["torch"].update(version=pins.torch, cuda=pins.cuda, nccl=pins.nccl)
    if not gpus:
        report["torch"].update(cuda_available=False, device_count=0, gpus=[])
        report["kernels"]["op"] = {"ran": False, "blocked": True, "why": "--skip-gpu", "results": []}
        del report["all_reduce"]
    return report
