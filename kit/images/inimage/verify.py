"""What this image really has, as one JSON object on stdout: `python /opt/kit/verify.py`.

Copied into every kit image at /opt/kit/verify.py; `kit image verify NAME` runs the kit's own copy of
this file inside the image and compares the answer with images/NAME.toml. It must stay
self-contained: the standard library, plus torch when the image has it. It never imports sglang,
sgl_kernel or flashinfer (their import needs a GPU driver on some builds, and their version is in
their distribution metadata anyway); it only locates their modules.

Options: --skip-gpu (never touch CUDA devices), --pretty (indented JSON).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import time

MARKER = "KIT-VERIFY-JSON "
"""Prefixes the JSON line: base images may print banners to stdout before any command runs."""

# The distributions a manifest pins, plus the ones that would betray drift if present.
DISTRIBUTIONS = (
    "torch",
    "torchvision",
    "torchaudio",
    "sglang",
    "sglang-kernel",
    "sgl-kernel",
    "flashinfer-python",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
    "nvidia-nccl-cu12",
    "nvidia-nccl-cu13",
    "triton",
    "transformers",
)
# Modules the CPU rehearsal replaces with stand-ins (kit/rehearsal/shims); located, never imported
# unless they are the stand-ins, which are plain Python.
MODULES = ("sgl_kernel", "torchvision", "flashinfer")
STAND_IN_MARK = "+kit.cpu.rehearsal"


def dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def locate_module(name: str) -> dict:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        return {"found": False, "error": f"{type(exc).__name__}: {exc}"}
    if spec is None:
        return {"found": False}
    origin = spec.origin or next(iter(spec.submodule_search_locations or [""]))
    info: dict = {"found": True, "origin": origin, "stand_in": False, "version": None}
    # The kit's stand-ins live under /opt/kit/rehearsal and say so in __version__; only they are
    # imported here (they are plain Python over torch).
    if origin and "/rehearsal/shims/" in origin:
        try:
            module = __import__(name)
            info["version"] = getattr(module, "__version__", None)
            info["stand_in"] = str(info["version"] or "").endswith(STAND_IN_MARK)
        except Exception as exc:  # report, never crash: the host decides what it means
            info["error"] = f"{type(exc).__name__}: {exc}"
    return info


def torch_facts(skip_gpu: bool) -> dict:
    try:
        import torch
    except Exception as exc:
        return {"imported": False, "error": f"{type(exc).__name__}: {exc}"}
    facts: dict = {
        "imported": True,
        "version": str(torch.__version__),
        "cuda": torch.version.cuda,
        "nccl": None,
        "arch_list": [],
        "cuda_available": False,
        "device_count": 0,
        "gpus": [],
    }
    if torch.version.cuda:
        try:
            version = torch.cuda.nccl.version()
            facts["nccl"] = ".".join(str(p) for p in version) if isinstance(version, tuple) else str(version)
        except Exception as exc:
            facts["nccl_error"] = f"{type(exc).__name__}: {exc}"
        try:
            facts["arch_list"] = list(torch.cuda.get_arch_list())
        except Exception as exc:
            facts["arch_list_error"] = f"{type(exc).__name__}: {exc}"
    if skip_gpu or not torch.version.cuda:
        return facts
    try:
        facts["cuda_available"] = bool(torch.cuda.is_available())
        facts["device_count"] = torch.cuda.device_count() if facts["cuda_available"] else 0
    except Exception as exc:
        facts["cuda_error"] = f"{type(exc).__name__}: {exc}"
        return facts
    for index in range(facts["device_count"]):
        facts["gpus"].append(gpu_op(torch, index))
    return facts


def gpu_op(torch, index: int) -> dict:
    """A small matmul on one GPU, checked against the CPU: proves a kernel image for this GPU exists
    and runs (capability alone is not proof)."""
    entry: dict = {"index": index, "name": None, "capability": None, "ok": False, "ms": None, "error": None}
    try:
        entry["name"] = torch.cuda.get_device_name(index)
        major, minor = torch.cuda.get_device_capability(index)
        entry["capability"] = f"{major}.{minor}"
        generator = torch.Generator().manual_seed(index)
        a = torch.randn(256, 256, generator=generator)
        b = torch.randn(256, 256, generator=generator)
        started = time.perf_counter()
        with torch.cuda.device(index):
            got = (a.to(f"cuda:{index}") @ b.to(f"cuda:{index}")).cpu()
            torch.cuda.synchronize(index)
        entry["ms"] = round((time.perf_counter() - started) * 1000, 2)
        want = a @ b
        # Loose enough for TF32, tight enough that garbage fails.
        entry["ok"] = bool(torch.allclose(got, want, rtol=1e-2, atol=1e-1))
        if not entry["ok"]:
            entry["error"] = f"matmul differs from the CPU (max |diff| {float((got - want).abs().max()):.3g})"
    except Exception as exc:
        entry["error"] = f"{type(exc).__name__}: {exc}"
    return entry


def collect(skip_gpu: bool = False) -> dict:
    return {
        "schema": 1,
        "python": platform.python_version(),
        "executable": sys.executable,
        "env": {k: os.environ.get(k) for k in ("CUDA_VERSION", "NCCL_VERSION", "TORCH_CUDA_ARCH_LIST")},
        "distributions": {name: dist_version(name) for name in DISTRIBUTIONS},
        "modules": {name: locate_module(name) for name in MODULES},
        "torch": torch_facts(skip_gpu),
    }


def main(argv: list[str]) -> int:
    report = collect(skip_gpu="--skip-gpu" in argv)
    text = json.dumps(report, indent=2 if "--pretty" in argv else None, sort_keys=True)
    sys.stdout.write(("" if "--pretty" in argv else MARKER) + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
