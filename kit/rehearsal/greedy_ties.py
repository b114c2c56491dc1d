"""How often the tiny Qwen3.5 model's greedy choice is a near-tie, and how often the two shapes of a
speculative server disagree on it: what sets `smoke.greedy_tie_epsilon` (kit/catalog/_schema.py).

A server with MTP verifies draft tokens in blocks (4 tokens in one forward) where a plain server
decodes one token per step; the two shapes add up in a different order, so in bf16 the top-1 and
top-2 logprobs can swap where they are close. The smoke calls a greedy difference a tie when that gap
is within the epsilon (kit/testing/speculative.py). This measures, with transformers alone (no
SGLang), on the tiny model kit/rehearsal/tiny_qwen3_5.py generates:

- one token per step: greedy decoding with the cache, the top-1/top-2 logprob gap at every step;
- 4-token verify blocks: the same tokens fed back 4 at a time after the same prompt, the gap and
  argmax at each of the same positions;
- how often the gap is below each epsilon, and how often the argmax flips between the shapes (and the
  largest one-token-per-step gap at which one flipped: an epsilon below it would call that flip a
  failure, as the smoke judges by the plain run's gap).

    python -m kit.rehearsal.greedy_ties OUT.json [--device cuda] [--dtype bfloat16]

`tie_figures` is pure (tests/rehearsal/test_greedy_ties.py); `measure` needs torch and transformers
(the GPU host check's `ties` step, kit/hostcheck/shape_steps.py, runs it on a real GPU in bf16).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

EPSILONS = (0.01, 0.05, 0.1)
BLOCK = 4  # the verify block: NEXTN with 3 draft steps verifies 4 tokens (kit's qwen-tiny-mtp)
PROMPTS = 8
PROMPT_TOKENS = 16
NEW_TOKENS = 32
SEED = 20261204


def tie_figures(
    step_gaps: Sequence[float],
    verify_gaps: Sequence[float],
    flips: Sequence[bool],
    epsilons: Sequence[float] = EPSILONS,
) -> dict:
    """The rates at each epsilon and the flips, from per-position figures of the two shapes.

    `step_gaps[i]`, `verify_gaps[i]`: top-1 minus top-2 logprob (nats, >= 0) at position i in each
    shape; `flips[i]`: the two shapes' argmax differ there.
    """
    if not (len(step_gaps) == len(verify_gaps) == len(flips)):
        raise ValueError("step_gaps, verify_gaps and flips must have one entry per position")
    n = len(step_gaps)
    # At a flip, the one-token-per-step run's gap: the reference's, which the smoke judges a tie by
    # (kit/testing/speculative.py judge_greedy).
    flip_gaps = [s for s, f in zip(step_gaps, flips, strict=True) if f]
    covering = next((e for e in sorted(epsilons) if all(g <= e for g in flip_gaps)), None)
    rates = {}
    for eps in epsilons:
        rates[f"{eps:g}"] = {
            "step_below": sum(g < eps for g in step_gaps) / n if n else None,
            "verify_below": sum(g < eps for g in verify_gaps) / n if n else None,
            "flips_within": sum(g <= eps for g in flip_gaps),
        }
    return {
        "positions": n,
        "flips": len(flip_gaps),
        "flip_rate": len(flip_gaps) / n if n else None,
        "largest_flip_gap": max(flip_gaps) if flip_gaps else None,
        # The smallest epsilon tried that calls every flip seen a tie (None: none does).
        "smallest_covering_epsilon": covering,
        "median_step_gap": sorted(step_gaps)[n // 2] if n else None,
        "below": rates,
    }


def _top2(logits) -> tuple[list[float], list[int]]:
    """Per row: the top-1 minus top-2 logprob (float32 log-softmax of the model's logits), argmax."""
    import torch

    logprobs = torch.log_softmax(logits.float(), dim=-1)
    top = torch.topk(logprobs, 2, dim=-1)
    gaps = (top.values[..., 0] - top.values[..., 1]).tolist()
    return gaps, top.indices[..., 0].tolist()


def measure(
    device: str = "cpu",
    dtype: str = "bfloat16",
    model_dir: Path | None = None,
    prompts: int = PROMPTS,
    new_tokens: int = NEW_TOKENS,
) -> dict:
    import torch
    import transformers
    from transformers import AutoModelForImageTextToText

    from kit.rehearsal.tiny_qwen3_5 import TOKENIZER_SIZE, make_tiny_qwen3_5

    t0 = time.monotonic()
    scratch = None
    if model_dir is None:
        scratch = tempfile.TemporaryDirectory(prefix="tiny-qwen3_5-")
        model_dir = make_tiny_qwen3_5(Path(scratch.name) / "model")
    made_s = time.monotonic() - t0
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    model = model.to(device).eval()
    generator = torch.Generator().manual_seed(SEED)
    step_gaps: list[float] = []
    verify_gaps: list[float] = []
    flips: list[bool] = []
    examples = []
    with torch.inference_mode():
        for p in range(prompts):
            prompt = torch.randint(0, TOKENIZER_SIZE, (1, PROMPT_TOKENS), generator=generator).to(device)
            # One token per step, greedy, with the cache: the plain decode shape.
            out = model(input_ids=prompt, use_cache=True)
            cache = out.past_key_values
            first_logits = out.logits[:, -1]
            tokens, s_gaps, s_argmax = [], [], []
            logits = first_logits
            for _ in range(new_tokens):
                gap, arg = _top2(logits[0])
                s_gaps.append(gap)
                s_argmax.append(arg)
                tokens.append(arg)
                step = torch.tensor([[arg]], device=device)
                out = model(input_ids=step, past_key_values=cache, use_cache=True)
                cache, logits = out.past_key_values, out.logits[:, -1]
            # The same tokens in 4-token verify blocks after the same prompt: the logits at each
            # block position predict the next token, as a verify forward's do.
            out = model(input_ids=prompt, use_cache=True)
            cache = out.past_key_values
            v_gaps, v_argmax = [], []
            gap, arg = _top2(out.logits[0, -1])
            v_gaps.append(gap)
            v_argmax.append(arg)
            for start in range(0, new_tokens - 1, BLOCK):
                block = tokens[start : start + BLOCK]
                ids = torch.tensor([block], device=device)
                out = model(input_ids=ids, past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                gaps, args = _top2(out.logits[0])
                v_gaps += gaps
                v_argmax += args
            v_gaps, v_argmax = v_gaps[:new_tokens], v_argmax[:new_tokens]
            step_gaps += s_gaps
            verify_gaps += v_gaps
            flips += [a != b for a, b in zip(s_argmax, v_argmax, strict=True)]
            if p < 2:
                examples.append({"tokens": tokens[:12], "step_gaps": [round(g, 4) for g in s_gaps[:12]]})
    figures = tie_figures(step_gaps, verify_gaps, flips)
    figures.update(
        {
            "device": device,
            "dtype": dtype,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "block": BLOCK,
            "prompts": prompts,
            "prompt_tokens": PROMPT_TOKENS,
            "new_tokens": new_tokens,
            "model_made_s": round(made_s, 2),
            "seconds": round(time.monotonic() - t0, 2),
            "examples": examples,
        }
    )
    if device.startswith("cuda"):
        figures["gpu"] = torch.cuda.get_device_name(0)
    if scratch is not None:
        scratch.cleanup()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32", "float16"))
    parser.add_argument("--prompts", type=int, default=PROMPTS)
    parser.add_argument("--new-tokens", type=int, default=NEW_TOKENS)
    args = parser.parse_args(argv)
    figures = measure(args.device, args.dtype, prompts=args.prompts, new_tokens=args.new_tokens)
    args.out.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in figures.items() if k != "examples"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
