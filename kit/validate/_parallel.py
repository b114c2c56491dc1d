"""Tensor parallel against the model's shape: every split SGLang 0.5.23 asserts when each rank builds it.

Pure: a model's config.json (or the catalog's facts where a model has none) and a TP size in,
findings out. Each rule names the SGLang 0.5.23 file that asserts it (read from the release's wheel):

- attention heads: `divide(total_num_heads, tp_size)`, srt/layers/linear.py QKVParallelLinear (and
  `assert self.total_num_heads % tp_size == 0` in srt/models/qwen2.py, qwen3_5.py);
- KV heads: split when there are at least as many as ranks (`divide(total_num_kv_heads, tp_size)`),
  else replicated (`divide(tp_size, total_num_kv_heads)`): one must divide the other (linear.py);
- linear-attention (Gated-DeltaNet) value heads: the state pool's `divide(num_heads, tp_world_size)`,
  srt/configs/mamba_utils.py Mamba2StateShape.create, and in_proj_ba's MergedColumnParallelLinear
  (`assert all(output_size % tp_size == 0 ...)`, linear.py);
- linear-attention key heads: srt/models/qwen3_5.py Qwen3_5GatedDeltaNet gives each rank
  `num_k_heads // attn_tp_size` of them (RadixLinearAttention's q and k heads) and shards the conv
  weight's key part with no extra heads (`mamba_v2_sharded_weight_loader`, `(key_dim, 0, False)`):
  fewer key heads than ranks, or a remainder, is a rank with a part of a head or none;
- MoE: `assert intermediate_size % self.moe_tp_size == 0`, srt/layers/moe/fused_moe_triton/layer.py
  (moe_tp = tp without expert parallel; experts are not split then); the shared expert's and a dense
  MLP's gate/up are MergedColumnParallelLinear (linear.py);
- vision tower (Qwen3-VL family): `divide(num_heads, tp_size)` in srt/layers/attention/vision.py
  VisionAttention and the MLP's ColumnParallelLinear `divide(output_size, tp_size)`, unless
  `--mm-enable-dp-encoder` (srt/models/qwen3_vl.py: use_data_parallel runs the tower whole per rank)
  or `--language-model-only` (srt/models/qwen3_vl.py builds no tower then;
  srt/arg_groups/fields/disagg.py: "the tower is never built").

The attention splits (heads, KV heads, the linear-attention heads) are over the attention-TP group:
`tp_size // attn_dp_size // attn_cp_size` (srt/runtime_context.py derive_attn_tp_size; qwen3_5.py
reads `get_parallel().attn_tp_size` and `linear_attn_parallel_group()`), which attention data
parallelism narrows (`--attn-dp-size N`, or the deprecated `--dp-size N --enable-dp-attention`,
srt/arg_groups/parallel_hook.py); the MoE, MLP and vision splits stay over the whole TP group.

On CPU SGLang pads every one of these up to a multiple of TP instead of asserting
(srt/model_executor/model_runner.py -> srt/configs/update_config.py
adjust_config_with_unaligned_cpu_tp): such a launch may start, but on a shape no GPU launch of the
model has. The CPU targets are rehearsals of the GPU ones, so validate refuses it there too, and
says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DP_ENCODER_FLAG = "--mm-enable-dp-encoder"
LANGUAGE_ONLY_FLAG = "--language-model-only"
# The splits over the attention-TP group (the rest are over the whole TP group).
ATTENTION_SPLITS = frozenset({"tp-heads", "tp-kv-heads", "tp-linear-heads", "tp-linear-key-heads"})


@dataclass(frozen=True)
class Split:
    """One dimension SGLang divides over the TP ranks."""

    id: str
    what: str
    size: int
    replicable: bool = False
    """KV heads: fewer than the ranks is fine when the ranks are a multiple of them (replicated)."""
    source: str = ""
    asserted: bool = True
    """SGLang asserts the split while building the model (the linear key heads it floors instead)."""

    def holds(self, tp: int) -> bool:
        if self.replicable and tp > self.size:
            return tp % self.size == 0
        return self.size % tp == 0


_AT = "sglang 0.5.23 srt/"
_LINEAR = "srt/layers/linear.py"
_SOURCES = {
    "tp-heads": f"sglang 0.5.23 {_LINEAR} QKVParallelLinear divide(total_num_heads, tp_size)",
    "tp-kv-heads": f"sglang 0.5.23 {_LINEAR} QKVParallelLinear (split or replicated KV heads)",
    "tp-linear-heads": f"{_AT}configs/mamba_utils.py Mamba2StateShape.create divide(num_heads, tp)",
    "tp-linear-key-heads": f"{_AT}models/qwen3_5.py Qwen3_5GatedDeltaNet num_k_heads // attn_tp_size",
    "tp-moe-intermediate": f"{_AT}layers/moe/fused_moe_triton/layer.py intermediate_size % moe_tp_size",
    "tp-shared-expert-intermediate": f"sglang 0.5.23 {_LINEAR} MergedColumnParallelLinear",
    "tp-mlp-intermediate": f"sglang 0.5.23 {_LINEAR} MergedColumnParallelLinear",
    "tp-vision-heads": f"{_AT}layers/attention/vision.py VisionAttention divide(num_heads, tp_size)",
    "tp-vision-intermediate": f"sglang 0.5.23 srt/models/qwen3_vl.py Qwen3_VisionMLP, {_LINEAR} divide",
}


def _split(id_: str, what: str, size: Any, replicable: bool = False) -> list[Split]:
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        return []
    return [Split(id_, what, size, replicable, _SOURCES[id_], asserted=id_ != "tp-linear-key-heads")]


def splits_of(config: dict[str, Any]) -> tuple[Split, ...]:
    """The dimensions a TP launch splits, read from a Hugging Face config.json."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    vision = config.get("vision_config") if isinstance(config.get("vision_config"), dict) else {}
    moe = bool(text.get("num_experts"))
    found = [
        *_split("tp-heads", "attention heads", text.get("num_attention_heads")),
        *_split(
            "tp-kv-heads",
            "KV heads",
            text.get("num_key_value_heads", text.get("num_attention_heads")),
            replicable=True,
        ),
        *_split("tp-linear-heads", "linear-attention value heads", text.get("linear_num_value_heads")),
        *_split("tp-linear-key-heads", "linear-attention key heads", text.get("linear_num_key_heads")),
    ]
    if moe:
        found += _split("tp-moe-intermediate", "MoE intermediate size", text.get("moe_intermediate_size"))
        found += _split(
            "tp-shared-expert-intermediate",
            "shared-expert intermediate size",
            text.get("shared_expert_intermediate_size"),
        )
    else:
        found += _split("tp-mlp-intermediate", "MLP intermediate size", text.get("intermediate_size"))
    found += _split("tp-vision-heads", "vision heads", vision.get("num_heads"))
    found += _split("tp-vision-intermediate", "vision MLP intermediate size", vision.get("intermediate_size"))
    return tuple(found)


def splits_from_facts(
    attention_heads: int, kv_heads: int, linear_value_heads: int | None, linear_key_heads: int | None = None
) -> tuple[Split, ...]:
    """The catalog facts' subset, for a model without a config.json."""
    return (
        *_split("tp-heads", "attention heads", attention_heads),
        *_split("tp-kv-heads", "KV heads", kv_heads, replicable=True),
        *_split("tp-linear-heads", "linear-attention value heads", linear_value_heads),
        *_split("tp-linear-key-heads", "linear-attention key heads", linear_key_heads),
    )


def _flag(argv: tuple[str, ...], *names: str) -> str | None:
    """The value of the last of NAMES in ARGV ('--flag value' or '--flag=value'), or None."""
    found = None
    for index, arg in enumerate(argv):
        flag, sep, value = arg.partition("=")
        if flag in names:
            found = value if sep else (argv[index + 1] if index + 1 < len(argv) else None)
    return found


def _width(argv: tuple[str, ...], *names: str) -> int:
    value = _flag(argv, *names)
    return int(value) if value is not None and value.isdigit() and int(value) > 0 else 1


def attention_tp(tp: int, argv: tuple[str, ...]) -> int:
    """The attention-TP width of a launch: tp // attn_dp // attn_cp (SGLang 0.5.23 derive_attn_tp_size)."""
    attn_dp = _width(argv, "--attn-dp-size", "--attention-data-parallel-size")
    if attn_dp == 1 and "--enable-dp-attention" in argv:  # the deprecated spelling: dp_size groups
        attn_dp = _width(argv, "--dp-size", "--data-parallel-size")
    attn_cp = _width(argv, "--attn-cp-size", "--attention-context-parallel-size")
    return max(1, tp // attn_dp // attn_cp)


@dataclass(frozen=True)
class Broken:
    split: Split
    tp: int
    device: str
    attention: bool = False
    """TP here is the attention-TP width (attention data parallelism narrows it)."""

    @property
    def message(self) -> str:
        s, tp = self.split, self.tp
        width = f"attention-TP {tp}" if self.attention else f"TP {tp}"
        if s.replicable:
            text = f"{width} and {s.size} {s.what}: neither divides the other"
        else:
            text = f"{width} does not divide the {s.size} {s.what}"
        if self.device == "cpu":
            return f"{text}: SGLang's CPU engine would pad them, a shape no GPU launch of it has"
        if not s.asserted:
            return (
                f"{text}: SGLang asserts nothing there, each rank gets {s.size} // {tp} = {s.size // tp} "
                f"whole {s.what} and its weights are cut mid-head"
            )
        return f"{text}: every rank fails the assertion while building the model"

    @property
    def fix(self) -> str:
        s = self.split
        good = [n for n in range(1, 9) if s.holds(n)]
        widths = ", ".join(map(str, good))
        fix = (
            f"use an attention-TP width (tp / attn-dp-size) of {widths}"
            if self.attention
            else f"use a TP of {widths}"
        )
        if s.id.startswith("tp-vision"):
            fix += (
                f", or add {DP_ENCODER_FLAG} to the profile's extra_args (the tower runs whole on each rank)"
                f" or {LANGUAGE_ONLY_FLAG} (no tower)"
            )
        return fix


def broken_splits(splits: tuple[Split, ...], tp: int, argv: tuple[str, ...], device: str) -> list[Broken]:
    """The splits this launch's TP does not divide: the attention ones over the attention-TP width,
    the vision ones skipped where the tower runs whole per rank or is not built."""
    whole_tower = DP_ENCODER_FLAG in argv or LANGUAGE_ONLY_FLAG in argv
    attn_tp = attention_tp(tp, argv)
    found = []
    for s in splits:
        if whole_tower and s.id.startswith("tp-vision"):
            continue
        width = attn_tp if s.id in ATTENTION_SPLITS else tp
        if not s.holds(width):
            found.append(Broken(s, width, device, attention=width != tp))
    return found
