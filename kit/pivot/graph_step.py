"""Preflight's graph step as data: which all-reduce widths the ranks capture in a CUDA graph. Pure
(`graph_request` reads the catalog and nothing else).

Why: at TP 4 over PCIe SGLang turns its custom all-reduce off (more than two GPUs without NVLink),
so every decode, target-verify and draft graph reduces through its PyNccl communicator, which is
enabled only inside `graph_capture()` (0.5.23 `srt/distributed/parallel_state.py`
GroupCoordinator.graph_capture: `pynccl_comm.change_state(enable=True)`;
`srt/distributed/device_communicators/pynccl.py`: "by default it is disabled ... to use it, use under
`with obj.change_state(enable=True)`, usually when we are using CUDA graph"). The kit's checked
all-reduce and its sweep run eager, so they never touch that path; this step does, at the widths the
server's graphs reduce:

- decode: the decode graph's largest batch x the model's hidden size (one token per request);
- verify (speculative profiles): that batch x `--speculative-num-draft-tokens` tokens, the
  target-verify graph's width;
- prefill: one chunk (`--chunked-prefill-size` tokens, bounded by preflight.toml's
  `graph.max_prefill_tokens`) x hidden, the width a prefill graph or an eager chunk reduces;
- one size of the sweep through PyNccl itself, enabled as capture enables it.

The batch is the launch's `--cuda-graph-max-bs(-decode)` or, unset, the default SGLang 0.5.23 derives
from the GPU's memory and the TP size (`srt/arg_groups/memory_hook.py` handle_gpu_memory_settings),
capped by `--max-running-requests`; the chunk likewise. The GPU's memory is the catalog's hardware
figure for the target (kit/catalog/hardware.toml), so the plan is the same on every machine.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from pathlib import Path

LIMITS_FILE = Path(__file__).resolve().parent / "preflight.toml"
CPU_SKIP = (
    "CPU: no CUDA graphs (torch.cuda.CUDAGraph needs a GPU) and no PyNccl communicator "
    "(SGLang builds one only on CUDA)"
)

# SGLang 0.5.23 srt/arg_groups/memory_hook.py handle_gpu_memory_settings: (below this many GiB of
# GPU memory, chunked_prefill_size, decode max_bs below TP 4, decode max_bs from TP 4).
_MEMORY_DEFAULTS = (
    (20, 2048, 8, 8),
    (35, 4096, 48, 160),
    (60, 4096, 32, 160),
    (90, 8192, 256, 512),
    (160, 8192, 256, 512),
)
_LARGEST = (16384, 512, 512)  # B200, MI300
_NO_MEMORY = (4096, 160, 160)  # its fallback when the GPU's memory is unknown


def sglang_defaults(memory_gib: float | None, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode cuda-graph max batch) as SGLang 0.5.23 derives them."""
    if memory_gib is None:
        chunk, small, large = _NO_MEMORY
    else:
        chunk, small, large = next(
            ((c, s, bigger) for limit, c, s, bigger in _MEMORY_DEFAULTS if memory_gib < limit), _LARGEST
        )
    return chunk, small if tp < 4 else large


def flag_value(argv: Sequence[str], *names: str) -> str | None:
    """The value of the last of NAMES in ARGV ('--flag value' or '--flag=value'), or None."""
    found = None
    for index, arg in enumerate(argv):
        flag, sep, value = arg.partition("=")
        if flag in names:
            found = value if sep else (argv[index + 1] if index + 1 < len(argv) else None)
    return found


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def graph_plan(
    device: str,
    *,
    hidden_size: int,
    tp: int,
    argv: Sequence[str],
    gpu_memory_gib: float | None,
    limits: dict | None = None,
) -> dict:
    """The graph step's request: {"skip": why} on CPU; else the widths to capture and replay
    ({"sizes": [{"name", "tokens", "hidden"}], "pynccl_bytes", "replays", "warmup", "sources"})."""
    if device != "cuda":
        return {"skip": CPU_SKIP}
    if "--disable-cuda-graph" in argv:
        return {
            "skip": "the launch disables CUDA graphs (--disable-cuda-graph): the server never reduces in one"
        }
    table = limits if limits is not None else tomllib.loads(LIMITS_FILE.read_text(encoding="utf-8"))["graph"]
    chunk_default, batch_default = sglang_defaults(gpu_memory_gib, tp)
    batch = _int(flag_value(argv, "--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"))
    sources = {"batch": "launch" if batch else f"SGLang 0.5.23's default for {gpu_memory_gib} GiB at TP {tp}"}
    if batch is None:
        batch = batch_default
        running = _int(flag_value(argv, "--max-running-requests"))
        if running is not None and running < batch:  # memory_hook.py caps the default by it
            batch, sources["batch"] = running, "--max-running-requests"
    chunk = _int(flag_value(argv, "--chunked-prefill-size"))
    sources["chunk"] = "launch" if chunk and chunk > 0 else "SGLang 0.5.23's default"
    if not chunk or chunk <= 0:  # -1 turns chunking off: the bound stands in
        chunk = chunk_default
    bound = int(table["max_prefill_tokens"])
    sizes = [{"name": "decode", "tokens": batch, "hidden": hidden_size}]
    drafts = _int(flag_value(argv, "--speculative-num-draft-tokens"))
    if drafts and drafts > 1:
        sizes.append({"name": "verify", "tokens": batch * drafts, "hidden": hidden_size})
    sizes.append({"name": "prefill", "tokens": min(chunk, bound), "hidden": hidden_size})
    if chunk > bound:
        sources["chunk"] += f", bounded to {bound} tokens"
    return {
        "sizes": sizes,
        "pynccl_bytes": int(table["pynccl_bytes"]),
        "replays": int(table["replays"]),
        "warmup": int(table["warmup"]),
        "sources": sources,
    }


def graph_request(spec, ranks: int) -> dict:
    """graph_plan for a LaunchSpec: the model's hidden size and the target's GPU memory from the
    catalog, the launch's flags from its argv."""
    if spec.device != "cuda":
        return graph_plan(spec.device, hidden_size=1, tp=ranks, argv=(), gpu_memory_gib=None)
    from kit.catalog import load_catalog

    catalog = load_catalog()
    hidden = catalog.models[spec.model].facts.hidden_size
    target = catalog.targets.get(spec.target, (None, None))[1]
    hardware = catalog.hardware.get(target.hardware) if target is not None and target.hardware else None
    return graph_plan(
        spec.device,
        hidden_size=hidden,
        tp=ranks,
        argv=spec.argv,
        gpu_memory_gib=hardware.memory_gib if hardware is not None else None,
    )


def size_line(size: dict) -> str:
    """'decode 512 x 3072 bf16 (3 MiB)'."""
    nbytes = int(size["tokens"]) * int(size["hidden"]) * 2
    mib = nbytes / (1 << 20)
    return f"{size['name']} {size['tokens']} x {size['hidden']} bf16 ({mib:.3g} MiB)"
