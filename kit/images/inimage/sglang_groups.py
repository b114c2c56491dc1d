"""SGLang's own distributed set-up, for the kit's in-image probes. Standalone: stdlib, torch, sglang.

`kit preflight`'s ranks (kit/pivot/inimage/ranks.py, copied in beside this file at run time) and
`kit image verify`'s collective (verify.py, baked at /opt/kit/ beside this file) build their groups
here, so both test NCCL (or gloo on the CPU rehearsal) under what the server itself does:

prepare(...)      in the launcher, before any rank exists, as SGLang's launcher does before it
                  spawns its schedulers:
                  - the release's own argument parser reads the launch; the flags SGLang's
                    distributed set-up reads (`fields`) make a ServerArgs over a stand-in model
                    (a config.json only: no weights, no tokenizer);
                  - the release's ServerArgs resolution (0.5.21+: `resolve_once`, whose hooks set
                    some NCCL_* variables) and `entrypoints/engine.py::_set_envs_and_config`
                    (NCCL_CUMEM_ENABLE=0 unless symmetric memory, NCCL_NVLS_ENABLE=0,
                    CUDA_DEVICE_MAX_CONNECTIONS=8, ...) run, and what they changed in os.environ is
                    reported as SGLang's, beside the profile's and the kit's variables.
init_groups(...)  in each rank, the groups as the release's scheduler builds them:
                  - a release with `distributed/bootstrap.py::init_parallel_runtime` (0.5.23):
                    `runtime_context.publish` with the rank's placement, then that function itself
                    (set_device, the P2P-check patch unless --enable-p2p-check, the all-reduce flags,
                    init_distributed_environment, initialize_model_parallel, --pre-warm-nccl);
                  - 0.5.10.post1, where the same steps sit inside ModelRunner.init_torch_distributed
                    (model_executor/model_runner.py, lines 889-998) and cannot be called without a
                    model: the same calls, in the same order, with the same arguments.
                  initialize_model_parallel builds the TP group: on CUDA its PyNccl communicator
                  (device_communicators/pynccl.py: ncclCommInitRank, then SGLang's warm-up
                  all_reduce, a raw NCCL call no timeout bounds) and its custom all-reduce set-up.
tp_all_reduce(...) a checked all_reduce through SGLang's TP group, by SGLang's own dispatch.
start_ranks(...)  the launcher: one process per rank. Forked on CPU (imports are paid once);
                  spawned on CUDA, as SGLang starts its schedulers (entrypoints/engine.py sets the
                  "spawn" start method): the launcher's ServerArgs resolution may initialise CUDA,
                  which a forked child cannot use. The ServerArgs travels to each rank pickled, as
                  SGLang's does.

Where sglang cannot be imported, or its set-up refuses, `prepare` says why, `init_groups` builds
plain torch.distributed groups (NCCL eager with device_id), and every report carries the reason.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import inspect
import json
import multiprocessing
import multiprocessing.connection
import os
import socket
import tempfile
import time
from datetime import timedelta

# A tiny Qwen2 config: enough for SGLang's ServerArgs to resolve a model; nothing is loaded from it.
STAND_IN_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "max_position_embeddings": 4096,
    "vocab_size": 1000,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "hidden_act": "silu",
}
ENGINE_ENV = "sglang.srt.entrypoints.engine._set_envs_and_config"
RESOLUTION = "sglang.srt.server_args.ServerArgs (resolution)"
IMPORT = "import sglang"


class Mismatch(Exception):
    """A collective ran to the end and its check found wrong values."""


# -- the launcher: SGLang's arguments and environment -------------------------------------------------


def _release() -> tuple[str | None, str | None]:
    """(sglang's version, why it cannot be used) from the distribution, without importing it."""
    try:
        return importlib.metadata.version("sglang"), None
    except importlib.metadata.PackageNotFoundError:
        return None, "sglang is not installed in this image"


def _stand_in_model() -> str:
    folder = tempfile.mkdtemp(prefix="kit-stand-in-model-")
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(STAND_IN_CONFIG, handle)
    return folder


def _server_args(sglang_server_args, argv: list[str], fields: list[str], world: int, device: str):
    """A ServerArgs with the launch's distributed flags (by SGLang's own parser) over a stand-in model.

    Returns (server_args, {field: value} taken from the launch)."""
    parser = argparse.ArgumentParser(prog="sglang serve", add_help=False)
    sglang_server_args.ServerArgs.add_cli_args(parser)
    try:
        parsed = parser.parse_args([*argv, *([] if "--model-path" in argv else ["--model-path", "stand-in"])])
    except SystemExit as exc:  # argparse's own refusal (printed on stderr): a report, not an exit
        raise ValueError(f"SGLang's parser refused the launch (exit {exc.code})") from None
    taken = {name: getattr(parsed, name) for name in fields if hasattr(parsed, name)}
    taken["device"] = device
    server_args = sglang_server_args.ServerArgs(
        model_path=_stand_in_model(), tp_size=world, skip_tokenizer_init=True, **taken
    )
    return server_args, taken


def _changed(before: dict[str, str]) -> dict[str, tuple[str | None, str]]:
    return {
        key: (before.get(key), value)
        for key, value in os.environ.items()
        if before.get(key) != value and not key.startswith("KIT_")
    }


def prepare(request: dict, *, world: int, device: str) -> dict:
    """SGLang's launcher-side set-up in this process (see the module's docstring).

    REQUEST: "launch_argv" (the launch's flags), "server_args" (the fields to take from it),
    "env_sources" ({variable: "profile" | "kit"} for what the container was given).
    Returns a dict: sglang (version), recipe, server_args, settings, error, import_s (JSON-able),
    and "_server_args", SGLang's own ServerArgs (picklable, as SGLang sends it to its schedulers)."""
    started = time.monotonic()
    version, error = _release()
    sources = dict(request.get("env_sources") or {})
    info: dict = {"sglang": version, "recipe": None, "server_args": {}, "error": error}
    before = dict(os.environ)
    by: dict[str, str] = {}
    if error is None:
        try:
            server_args_module = importlib.import_module("sglang.srt.server_args")
            parallel_state = importlib.import_module("sglang.srt.distributed.parallel_state")
            engine = importlib.import_module("sglang.srt.entrypoints.engine")
            recipe = _recipe(parallel_state)
            by.update(dict.fromkeys(_changed(before), IMPORT))
            imported = dict(os.environ)
            server_args, taken = _server_args(
                server_args_module,
                list(request.get("launch_argv") or []),
                list(request.get("server_args") or []),
                world,
                device,
            )
            info["server_args"] = {k: _plain(v) for k, v in taken.items()}
            if hasattr(server_args, "resolve_once"):  # 0.5.21+: resolution is a step of its own
                server_args.resolve_once()
            by.update(dict.fromkeys(_changed(imported), RESOLUTION))  # 0.5.10: __post_init__
            resolved = dict(os.environ)
            engine._set_envs_and_config(server_args)
            by.update(dict.fromkeys(_changed(resolved), ENGINE_ENV))
            info.update(recipe=recipe, _server_args=server_args)
        except Exception as exc:  # a refusal is reported; the probe goes on with plain torch groups
            info["error"] = f"SGLang's own set-up failed: {type(exc).__name__}: {exc}"[:2000]
            # what it had set before it failed stays set, and is named
            by.update({key: "sglang, before it failed" for key in _changed(before) if key not in by})
    info["settings"] = settings(before, sources, by)
    info["import_s"] = round(time.monotonic() - started, 3)
    return info


def settings(before: dict[str, str], sources: dict[str, str], sglang_by: dict[str, str]) -> dict:
    """{variable: {value, source, by?, replaced?}}: what the ranks run under, and where it came from."""
    out: dict[str, dict] = {}
    for key, source in sorted(sources.items()):
        if key in before:
            out[key] = {"value": before[key], "source": source}
    for key, by in sorted(sglang_by.items()):
        entry = {"value": os.environ.get(key), "source": "sglang", "by": by}
        if key in out:
            entry["replaced"] = out[key]
        out[key] = entry
    return out


def _plain(value):
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


RECIPES = {
    "bootstrap": {
        "ps": "sglang.srt.distributed.parallel_state",
        "bootstrap": "sglang.srt.distributed.bootstrap",
        "runtime_context": "sglang.srt.runtime_context",
    },
    "model-runner": {
        "ps": "sglang.srt.distributed.parallel_state",
        "utils": "sglang.srt.utils",
        "dp_attention": "sglang.srt.layers.dp_attention",
        "model_config": "sglang.srt.configs.model_config",
    },
}
"""The modules each way of building the groups calls, imported in the launcher and again in each rank
(a spawned rank starts without them)."""


def _recipe(parallel_state) -> str:
    """How this release builds its groups: 'bootstrap' (0.5.23) or 'model-runner' (0.5.10.post1)."""
    try:
        bootstrap = importlib.import_module("sglang.srt.distributed.bootstrap")
    except ImportError:
        bootstrap = None
    if bootstrap is not None and hasattr(bootstrap, "init_parallel_runtime"):
        recipe = "bootstrap"
    elif (
        "tensor_model_parallel_size" in inspect.signature(parallel_state.initialize_model_parallel).parameters
    ):
        recipe = "model-runner"
    else:
        raise RuntimeError("this release builds its groups in a way the kit does not know")
    _modules(recipe)  # every module it needs imports here, before any rank exists
    return recipe


def _parameters(function) -> set[str]:
    return set(inspect.signature(function).parameters)


def _modules(recipe: str) -> dict:
    return {name: importlib.import_module(path) for name, path in RECIPES[recipe].items()}


# -- each rank: the groups ------------------------------------------------------------------------


def init_groups(prepared: dict, *, rank: int, world: int, device: str, port: int, timeout_s: float) -> dict:
    """Build this rank's groups (SGLang's, or plain torch's where prepare() said why not)."""
    import torch

    if device == "cuda":
        torch.cuda.set_device(rank)
    server_args = prepared.get("_server_args")
    if server_args is None:
        return _plain_init(rank=rank, world=world, device=device, port=port, timeout_s=timeout_s)
    modules = _modules(prepared["recipe"])
    if prepared["recipe"] == "bootstrap":
        _bootstrap_init(modules, server_args, rank=rank, device=device, port=port)
    else:
        _model_runner_init(modules, server_args, rank=rank, world=world, device=device, port=port)
    return {"groups": "sglang", "recipe": prepared["recipe"], **describe_tp_group(modules["ps"])}


def _bootstrap_init(modules: dict, server_args, *, rank: int, device: str, port: int) -> None:
    """0.5.23's scheduler: managers/scheduler.py::run_scheduler_process publishes the rank's
    placement, then Scheduler.__init__ calls distributed/bootstrap.py::init_parallel_runtime."""
    context = modules["runtime_context"]
    context.publish(
        server_args,
        role="scheduler",
        ranks=context.SpawnRanks(
            world_rank=context.spawn_world_rank(server_args, tp_rank=rank, pp_rank=0),
            dp_rank=None,
            gpu_id=rank,
        ),
    )
    modules["bootstrap"].init_parallel_runtime(server_args=server_args, device=device, dist_port=port)


def _model_runner_init(modules: dict, server_args, *, rank: int, world: int, device: str, port: int) -> None:
    """0.5.10.post1's ModelRunner.init_torch_distributed (model_executor/model_runner.py:889-998) for
    a target worker at pp_size 1, without the model: the same calls, order and arguments."""
    import torch
    import torch.distributed as dist

    ps, utils = modules["ps"], modules["utils"]
    backend = ps.get_default_distributed_backend(device)
    if not server_args.enable_p2p_check:
        utils.monkey_patch_p2p_access_check()
    init_method = f"tcp://{server_args.host or '127.0.0.1'}:{port}"
    if getattr(server_args, "dist_init_addr", None):
        init_method = f"tcp://{server_args.dist_init_addr}"
    ps.set_custom_all_reduce(not server_args.disable_custom_all_reduce)
    if hasattr(ps, "set_mscclpp_all_reduce"):
        ps.set_mscclpp_all_reduce(server_args.enable_mscclpp)
    if hasattr(ps, "set_torch_symm_mem_all_reduce"):
        ps.set_torch_symm_mem_all_reduce(server_args.enable_torch_symm_mem)
    ps.init_distributed_environment(
        backend=backend,
        world_size=world,
        rank=rank,
        local_rank=rank,
        distributed_init_method=init_method,
        timeout=server_args.dist_timeout,
        moe_a2a_backend=getattr(server_args, "moe_a2a_backend", None),
    )
    ps.initialize_model_parallel(
        tensor_model_parallel_size=world,
        attention_data_parallel_size=server_args.dp_size if server_args.enable_dp_attention else 1,
        pipeline_model_parallel_size=1,
        expert_model_parallel_size=server_args.ep_size,
        attention_context_model_parallel_size=getattr(server_args, "attn_cp_size", 1),
        moe_data_model_parallel_size=getattr(server_args, "moe_dp_size", 1),
        duplicate_tp_group=server_args.enable_pdmux,
    )
    model_config = modules["model_config"].ModelConfig.from_server_args(server_args)
    modules["dp_attention"].initialize_dp_attention(server_args=server_args, model_config=model_config)
    if getattr(server_args, "pre_warm_nccl", False) and world > 1:
        warmup = torch.zeros(1, device=torch.cuda.current_device())
        dist.all_reduce(warmup, group=ps.get_tp_group().device_group)
        torch.cuda.synchronize()


def describe_tp_group(ps) -> dict:
    """What SGLang built on its TP group: the backend and which of its communicators are live."""
    import torch.distributed as dist

    tp = ps.get_tp_group()
    custom = getattr(tp, "ca_comm", None)
    pynccl = getattr(tp, "pynccl_comm", None)
    return {
        "backend": str(dist.get_backend(tp.device_group)),
        "tp_world": tp.world_size,
        "pynccl": bool(pynccl is not None and getattr(pynccl, "available", False)),
        # None: not built (off, one GPU, or its set-up failed); else the class and whether it runs.
        "custom_all_reduce": (
            None
            if custom is None
            else f"{type(custom).__name__}{' (disabled)' if getattr(custom, 'disabled', False) else ''}"
        ),
    }


def _plain_init(*, rank: int, world: int, device: str, port: int, timeout_s: float) -> dict:
    import torch
    import torch.distributed as dist

    options: dict = {
        "backend": "nccl" if device == "cuda" else "gloo",
        "init_method": f"tcp://127.0.0.1:{port}",
        "rank": rank,
        "world_size": world,
        "timeout": timedelta(seconds=timeout_s),
    }
    if device == "cuda" and "device_id" in inspect.signature(dist.init_process_group).parameters:
        options["device_id"] = torch.device("cuda", rank)  # eager: a communicator hang shows in init
    dist.init_process_group(**options)
    return {"groups": "torch.distributed", "backend": str(dist.get_backend()), "tp_world": world}


def groups(prepared: dict):
    """(the device group the collectives run on, a gloo group for the kit's own bookkeeping)."""
    import torch.distributed as dist

    if prepared.get("_server_args") is not None:
        tp = _modules(prepared["recipe"])["ps"].get_tp_group()
        return tp.device_group, tp.cpu_group
    control = dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else None
    return None, control


def tp_coordinator(prepared: dict):
    """SGLang's TP GroupCoordinator, or None where SGLang's groups were not built (prepare said why)."""
    if prepared.get("_server_args") is None:
        return None
    return _modules(prepared["recipe"])["ps"].get_tp_group()


def capture_context(prepared: dict):
    """SGLang's own graph_capture(): the module-level one where the release has it (0.5.23
    distributed/parallel_state.py: the TP group's context, then PP's and every other group's, as
    the decode runner enters it), else the TP group's GroupCoordinator.graph_capture(). Inside it
    PyNccl is enabled (pynccl_comm.change_state(enable=True)) and the custom all-reduce records its
    buffers, which it registers when the context exits."""
    ps = _modules(prepared["recipe"])["ps"]
    return ps.graph_capture() if hasattr(ps, "graph_capture") else ps.get_tp_group().graph_capture()


ALL_REDUCE_PATHS = {
    "ca": "custom all-reduce",
    "pcie_ipc": "PCIe IPC all-reduce",
    "qr": "quick all-reduce",
    "pymscclpp": "MSCCL++",
    "torch_symm_mem": "torch symmetric memory",
    "pynccl": "PyNccl",
}


def all_reduce_path(tp, tensor) -> str:
    """Which communicator GroupCoordinator.all_reduce picks for TENSOR now (0.5.23's own rule,
    `_resolve_outplace_all_reduce_method`; None there means the in-place path: PyNccl where enabled,
    else torch.distributed)."""
    if tp.world_size == 1:
        return "none (one rank: SGLang's all_reduce returns its input)"
    method = None
    resolve = getattr(tp, "_resolve_outplace_all_reduce_method", None)
    if resolve is not None:
        try:
            method = resolve(tensor)
        except Exception:  # naming the path must not fail the step
            method = None
    if method:
        return ALL_REDUCE_PATHS.get(method, method)
    pynccl = getattr(tp, "pynccl_comm", None)
    return "PyNccl" if pynccl is not None and not getattr(pynccl, "disabled", True) else "torch.distributed"


def tp_all_reduce(prepared: dict, tensor):
    """All-reduce TENSOR as the server would: SGLang's TP group dispatch (custom all-reduce, PyNccl or
    torch.distributed by its own rules), or torch.distributed's default group without SGLang."""
    import torch.distributed as dist

    if prepared.get("_server_args") is not None:
        return _modules(prepared["recipe"])["ps"].get_tp_group().all_reduce(tensor)
    dist.all_reduce(tensor)
    return tensor


def checked_all_reduce(prepared: dict, *, rank: int, world: int, device, elements: int) -> dict:
    """(i % 7 + 1) * (rank + 1) summed over every rank, every element checked; raises Mismatch."""
    import torch

    pattern = torch.arange(elements, dtype=torch.float32, device=device) % 7 + 1
    values = tp_all_reduce(prepared, pattern * (rank + 1))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    expected = pattern * (world * (world + 1) / 2)
    wrong = int((values != expected).sum().item())
    if wrong:
        first = int((values != expected).nonzero()[0].item())
        raise Mismatch(
            f"{wrong} of {elements} values wrong after all_reduce "
            f"(element {first}: {values[first].item()}, expected {expected[first].item()})"
        )
    return {"elements": elements, "dtype": "float32"}


# -- the launcher: one process per rank --------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_method(device: str) -> str:
    """'spawn' on CUDA (SGLang's own for its schedulers; CUDA cannot be used in a forked child once the
    launcher touched it), 'fork' on CPU (the imports are paid once)."""
    return "spawn" if device == "cuda" else "fork"


def start_ranks(
    world: int, target, args: tuple, *, method: str, timeout_s: float, on_exit, on_timeout
) -> int:
    """Start WORLD processes (METHOD: fork or spawn) running target(rank, *args); wait for each
    (on_exit(rank, code)) until TIMEOUT_S, a last resort: the caller keeps the real deadlines.
    0 when every rank exited 0."""
    started = time.monotonic()
    context = multiprocessing.get_context(method)
    processes = {
        rank: context.Process(target=target, args=(rank, *args), name=f"rank{rank}") for rank in range(world)
    }
    for process in processes.values():
        process.start()
    running = dict(processes)
    codes: dict[int, int] = {}
    while running:
        remaining = started + timeout_s - time.monotonic()
        if remaining <= 0:
            on_timeout(sorted(running), round(time.monotonic() - started, 1))
            for process in running.values():
                process.kill()
            return 124
        sentinels = {process.sentinel: rank for rank, process in running.items()}
        for ready in multiprocessing.connection.wait(list(sentinels), timeout=min(remaining, 1.0)):
            rank = sentinels[ready]
            process = running.pop(rank)
            process.join()
            codes[rank] = int(process.exitcode or 0)
            on_exit(rank, codes[rank])
    return 0 if not any(codes.values()) else 1
