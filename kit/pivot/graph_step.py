"""Preflight's graph step as data: which collectives the ranks capture in a CUDA graph, at the widths
the server's own graphs use. Pure (`graph_plan`); `graph_request` asks SGLang for the launch's
resolution first (kit/check `launch_resolution`).

Why: at TP 4 over PCIe SGLang turns its custom all-reduce off (more than two GPUs without NVLink),
so every decode, target-verify and draft graph reduces through its PyNccl communicator, which is
enabled only inside `graph_capture()` (0.5.23 `srt/distributed/parallel_state.py`
GroupCoordinator.graph_capture: `pynccl_comm.change_state(enable=True)`;
`srt/distributed/device_communicators/pynccl.py`: "by default it is disabled ... to use it, use under
`with obj.change_state(enable=True)`, usually when we are using CUDA graph"). The kit's checked
all-reduce and its sweep run eager, so they never touch that path; this step does, at the widths the
server's graphs use (NCCL picks its algorithm and protocol by size, so another width tests another
path):

- the widths come from SGLang's own resolution of the real argv (run by the release itself, as
  `kit check` runs it, with the target GPU emulated): `cuda_graph_config` (the decode capture list
  in requests, the prefill one in tokens, each with its backend) and `max_running_requests`, which
  0.5.23 sets to 48 for NEXTN -> EAGLE when the launch leaves it unset
  (srt/arg_groups/speculative_hook.py `_handle_eagle_family`);
- decode capture sizes are clipped to the request pool (model_executor/runner/base_cuda_graph_runner.py
  `get_batch_sizes_to_capture`: sizes above `req_to_token_pool.size` are dropped and the pool's own
  size added). The pool is at most `max_running_requests` (mem_cache/kv_cache_configurator.py
  `resolve_max_num_reqs`; the KV capacity or the mamba state cache can make it smaller, known only
  once the server has measured its memory), so the largest decode width here is an upper bound;
- decode: that batch x the model's hidden size (one token per request); verify (speculative
  profiles): that batch x `speculative_num_draft_tokens`, the target-verify graph's width; the draft
  graphs reduce at the same two widths (topk 1);
- the logits all_gather the decode and verify graphs also capture (layers/logits_processor.py
  `_get_logits`: the LM head's vocab shard per rank, gathered over TP by
  `tensor_model_parallel_all_gather` where no multimem all-gather exists, as on PCIe): those batches x
  the vocabulary / TP (padded to 64, layers/vocab_parallel_embedding.py `pad_vocab_size`), bf16;
- prefill: the prefill graph's largest token count (0.5.23's breakable prefill graph) or, where
  prefill graphs are off, one chunk (`chunked_prefill_size`), bounded by preflight.toml's
  `graph.max_prefill_tokens`;
- one size of the sweep through PyNccl itself, enabled as capture enables it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

LIMITS_FILE = Path(__file__).resolve().parent / "preflight.toml"
CPU_SKIP = (
    "CPU: no CUDA graphs (torch.cuda.CUDAGraph needs a GPU) and no PyNccl communicator "
    "(SGLang builds one only on CUDA)"
)
VOCAB_PADDING = 64  # srt/layers/vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE


def captured_batches(sizes: list[int], pool: int | None) -> list[int]:
    """The decode batch sizes the runner captures: SGLang's list clipped to the request pool
    (base_cuda_graph_runner.py get_batch_sizes_to_capture, without attention DP or two-batch
    overlap, where the alignment is 1)."""
    if pool is None or not sizes:
        return sorted(set(sizes))
    clipped = [b for b in sizes if b <= pool]
    if max(sizes) > pool:
        clipped.append(pool)
    return sorted(set(clipped))


def vocab_per_rank(vocab_size: int, tp: int) -> int:
    padded = -(-vocab_size // VOCAB_PADDING) * VOCAB_PADDING
    return -(-padded // tp)


def graph_plan(
    device: str,
    *,
    hidden_size: int,
    vocab_size: int | None,
    tp: int,
    argv: tuple[str, ...] | list[str],
    resolution: dict | None,
    limits: dict | None = None,
) -> dict:
    """The graph step's request: {"skip": why} on CPU, with graphs off, or without SGLang's
    resolution; else the widths to capture and replay ({"sizes": [{"name", "op", "tokens",
    "hidden"}], "pynccl_bytes", "replays", "warmup", "sources"})."""
    if device != "cuda":
        return {"skip": CPU_SKIP}
    if "--disable-cuda-graph" in argv:
        return {
            "skip": "the launch disables CUDA graphs (--disable-cuda-graph): the server never reduces in one"
        }
    if not resolution or not resolution.get("accepted"):
        why = (resolution or {}).get("error") or "it did not run"
        return {"skip": f"SGLang's own resolution of the launch gave no widths ({str(why)[:200]})"}
    resolved = resolution.get("resolved") or {}
    graphs = resolved.get("cuda_graph_config") or {}
    decode = graphs.get("decode") or {}
    release = f"SGLang {resolution.get('sglang', '?')}"
    if not decode.get("bs"):
        return {"skip": f"{release}'s resolution lists no decode capture sizes (cuda_graph_config)"}
    if decode.get("backend") == "disabled":
        return {"skip": f"{release} resolved the decode graphs off: the server never reduces in one"}
    table = limits if limits is not None else tomllib.loads(LIMITS_FILE.read_text(encoding="utf-8"))["graph"]
    pool = resolved.get("max_running_requests")
    batch = max(captured_batches(list(decode["bs"]), pool if isinstance(pool, int) else None))
    sources = {
        "batch": f"{release}'s decode capture list (up to {max(decode['bs'])}) clipped to the request pool "
        f"(max_running_requests {pool}, an upper bound)"
    }
    sizes = [{"name": "decode", "op": "all_reduce", "tokens": batch, "hidden": hidden_size}]
    drafts = resolved.get("speculative_num_draft_tokens")
    speculative = resolved.get("speculative_algorithm") and isinstance(drafts, int) and drafts > 1
    if speculative:
        sizes.append({"name": "verify", "op": "all_reduce", "tokens": batch * drafts, "hidden": hidden_size})
    if vocab_size and tp > 1:
        shard = vocab_per_rank(vocab_size, tp)
        sizes.append({"name": "decode logits", "op": "all_gather", "tokens": batch, "hidden": shard})
        if speculative:
            sizes.append(
                {"name": "verify logits", "op": "all_gather", "tokens": batch * drafts, "hidden": shard}
            )
        sources["logits"] = (
            f"the LM head's vocab shard: {vocab_size} tokens padded to {VOCAB_PADDING} / TP {tp}"
        )
    prefill = graphs.get("prefill") or {}
    bound = int(table["max_prefill_tokens"])
    if prefill.get("bs") and prefill.get("backend") != "disabled":
        tokens, sources["chunk"] = max(prefill["bs"]), f"{release}'s {prefill.get('backend')} prefill graph"
    else:
        chunk = resolved.get("chunked_prefill_size")
        tokens = chunk if isinstance(chunk, int) and chunk > 0 else bound
        sources["chunk"] = f"{release}'s chunked_prefill_size (an eager chunk)"
    if tokens > bound:
        sources["chunk"] += f", bounded to {bound} tokens"
    sizes.append({"name": "prefill", "op": "all_reduce", "tokens": min(tokens, bound), "hidden": hidden_size})
    return {
        "sizes": sizes,
        "pynccl_bytes": int(table["pynccl_bytes"]),
        "replays": int(table["replays"]),
        "warmup": int(table["warmup"]),
        "sources": sources,
    }


def graph_request(spec, ranks: int, resolution: dict | None = None) -> dict:
    """graph_plan for a LaunchSpec: the model's hidden size and vocabulary from its config.json (the
    fetched one where there is one), SGLang's own resolution of the launch (run here when not given)."""
    if spec.device != "cuda":
        return graph_plan(spec.device, hidden_size=1, vocab_size=None, tp=ranks, argv=(), resolution=None)
    if "--disable-cuda-graph" in spec.argv:
        resolution = resolution or {}
    elif resolution is None:
        from kit.check import launch_resolution
        from kit.errors import KitError

        try:
            resolution = launch_resolution(spec)
        except KitError as exc:
            resolution = {"accepted": False, "error": exc.one_line()}
    hidden, vocab = _model_shape(spec)
    return graph_plan(
        spec.device, hidden_size=hidden, vocab_size=vocab, tp=ranks, argv=spec.argv, resolution=resolution
    )


def _model_shape(spec) -> tuple[int, int | None]:
    """(hidden size, vocabulary) of the launch's model: its config.json, else the catalog's facts."""
    import json

    from kit.launch import resolve_full
    from kit.validate import model_config

    r = resolve_full(spec.target, image=spec.image)
    path, _ = model_config(r)
    try:
        config = json.loads(path.read_text(encoding="utf-8")) if path is not None else {}
    except (OSError, ValueError):
        config = {}
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    hidden = (
        text.get("hidden_size") if isinstance(text.get("hidden_size"), int) else r.model.facts.hidden_size
    )
    vocab = text.get("vocab_size", config.get("vocab_size"))
    return int(hidden), int(vocab) if isinstance(vocab, int) else None


def size_line(size: dict) -> str:
    """'decode 48 x 3072 bf16 (0.281 MiB)'; an all_gather names its per-rank shard."""
    nbytes = int(size["tokens"]) * int(size["hidden"]) * 2
    mib = nbytes / (1 << 20)
    gather = " per rank, all_gather" if size.get("op") == "all_gather" else ""
    return f"{size['name']} {size['tokens']} x {size['hidden']} bf16 ({mib:.3g} MiB{gather})"
