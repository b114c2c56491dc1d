"""What this image really has and does, as one JSON object on stdout: `python /opt/kit/verify.py`.

Copied into every kit image at /opt/kit/ with its sibling modules (verify_children.py,
verify_kernels.py, verify_collective.py, sglang_groups.py); `kit image verify NAME` copies the kit's
own version of these files into a fresh container of the image, runs this one, and compares the
answer with images/NAME.toml. They must stay self-contained: the standard library, plus torch and
sglang in the child processes, when the image has them.

Besides versions it runs three things, each in child processes of its own (started from this file)
so that a crash or a hang in one is reported, not fatal, and is killed at a deadline:
- kernels (verify_kernels.py): imports sgl_kernel and flashinfer and runs one sgl_kernel op against
  torch (on every GPU; in the CPU rehearsal image, the stand-in's op on the CPU);
- an all_reduce over N ranks (verify_collective.py): the image's SGLang sets up its environment and
  builds its TP group as the server does (the code `kit preflight` runs, sglang_groups.py), NCCL with
  one GPU per rank, or gloo on the CPU; the same code either way;
- `py-spy --version`.

Options: --skip-gpu (never touch CUDA devices), --all-reduce nccl|gloo (--world N for gloo; NCCL
takes every visible GPU), --collective-timeout S, --no-kernels, --pretty (indented JSON).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import time

SELF = globals().get("__file__")
"""This file, which the child processes run; None when the probe was started with `python -c`."""
if SELF:  # its sibling modules, also where it is run with runpy (tests read DISTRIBUTIONS that way)
    sys.path.insert(0, os.path.dirname(os.path.abspath(SELF)))

from verify_collective import all_reduce, collective_child  # noqa: E402
from verify_kernels import STAND_IN_MARK, kernels, kernels_child  # noqa: E402

MARKER = "KIT-VERIFY-JSON "
"""Prefixes the JSON line: base images may print banners to stdout before any command runs."""
SCHEMA = 2

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
# Modules the CPU rehearsal replaces with stand-ins (kit/rehearsal/shims); located here, never
# imported in this process unless they are the stand-ins, which are plain Python.
MODULES = ("sgl_kernel", "torchvision", "flashinfer")


# --- facts of this process ----------------------------------------------------------------------


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
        if not facts["cuda_available"]:
            torch.cuda.init()  # raises the reason is_available() only warns about (no driver, too old)
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


def py_spy_facts() -> dict:
    """py-spy is how the kit dumps a hung rank's stack: it must be there and run."""
    path = shutil.which("py-spy")
    facts: dict = {"version": dist_version("py-spy"), "path": path, "output": None, "rc": None, "error": None}
    if not path:
        facts["error"] = "no py-spy on PATH"
        return facts
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        facts["rc"] = done.returncode
        facts["output"] = (done.stdout.strip() or done.stderr.strip())[:200]
    except Exception as exc:
        facts["error"] = f"{type(exc).__name__}: {exc}"
    return facts


# --- the report ---------------------------------------------------------------------------------


def collect(
    skip_gpu: bool = False,
    *,
    collective: str | None = None,
    world: int = 2,
    collective_timeout_s: float = 90.0,
    run_kernels: bool = True,
) -> dict:
    facts = torch_facts(skip_gpu)
    report = {
        "schema": SCHEMA,
        "python": platform.python_version(),
        "executable": sys.executable,
        "env": {k: os.environ.get(k) for k in ("CUDA_VERSION", "NCCL_VERSION", "TORCH_CUDA_ARCH_LIST")},
        "distributions": {name: dist_version(name) for name in DISTRIBUTIONS},
        "modules": {name: locate_module(name) for name in MODULES},
        "torch": facts,
        "py_spy": py_spy_facts(),
    }
    if run_kernels:
        report["kernels"] = kernels(skip_gpu, SELF)
    if collective == "nccl":
        if skip_gpu:
            report["all_reduce"] = {"backend": "nccl", "ran": False, "why": "--skip-gpu"}
        else:
            count = facts.get("device_count") or 0
            report["all_reduce"] = all_reduce("nccl", count, collective_timeout_s, SELF)
    elif collective == "gloo":
        report["all_reduce"] = all_reduce("gloo", world, collective_timeout_s, SELF)
    return report


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="verify.py", description=__doc__.splitlines()[0])
    parser.add_argument("--skip-gpu", action="store_true", help="never touch CUDA devices")
    parser.add_argument("--all-reduce", choices=("nccl", "gloo"), help="run an all_reduce on this backend")
    parser.add_argument("--world", type=int, default=2, help="gloo ranks (NCCL: every visible GPU)")
    parser.add_argument("--collective-timeout", type=float, default=90.0, help="seconds for the all_reduce")
    parser.add_argument("--no-kernels", action="store_true", help="skip importing sgl_kernel/flashinfer")
    parser.add_argument("--pretty", action="store_true", help="indented JSON without the marker")
    # Internal: the child processes this file starts.
    parser.add_argument("--child-kernels", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-collective", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--env-sources", default="{}", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = _arguments(argv)
    if args.child_kernels:
        return kernels_child(args.skip_gpu)
    if args.child_collective:
        sources = json.loads(args.env_sources)
        return collective_child(args.world, args.backend, args.collective_timeout, sources)
    report = collect(
        args.skip_gpu,
        collective=args.all_reduce,
        world=args.world,
        collective_timeout_s=args.collective_timeout,
        run_kernels=not args.no_kernels,
    )
    text = json.dumps(report, indent=2 if args.pretty else None, sort_keys=True)
    sys.stdout.write(("" if args.pretty else MARKER) + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
