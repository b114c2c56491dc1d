"""Load a generated tiny Qwen3.5 checkpoint into SGLang's own model classes; print what fitted. Standalone.

Runs in a `kit check` venv (the pinned sglang wheel, CPU torch, that release's transformers) with
the CPU rehearsal's stand-ins on sys.path, never inside the kit:

    python sglang_loads_tiny_qwen3_5.py MODEL_DIR SHIMS_DIR CHECK_DIR

It builds SGLang's Qwen3_5MoeForConditionalGeneration (models/qwen3_5.py) and the MTP head
Qwen3_5ForCausalLMMTP (models/qwen3_5_mtp.py) from the checkpoint's config.json, as the CPU engine
does at TP 1 (ModelConfig, then the CPU head alignment ModelRunner applies), fills every parameter
with NaN and runs each class's own load_weights over every tensor of the checkpoint. A name SGLang
does not know is logged as 'not found' or leaves a parameter NaN; a wrong shape raises in the
weight loader. Prints one line `KIT_LOAD_RESULT {json}`.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import sys
import tempfile

MARKER = "KIT_LOAD_RESULT "


def main() -> None:
    model_dir, shims_dir, check_dir = sys.argv[1:4]
    os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
    # The rehearsal's sgl_kernel (with the hybrid ops models/qwen3_5.py binds at import) and
    # torchvision stand-ins; the check driver's placeholders for the other CUDA-only imports.
    sys.path[:0] = [shims_dir, check_dir]
    from driver import _stub_missing

    _stub_missing(tempfile.mkdtemp(prefix="kit-load-"))

    import torch
    from safetensors import safe_open

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29641", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.configs.update_config import adjust_config_with_unaligned_cpu_tp
    from sglang.srt.distributed import parallel_state
    from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish, reset_context
    from sglang.srt.server_args import ServerArgs

    # One process, world size 1: what sglang/test/layer_ut_utils.py init_single_process_dist does.
    parallel_state.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo")
    reset_context()
    args = ServerArgs(
        model_path=model_dir, device="cpu", tp_size=1, mamba_radix_cache_strategy="no_buffer",
        disable_overlap_schedule=True,
    )  # fmt: skip
    publish(args, role="test", ranks=SpawnRanks(world_rank=0))
    if parallel_state._WORLD is not None:
        get_parallel().override_permanently(world_group=parallel_state._WORLD)
    parallel_state.initialize_model_parallel(backend="gloo")
    model_config = adjust_config_with_unaligned_cpu_tp(ModelConfig.from_server_args(args), LoadConfig(), 1)

    from sglang.srt.models.qwen3_5 import Qwen3_5MoeForConditionalGeneration
    from sglang.srt.models.qwen3_5_mtp import Qwen3_5ForCausalLMMTP

    checkpoint: list[tuple[str, torch.Tensor]] = []
    for path in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        with safe_open(path, "pt") as handle:
            checkpoint += [(name, handle.get_tensor(name)) for name in handle.keys()]  # noqa: SIM118

    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                messages.append(record.getMessage())

    logging.getLogger("sglang").addHandler(Collect())
    torch.set_default_dtype(torch.bfloat16)
    result = {"sglang": __import__("sglang").__version__, "classes": {}}
    for cls in (Qwen3_5MoeForConditionalGeneration, Qwen3_5ForCausalLMMTP):
        model = cls(model_config.hf_config)
        params = dict(model.named_parameters())
        for param in params.values():
            param.data.fill_(float("nan"))
        messages.clear()
        error = None
        try:
            model.load_weights(iter(checkpoint))
        except Exception as exc:  # a loader's shape assertion names the tensor
            error = f"{type(exc).__name__}: {exc}"
        result["classes"][cls.__name__] = {
            "error": error,
            "warnings": list(messages),
            "params": {name: list(p.shape) for name, p in params.items()},
            "unloaded": sorted(name for name, p in params.items() if torch.isnan(p.float()).any()),
            "param_elements": sum(p.numel() for p in params.values()),
        }
    result["checkpoint"] = {name: list(t.shape) for name, t in checkpoint}
    print(MARKER + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
