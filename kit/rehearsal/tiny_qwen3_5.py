"""Make the tiny production-architecture model: a Qwen3.5-MoE hybrid with the 122B's config keys.

Target `qwen-tiny` (and its MTP, and CPU-rehearsal, variants) serves it. Same `architectures`
(`Qwen3_5MoeForConditionalGeneration`), the same config.json keys as Qwen3.5-122B-A10B
(kit/catalog/models/qwen3.5-122b-a10b.config.json), the same per-head sizes (attention head 256,
linear key/value heads 128, conv kernel 4, partial rotary 0.25 with the same mrope sections), the
same 3:1 Gated-DeltaNet : attention pattern, routed + shared experts and one MTP (NEXTN) layer, a
small vision tower; only the counts are small (hidden 128, 4 layers, 8 experts), so the weights are
~20 MB and the GPU image's kernels (GDN, fused MoE, flashinfer, the mamba cache) run as they would
for the real model.

Runs at image build time inside every kit image (it needs torch, safetensors, tokenizers and
transformers, which SGLang itself pins). Tensor names and shapes come from transformers' own
Qwen3_5MoeForConditionalGeneration built on the meta device (what its save_pretrained writes;
qwen3_5_moe has no checkpoint conversion there), plus the MTP head transformers does not model
(`mtp.*`, the names SGLang's Qwen3_5ForCausalLMMTP loads, models/qwen3_5_mtp.py in 0.5.23).
Values are random from a fixed seed, drawn in name order, so two generations are byte-identical.
Nothing is downloaded. tests/rehearsal/test_tiny_qwen3_5.py holds the names to SGLang's loader.

    python tiny_qwen3_5.py OUT_DIR
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

SEED = 20261203
# Real tokenizer size ~1000; the embedding is padded to 1024 (the 122B pads 248077 tokens to 248320),
# which every TP size (1, 2, 4) divides.
TOKENIZER_SIZE = 1000
VOCAB_SIZE = 1024
# Qwen3.5's special tokens, as its tokenizer has them (special: never shown in text).
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
# Added but not special, as in Qwen3.5's tokenizer: the reasoning parser (qwen3) and the tool-call
# parser (qwen3_coder) find them in the decoded text.
TEXT_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
SHARDS = 2
# ChatML with Qwen3.5's tool block (qwen3_coder's XML form), its thinking switch and its vision
# placeholders. All literal text is inside expressions, so `{%-` trimming never eats a newline.
CHAT_TEMPLATE = "".join(
    [
        "{%- macro render(content) %}{%- if content is string %}{{- content }}{%- elif content %}",
        "{%- for part in content %}{%- if part.type == 'text' %}{{- part.text }}",
        "{%- elif part.type in ('image', 'image_url') %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}",
        "{%- elif part.type in ('video', 'video_url') %}{{- '<|vision_start|><|video_pad|><|vision_end|>' }}",
        "{%- endif %}{%- endfor %}{%- endif %}{%- endmacro %}",
        "{%- if tools %}{{- '<|im_start|>system\n' }}",
        "{%- if messages[0].role == 'system' %}{{- render(messages[0].content) + '\n\n' }}{%- endif %}",
        "{{- '# Tools\n\nYou have access to the following functions:\n\n<tools>' }}",
        "{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}",
        "{{- '\n</tools>\n\nIf you choose to call a function ONLY reply in the following format:\n\n'",
        " + '<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n'",
        " + '</parameter>\n</function>\n</tool_call><|im_end|>\n' }}",
        "{%- endif %}",
        "{%- for message in messages %}",
        "{%- if message.role == 'system' and tools %}",
        "{%- elif message.role == 'tool' %}",
        "{{- '<|im_start|>user\n<tool_response>\n' + render(message.content)",
        " + '\n</tool_response><|im_end|>\n' }}",
        "{%- else %}{{- '<|im_start|>' + message.role + '\n' + render(message.content) }}",
        "{%- for call in message.tool_calls or [] %}",
        "{{- '\n<tool_call>\n<function=' + call.function.name + '>\n' }}",
        "{%- if call.function.arguments is mapping %}",
        "{%- for name, value in call.function.arguments.items() %}",
        "{{- '<parameter=' + name + '>\n' + (value | string) + '\n</parameter>\n' }}",
        "{%- endfor %}{%- endif %}",
        "{{- '</function>\n</tool_call>' }}",
        "{%- endfor %}",
        "{{- '<|im_end|>\n' }}",
        "{%- endif %}",
        "{%- endfor %}",
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}",
        "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}",
        "{%- else %}{{- '<think>\n' }}{%- endif %}",
        "{%- endif %}",
    ]
)

_TEXT_LAYERS = 4
# config.json, key for key the 122B's (a test holds the key sets equal). Token ids are this
# tokenizer's (SPECIAL_TOKENS' positions); the vision tower is the smallest that keeps its layout
# and the 122B's head size, and that every TP size (1, 2, 4) divides.
CONFIG = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "model_type": "qwen3_5_moe",
    "image_token_id": SPECIAL_TOKENS.index("<|image_pad|>"),
    "video_token_id": SPECIAL_TOKENS.index("<|video_pad|>"),
    "vision_start_token_id": SPECIAL_TOKENS.index("<|vision_start|>"),
    "vision_end_token_id": SPECIAL_TOKENS.index("<|vision_end|>"),
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "text_config": {
        "model_type": "qwen3_5_moe_text",
        "architectures": ["Qwen3_5MoeForCausalLM"],
        "vocab_size": VOCAB_SIZE,
        "hidden_size": 128,
        "num_hidden_layers": _TEXT_LAYERS,
        # 8 query heads over 2 KV heads (the 122B: 32 over 2); at TP 4 the KV heads are replicated, as there.
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "full_attention_interval": 4,
        "layer_types": [
            "full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(_TEXT_LAYERS)
        ],
        # 4 key heads, 16 value heads: the 122B's ratio of 4, and every TP size divides both.
        "linear_num_key_heads": 4,
        "linear_num_value_heads": 16,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 128,
        "shared_expert_intermediate_size": 128,
        "decoder_sparse_step": 1,
        "norm_topk_prob": True,
        "mlp_only_layers": [],
        "mtp_num_hidden_layers": 1,
        "max_position_embeddings": 262144,
        "attn_output_gate": True,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-06,
        "partial_rotary_factor": 0.25,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000000,
            "partial_rotary_factor": 0.25,
            "mrope_interleaved": True,
            "mrope_section": [11, 11, 10],
        },
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "vision_config": {
        "model_type": "qwen3_5_moe",
        "depth": 1,
        # The 122B's vision head size (1152 / 16 = 72) with 4 heads: SGLang splits the vision heads
        # over the TP ranks (divide() in srt/layers/attention/vision.py asserts), so 4 heads serve
        # TP 1, 2 and 4; the MLP's intermediate size is split the same way.
        "hidden_size": 288,
        "intermediate_size": 576,
        "num_heads": 4,
        "in_channels": 3,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": 128,
        "num_position_embeddings": 256,
        "hidden_act": "gelu_pytorch_tanh",
        "deepstack_visual_indexes": [],
    },
}
# The image and video processors of the Qwen3-VL family (Qwen3.5 ships this layout): patch 16,
# temporal patch 2, merge 2, as the vision config says.
_PROCESSOR_COMMON = {
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "processor_class": "Qwen3VLProcessor",
}
PREPROCESSOR = {
    **_PROCESSOR_COMMON,
    "image_processor_type": "Qwen2VLImageProcessorFast",
    "size": {"longest_edge": 16777216, "shortest_edge": 65536},
}
VIDEO_PREPROCESSOR = {
    **_PROCESSOR_COMMON,
    "video_processor_type": "Qwen3VLVideoProcessor",
    "size": {"longest_edge": 25165824, "shortest_edge": 4096},
}


def _transformers_config():
    from transformers import Qwen3_5MoeConfig

    return Qwen3_5MoeConfig(**copy.deepcopy(CONFIG))


def tensor_shapes() -> dict[str, tuple[int, ...]]:
    """Every checkpoint tensor's name and shape: transformers' model, then the MTP head (`mtp.*`)."""
    import torch
    from transformers import Qwen3_5MoeForConditionalGeneration
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeDecoderLayer

    config = _transformers_config()
    text = config.text_config
    with torch.device("meta"):
        model = Qwen3_5MoeForConditionalGeneration(config)
        # The MTP layer is a full-attention decoder layer with the MoE block (SGLang builds it with
        # full_attention_interval = 1, models/qwen3_5_mtp.py).
        mtp_text = copy.deepcopy(text)
        mtp_text.layer_types = ["full_attention"]
        mtp_layer = Qwen3_5MoeDecoderLayer(mtp_text, 0)
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    hidden = text.hidden_size
    for layer in range(text.mtp_num_hidden_layers):
        shapes.update({f"mtp.layers.{layer}.{n}": tuple(t.shape) for n, t in mtp_layer.state_dict().items()})
    shapes.update(
        {
            "mtp.fc.weight": (hidden, 2 * hidden),
            "mtp.pre_fc_norm_embedding.weight": (hidden,),
            "mtp.pre_fc_norm_hidden.weight": (hidden,),
            "mtp.norm.weight": (hidden,),
        }
    )
    return shapes


def _value(name: str, shape: tuple[int, ...], generator):
    """A deterministic value for one tensor, shaped like a trained model's where it matters."""
    import torch

    if name.endswith("A_log"):
        # The decay's log, kept away from 0 as transformers initialises it.
        return torch.empty(shape).uniform_(1.0, 16.0, generator=generator).log_()
    if name.endswith("dt_bias"):
        return torch.ones(shape)
    if name.endswith(".bias"):
        return torch.zeros(shape)
    if ("visual." in name and "norm" in name) or name.endswith("linear_attn.norm.weight"):
        # LayerNorm in the vision tower and the GDN's gated RMSNorm scale by the weight itself.
        return torch.ones(shape)
    # Everything else, Qwen3.5's RMSNorms included (they scale by 1 + weight: zero-centred).
    return torch.randn(shape, generator=generator) * 0.02


def make_weights(out: Path, seed: int = SEED) -> list[Path]:
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(seed)
    shapes = tensor_shapes()
    tensors = {
        name: _value(name, shapes[name], generator).to(torch.bfloat16).contiguous() for name in sorted(shapes)
    }
    # Two shards and an index, as the real checkpoint comes: the heads (lm_head, MTP) in the last.
    parts: list[dict] = [{} for _ in range(SHARDS)]
    for name, tensor in tensors.items():
        parts[SHARDS - 1 if name.startswith(("mtp.", "lm_head.")) else 0][name] = tensor
    files, weight_map = [], {}
    for i, part in enumerate(parts, start=1):
        path = out / f"model-{i:05d}-of-{SHARDS:05d}.safetensors"
        save_file(part, str(path), metadata={"format": "pt"})
        files.append(path)
        weight_map.update({name: path.name for name in part})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return files


def make_tokenizer(out: Path) -> int:
    """Tokenizer files; returns the end-of-turn token's id."""
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast

    try:
        from tiny_model import build_tokenizer  # in the image: /opt/kit/rehearsal/, beside this file
    except ImportError:
        from kit.rehearsal.tiny_model import build_tokenizer

    raw = build_tokenizer(TOKENIZER_SIZE - len(TEXT_TOKENS), SPECIAL_TOKENS)
    raw.add_tokens([AddedToken(t, special=False, normalized=False) for t in TEXT_TOKENS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    return raw.token_to_id("<|im_end|>")


def make_tiny_qwen3_5(out: Path, seed: int = SEED) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    eos = make_tokenizer(out)
    (out / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    (out / "generation_config.json").write_text(
        json.dumps({"eos_token_id": eos, "pad_token_id": 0, "do_sample": False}, indent=2) + "\n"
    )
    (out / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2) + "\n")
    (out / "video_preprocessor_config.json").write_text(json.dumps(VIDEO_PREPROCESSOR, indent=2) + "\n")
    make_weights(out, seed)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    print(make_tiny_qwen3_5(args.out, args.seed))


if __name__ == "__main__":
    main()
