"""Run SGLang's own argument handling on one launch, and report what it said. Standalone.

This file runs inside a check venv (pinned sglang, CPU torch) or inside the image itself, never
inside the kit: it imports only the standard library, torch and sglang. It reads a request (JSON)
from the file named by argv[1] and prints one line `KIT_CHECK_RESULT {json}` on stdout.

    request = {"args": [...server flags...], "config_json": "/path/config.json", "env": {...},
               "emulate": null | {"capability": [12, 0], "memory_gib": 96, "device_count": 4,
                                  "name": "...", "cuda_version": "12.9"}}

`prepare_server_args` builds ServerArgs, whose post-init holds SGLang's model-specific rules (the
0.5.10 MTP-on-hybrid ValueError among them). Some of them assert a CUDA device; on a machine without
one, `emulate` makes torch.cuda answer like the target GPU (capability, memory, count) so the rules
run as they would there. Nothing touches a device: the parser never allocates.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
import types
import warnings
from contextlib import redirect_stderr

MARKER = "KIT_CHECK_RESULT "
# ServerArgs fields worth showing after a successful parse (names differ across releases).
SHOWN = (
    "model_path",
    "device",
    "tp_size",
    "nnodes",
    "attention_backend",
    "mamba_scheduler_strategy",
    "mamba_radix_cache_strategy",
    "disable_radix_cache",
    "disable_overlap_schedule",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "context_length",
    "mem_fraction_static",
    "max_running_requests",
    "max_total_tokens",
    "chunked_prefill_size",
    "cuda_graph_max_bs",
    "disable_cuda_graph",
    "page_size",
    "reasoning_parser",
    "watchdog_timeout",
)
# Modules SGLang imports at parse time that a CPU check venv cannot load (CUDA-only wheels, or
# torchvision, whose PyPI build does not load beside CPU torch). Stubbed only when absent.
STUBBED = ("torchvision", "sgl_kernel", "flashinfer", "decord", "torchaudio")


class _Placeholder(types.ModuleType):
    """A module whose every attribute is another placeholder; calling one raises."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        child = _Placeholder(f"{self.__name__}.{name}")
        setattr(self, name, child)
        return child

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f"{self.__name__} is a kit check stand-in")

    def __mro_entries__(self, bases):
        return (object,)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots: set[str]):
        self.roots = roots

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Placeholder(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        return None


def _stub_missing(workdir: str) -> list[str]:
    missing = {name for name in STUBBED if importlib.util.find_spec(name) is None}
    if missing:
        sys.meta_path.append(_StubFinder(missing))
        # transformers asks importlib.metadata for the version of what it can import; a stand-in
        # without one reads as 'N/A' and breaks its version comparisons.
        site = os.path.join(workdir, "stub-metadata")
        for name in missing:
            info = os.path.join(site, f"{name}-0.0.0.dist-info")
            os.makedirs(info, exist_ok=True)
            with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as handle:
                handle.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.0\n")
        sys.path.append(site)
    return sorted(missing)


def _emulate_cuda(spec: dict) -> None:
    import torch

    major, minor = spec["capability"]
    total = int(spec["memory_gib"] * 1024**3)
    count = int(spec["device_count"])
    name = spec.get("name", "emulated GPU")

    props = types.SimpleNamespace(
        name=name,
        major=major,
        minor=minor,
        total_memory=total,
        multi_processor_count=188,
        is_integrated=False,
        is_multi_gpu_board=False,
        L2_cache_size=128 * 1024**2,
        warp_size=32,
        gcnArchName="",
        uuid="00000000-0000-0000-0000-000000000000",
    )
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: count
    cuda.current_device = lambda: 0
    cuda.get_device_capability = lambda device=None: (major, minor)
    cuda.get_device_properties = lambda device=None: props
    cuda.get_device_name = lambda device=None: name
    cuda.mem_get_info = lambda device=None: (total, total)
    cuda.is_bf16_supported = lambda *a, **k: True
    cuda.set_device = lambda device: None
    torch.version.cuda = spec.get("cuda_version") or "12.9"
    # SGLang reads GPU memory through nvidia-smi; the emulated device answers instead.
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", ",".join(str(i) for i in range(count)))


def _patch_smi(memory_gib: float) -> None:
    """Replace SGLang's nvidia-smi reader (imported by name in several modules) with the emulated answer."""
    mib = float(memory_gib * 1024)
    for name, module in list(sys.modules.items()):
        if name.startswith("sglang") and module is not None and hasattr(module, "get_nvgpu_memory_capacity"):
            module.get_nvgpu_memory_capacity = lambda: mib


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record):
        if len(self.lines) < 40:
            self.lines.append(" ".join(_ANSI.sub("", record.getMessage()).split())[:400])


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def run(request: dict) -> dict:
    started = time.monotonic()
    os.environ.update(request.get("env") or {})
    workdir = tempfile.mkdtemp(prefix="kit-check-")
    stubbed = _stub_missing(workdir)
    emulate = request.get("emulate")
    if emulate:
        _emulate_cuda(emulate)
    warnings.simplefilter("ignore")

    args = list(request["args"])
    try:
        if request.get("config_json"):
            # A model folder holding only config.json: the parser reads it, nothing downloads.
            model_dir = os.path.join(workdir, "model")
            os.makedirs(model_dir)
            shutil.copy(request["config_json"], os.path.join(model_dir, "config.json"))
            if "--model-path" in args:
                args[args.index("--model-path") + 1] = model_dir
        import sglang
        from sglang.srt import server_args as sa

        if emulate:
            _patch_smi(emulate["memory_gib"])
        records = _Records()
        logging.getLogger().addHandler(records)
        base = {
            "sglang": getattr(sglang, "__version__", "?"),
            "emulated": emulate,
            "stubbed": stubbed,
            "args": args,
        }
        stderr = io.StringIO()
        try:
            with redirect_stderr(stderr):
                parsed = sa.prepare_server_args(args)
                # 0.5.2x builds ServerArgs unresolved and launchers call resolve_once(), where the
                # model-specific rules now live; older releases resolve in __post_init__.
                resolve_once = getattr(parsed, "resolve_once", None)
                if callable(resolve_once):
                    resolve_once()
        except SystemExit as exc:  # argparse: an unknown flag or a bad choice
            message = stderr.getvalue().strip().splitlines()
            return {
                **base,
                "accepted": False,
                "error_type": "ArgumentError",
                "error": message[-1] if message else f"argparse exited {exc.code}",
                "warnings": records.lines,
                "seconds": round(time.monotonic() - started, 2),
            }
        except Exception as exc:
            return {
                **base,
                "accepted": False,
                "error_type": type(exc).__name__,
                "error": str(exc),
                "warnings": records.lines,
                "seconds": round(time.monotonic() - started, 2),
            }
        # 0.5.2x keeps declarations on the record and the resolved values in resolved_dict().
        values = parsed.resolved_dict() if callable(getattr(parsed, "resolved_dict", None)) else None
        if isinstance(values, dict):
            resolved = {k: _plain(values[k]) for k in SHOWN if k in values}
        else:
            resolved = {k: _plain(getattr(parsed, k)) for k in SHOWN if hasattr(parsed, k)}
        if str(resolved.get("model_path", "")).startswith(workdir):
            resolved["model_path"] = "(config.json only)"
        return {
            **base,
            "accepted": True,
            "resolved": resolved,
            "warnings": records.lines,
            "seconds": round(time.monotonic() - started, 2),
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as handle:
        request = json.load(handle)
    try:
        result = run(request)
    except Exception as exc:  # the check itself broke (an import, the emulation): report, don't hide
        result = {"accepted": None, "error_type": type(exc).__name__, "error": str(exc), "internal": True}
    sys.stdout.write(MARKER + json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
