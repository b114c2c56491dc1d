"""Run SGLang's own argument handling on launches ("cells"), and report what it said. Standalone.

This file runs inside a check venv (pinned sglang, CPU torch) or inside the image itself, never
inside the kit: it imports only the standard library, torch and sglang. It reads a request (JSON)
from the file named by argv[1] and prints one line `KIT_CHECK_RESULT {json}` per cell on stdout,
in the order given, as each finishes.

    request = {"cells": [cell, ...]}     (a bare cell is a request of one)
    cell    = {"id": "...", "args": [...server flags...], "config_json": "/path/config.json",
               "env": {...}, "emulate": null | {"capability": [12, 0], "memory_gib": 96,
               "device_count": 4, "name": "...", "cuda_version": "12.9"}}

Imports cost seconds and a cell milliseconds, so one process serves many cells: cells that share env and
emulated device form a group, one forked process imports SGLang once for the group (some modules read env
and the device at import), and every cell runs in its own fork of that process, so nothing a cell's
ServerArgs does (env it sets, caches it fills, loggers) reaches the next.

`prepare_server_args` builds ServerArgs, whose post-init holds SGLang's model-specific rules (the 0.5.10
MTP-on-hybrid ValueError among them). Some of them assert a CUDA device; on a machine without one, `emulate`
makes torch.cuda answer like the target GPU (capability, memory, count) so the rules run as they would
there. Nothing touches a device: the parser never allocates.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import logging
import os
import re
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback
import types
import warnings
from contextlib import redirect_stderr

MARKER = "KIT_CHECK_RESULT "
# A cell that takes longer than this is stuck (a parse takes well under a second).
CELL_TIMEOUT_S = 120
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
    "cuda_graph_config",  # 0.5.2x: per phase the capture backend and sizes (kit/pivot/graph_step.py)
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


class _NoOp(_Placeholder):
    """Like _Placeholder, but calling one does nothing and returns None (a backend's constructor, a
    helper that would pick a kernel default: None is 'no default', so the registry goes on to its
    checks instead of publishing one into a runtime context that only a server has)."""

    def __call__(self, *args, **kwargs):
        return None

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _NoOp(f"{self.__name__}.{name}")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots: set[str], prefixes: tuple[str, ...] = (), keep=(), module=None):
        self.roots = roots
        self.prefixes = prefixes
        self.keep = set(keep)
        self.module = module

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.keep:
            return None
        if fullname.split(".")[0] in self.roots or (self.prefixes and fullname.startswith(self.prefixes)):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        if self.module is not None:
            return self.module(spec.name)
        module = _Placeholder(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0"  # as its stand-in METADATA says
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
            # packages_distributions() maps import names through top_level.txt (transformers 5.12).
            with open(os.path.join(info, "top_level.txt"), "w", encoding="utf-8") as handle:
                handle.write(f"{name}\n")
        sys.path.append(site)
    return sorted(missing)


def _tolerate_stubbed_ops(stubbed: list[str]) -> None:
    """Fake-tensor registrations for a stand-in's ops (sgl_kernel::...) become no-ops.

    Some releases register fake kernels for sgl_kernel ops at import time (0.5.9's fp8_kernel.py,
    imported while the parser reads the model's quantization); without the real wheel the op does
    not exist and torch raises, which is the venv's limitation, not SGLang's verdict.
    """
    import torch

    namespaces = tuple(f"{name}::" for name in stubbed)
    original = torch.library.register_fake

    def register_fake(op, *args, **kwargs):
        if isinstance(op, str) and op.startswith(namespaces):
            return (lambda fn: fn) if not args or not callable(args[0]) else args[0]
        return original(op, *args, **kwargs)

    torch.library.register_fake = register_fake


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


_BACKEND_FIELDS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _Records(logging.Handler):
    """SGLang's warnings during the parse. Some releases reconfigure logging while parsing
    (basicConfig(force=True) drops the root's handlers), so records are taken where every logger
    hands them on, not from a handler on the root."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def listen(self) -> None:
        original = logging.Logger.handle
        records = self

        def handle(logger, record):
            if record.levelno >= logging.WARNING and not logger.disabled:
                records.emit(record)
            return original(logger, record)

        logging.Logger.handle = handle  # this process is one cell's: nothing else shares it

    def emit(self, record):
        if len(self.lines) < 80:
            self.lines.append(" ".join(_ANSI.sub("", record.getMessage()).split())[:400])


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str, dict, list, tuple)):
        return json.loads(json.dumps(value, default=str))  # JSON's own shapes pass (cuda_graph_config)
    return str(value)


def _isolated_run(cell: dict, model_dir: str | None, stubbed: list[str]) -> dict:
    """One cell, in the current (forked) process: env, device, then SGLang's parser."""
    started = time.monotonic()
    os.environ.update(cell.get("env") or {})
    emulate = cell.get("emulate")
    if emulate:
        _emulate_cuda(emulate)
        _patch_smi(emulate["memory_gib"])
    warnings.simplefilter("ignore")
    args = list(cell["args"])
    if model_dir and "--model-path" in args:
        # A model folder holding only config.json: the parser reads it, nothing downloads.
        args[args.index("--model-path") + 1] = model_dir
    import sglang
    from sglang.srt import server_args as sa

    records = _Records()
    records.listen()
    base = {
        "id": cell.get("id"),
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
            "stage": "parser",
            "error_type": "ArgumentError",
            "error": message[-1] if message else f"argparse exited {exc.code}",
            "warnings": records.lines,
            "seconds": round(time.monotonic() - started, 3),
        }
    except Exception as exc:
        return {
            **base,
            "accepted": False,
            "stage": "parser",
            "error_type": type(exc).__name__,
            "error": str(exc),
            "warnings": records.lines,
            "seconds": round(time.monotonic() - started, 3),
        }
    # 0.5.2x keeps declarations on the record and the resolved values in resolved_dict().
    values = parsed.resolved_dict() if callable(getattr(parsed, "resolved_dict", None)) else None
    if isinstance(values, dict):
        resolved = {k: _plain(values[k]) for k in SHOWN if k in values}
    else:
        resolved = {k: _plain(getattr(parsed, k)) for k in SHOWN if hasattr(parsed, k)}
    if model_dir and str(resolved.get("model_path", "")).startswith(model_dir):
        resolved["model_path"] = "(config.json only)"
    result = {**base, "accepted": True, "resolved": resolved}
    if "load" in (cell.get("stages") or ()):
        every = values if isinstance(values, dict) else vars(parsed)
        stage = _load_stage(parsed, {k: every.get(k) for k in _BACKEND_FIELDS})
        result["load"] = stage
        if stage.get("ran") and not stage.get("accepted"):
            result.update(accepted=False, stage="load", error_type="AssertionError", error=stage["error"])
    return {**result, "warnings": records.lines, "seconds": round(time.monotonic() - started, 3)}


# The attention backends' own modules (kernels, FLA, hardware backends): the load stage replaces
# them with do-nothing stand-ins, so only the registry's checks run, never a kernel.
_BACKEND_MODULES = ("sglang.srt.layers.attention.", "sglang.kernels.", "sglang.srt.hardware_backend.")
_REGISTRY = "sglang.srt.layers.attention.attention_registry"


class _Runner:
    """What the attention registry reads from a ModelRunner: the parsed args, the model config,
    whether the model is a hybrid linear-attention one, and the resolved backend pair. Reading any
    other attribute is recorded and raises (getattr defaults and hasattr included): a stand-in that
    answered None would decide the cell on a value no ModelRunner holds."""

    def __init__(self, parsed, values: dict, model_config, text_config):
        self.server_args = parsed
        self.model_config = model_config
        self.use_mla_backend = False
        self.is_draft_worker = False
        self.hybrid_gdn_config = text_config
        self.mambaish_config = text_config
        self.mamba2_config = None
        self.kimi_linear_config = None
        self.hybrid_lightning_config = None
        attention = values.get("attention_backend")
        self.prefill_attention_backend_str = values.get("prefill_attention_backend") or attention
        self.decode_attention_backend_str = values.get("decode_attention_backend") or attention
        self.unknown: list[str] = []

    def __getattr__(self, name: str):
        if not name.startswith("__"):
            self.unknown.append(name)  # fails the cell: the release reads what the stand-in lacks
        raise AttributeError(f"the kit's stand-in ModelRunner has no '{name}'")


def _load_stage(parsed, values: dict) -> dict:
    """The hybrid-GDN attention checks SGLang runs when the model runner builds its backends.

    They live in layers/attention/attention_registry.py (attn_backend_wrapper), not in ServerArgs:
    0.5.9 asserts triton or trtllm_mha on Blackwell there. The release's own function runs with a
    stand-in runner (the parsed args, the model's config, the resolved backends) and do-nothing
    backend modules; an AssertionError is the release refusing the launch at model load.
    """
    try:
        registry = importlib.import_module(_REGISTRY)
        wrapper = registry.attn_backend_wrapper
        from sglang.srt.configs.model_config import ModelConfig

        model_config = ModelConfig.from_server_args(parsed)
        text = getattr(model_config.hf_config, "get_text_config", None)
        text_config = text() if callable(text) else model_config.hf_config
    except Exception as exc:
        return {"ran": False, "why": f"{type(exc).__name__}: {exc}"[:300]}
    for name in list(sys.modules):
        if name.startswith(_BACKEND_MODULES) and name != _REGISTRY:
            sys.modules[name] = _noop_module(name)
    sys.meta_path.insert(
        0, _StubFinder(set(), prefixes=_BACKEND_MODULES, keep={_REGISTRY}, module=_noop_module)
    )
    runner = _Runner(parsed, values, model_config, text_config)
    try:
        wrapper(runner, _NoOp("full_attn_backend"))
        stage = {"ran": True, "accepted": True}
    except AssertionError as exc:
        stage = {"ran": True, "accepted": False, "error": str(exc)}
    except Exception as exc:
        stage = {"ran": False, "why": f"{type(exc).__name__}: {exc}"[:300]}
    if runner.unknown:  # whatever happened rested on an attribute the stand-in does not have
        unknown = sorted(set(runner.unknown))
        return {"ran": False, "why": f"the stand-in runner lacks {', '.join(unknown)}", "unknown": unknown}
    return stage


def _noop_module(name: str) -> types.ModuleType:
    module = _NoOp(name)
    module.__path__ = []
    return module


def _where(exc: BaseException) -> str:
    """'file:line < file:line' nearest the raise: an import failure names the dependency and its importer."""
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    return " < ".join(f"{'/'.join(f.filename.split('/')[-2:])}:{f.lineno}" for f in reversed(frames))


def _internal(cell: dict, exc_type: str, message: str) -> dict:
    return {
        "id": cell.get("id"),
        "accepted": None,
        "error_type": exc_type,
        "error": message,
        "internal": True,
    }


def _emit(result: dict) -> None:
    sys.stdout.write(MARKER + json.dumps(result) + "\n")
    sys.stdout.flush()


def _in_fork(work, cell: dict, timeout: float) -> dict:
    """Run work() in a child process; its JSON result comes back through a pipe."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_fd)
        try:
            result = work()
        except BaseException as exc:
            result = _internal(cell, type(exc).__name__, str(exc))
        with os.fdopen(write_fd, "w", encoding="utf-8") as out:
            out.write(json.dumps(result))
        os._exit(0)
    os.close(write_fd)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([read_fd], [], [], max(left, 0))
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_fd)
            return _internal(cell, "Timeout", f"no answer within {timeout:.0f} s")
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode("utf-8", errors="replace")
    if not text:
        return _internal(cell, "Crashed", f"the cell's process ended with status {status} and no result")
    return json.loads(text)


def _warm_imports(cell: dict, model_dir: str | None, stubbed: list[str], timeout: float) -> None:
    """Import, in this group process, what a first parse imports lazily (a thousand modules, seconds).

    The parse runs in a throw-away fork that only reports the module names; here they are imported,
    nothing is parsed, so no cell inherits state a parse leaves behind (env, published config, caches).
    """
    before = set(sys.modules)

    def parse_and_list() -> dict:
        _isolated_run({**cell, "stages": []}, model_dir, stubbed)
        return {"modules": [name for name in sys.modules if name not in before]}

    found = _in_fork(parse_and_list, cell, timeout)
    for name in found.get("modules") or ():
        if name in sys.modules:
            continue
        # A module that needs its importer's context fails here; the cell then imports it itself.
        with contextlib.suppress(BaseException):
            importlib.import_module(name)


# Variables every release reads when ServerArgs runs, never at import (0.5.9-0.5.13 through
# envs.X.get(), 0.5.14-0.5.20 through os.getenv in the speculative hook): set per cell, so they do
# not split a group. Anything else may be read at import and keeps its own group.
CALL_TIME_ENV = ("SGLANG_ENABLE_SPEC_V2",)


def _group_key(cell: dict) -> str:
    # The GPU count is set again per cell (it follows TP); what modules may read at import is not.
    emulate = {k: v for k, v in (cell.get("emulate") or {}).items() if k != "device_count"}
    env = {k: v for k, v in (cell.get("env") or {}).items() if k not in CALL_TIME_ENV}
    return json.dumps([env, emulate], sort_keys=True)


def _serve_group(cells: list[dict], workdir: str, stubbed: list[str], timeout: float, emit) -> None:
    """In a fork of the top process: this group's env and device, SGLang imported once, a fork per cell."""
    first = cells[0]
    os.environ.update({k: v for k, v in (first.get("env") or {}).items() if k not in CALL_TIME_ENV})
    if first.get("emulate"):
        _emulate_cuda(first["emulate"])
    warnings.simplefilter("ignore")
    try:
        from sglang.srt import server_args  # noqa: F401 - the import is the point: children share it
    except BaseException as exc:
        for cell in cells:
            emit(_internal(cell, type(exc).__name__, f"importing sglang: {exc} ({_where(exc)})"))
        return
    model_dirs: dict[str, str] = {}
    mine = tempfile.mkdtemp(prefix="group-", dir=workdir)

    def model_dir_of(cell: dict) -> str | None:
        config = cell.get("config_json")
        if config and config not in model_dirs:
            model_dir = os.path.join(mine, f"model-{len(model_dirs)}")
            os.makedirs(model_dir)
            shutil.copy(config, os.path.join(model_dir, "config.json"))
            model_dirs[config] = model_dir
        return model_dirs.get(config) if config else None

    _warm_imports(first, model_dir_of(first), stubbed, timeout)
    for cell in cells:
        model_dir = model_dir_of(cell)
        emit(_in_fork(lambda c=cell, m=model_dir: _isolated_run(c, m, stubbed), cell, timeout))


def _run_group(group: list[dict], workdir: str, stubbed: list[str], timeout: float) -> None:
    """One group in a forked process whose results come back line by line through a pipe; a cell
    the process never answered (it died: a C extension's crash, a hard exit) is reported as such."""
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        out = os.fdopen(write_fd, "w", encoding="utf-8")

        def emit(result: dict) -> None:
            out.write(json.dumps(result) + "\n")
            out.flush()

        try:
            _serve_group(group, workdir, stubbed, timeout, emit)
        except BaseException as exc:
            out.write(json.dumps({"group_error": f"{type(exc).__name__}: {exc}"[:500]}) + "\n")
        finally:
            out.close()
            os._exit(0)
    os.close(write_fd)
    answered: set = set()
    why = ""
    with os.fdopen(read_fd, encoding="utf-8") as lines:
        for line in lines:
            result = json.loads(line)
            if "group_error" in result:
                why = f": {result['group_error']}"
                continue
            answered.add(result.get("id"))
            _emit(result)
    _, status = os.waitpid(pid, 0)
    for cell in group:
        if cell.get("id") not in answered:
            _emit(
                _internal(
                    cell, "Crashed", f"the group's process ended (wait status {status}) before this cell{why}"
                )
            )


def run_cells(cells: list[dict], timeout: float = CELL_TIMEOUT_S) -> None:
    """Every cell's result on stdout, in the order given (groups run one after another)."""
    workdir = tempfile.mkdtemp(prefix="kit-check-")
    try:
        stubbed = _stub_missing(workdir)
        import torch  # noqa: F401 - the slow import, done once for every group

        _tolerate_stubbed_ops(stubbed)

        order: dict[str, list[dict]] = {}
        for cell in cells:
            order.setdefault(_group_key(cell), []).append(cell)
        for group in order.values():
            _run_group(group, workdir, stubbed, timeout)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as handle:
        request = json.load(handle)
    cells = request.get("cells") if "cells" in request else [request]
    try:
        run_cells(cells)
    except Exception as exc:  # the check itself broke (an import, the emulation): report, don't hide
        for cell in cells:
            _emit(_internal(cell, type(exc).__name__, str(exc)))


if __name__ == "__main__":
    main()
