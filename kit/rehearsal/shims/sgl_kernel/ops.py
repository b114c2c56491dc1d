"""`torch.ops.sgl_kernel.*_cpu`: the ops SGLang 0.5.23's hybrid (Qwen3.5) CPU path looks up, in plain torch.

SGLang binds several at import time (models/qwen3_5.py, layers/attention/linear/gdn_backend.py and
kernels/gdn_triton.py read `torch.ops.sgl_kernel.<name>` at module level), so without them the
model file does not even import. Signatures follow the call sites in the 0.5.23 wheel (named beside
each op); the math is gdn.py's. Each op has a fake (shape-only) kernel so torch.compile can trace
through it. Registered once, when the stand-in package is imported.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.library import custom_op, register_fake

from . import gdn

NAMESPACE = "sgl_kernel"


def _op(name: str, mutates_args=()):
    return custom_op(f"{NAMESPACE}::{name}", mutates_args=mutates_args, device_types="cpu")


# models/qwen3_5.py (CPU): fused_sigmoid_mul(x, gate) -> _fused_sigmoid_mul_cpu(x, gate), x in place:
# the attention output times sigmoid(the output gate).
@_op("fused_sigmoid_mul_cpu", mutates_args=("x",))
def fused_sigmoid_mul_cpu(x: Tensor, gate: Tensor) -> None:
    x.copy_((x.to(torch.float32) * torch.sigmoid(gate.to(torch.float32).reshape(x.shape))).to(x.dtype))


# models/qwen3_5.py _apply_qk_norm: (q, k, q_weight, k_weight, eps, head_dim) -> (q [rows, head_dim], k).
@_op("fused_qk_gemma_rmsnorm_cpu")
def fused_qk_gemma_rmsnorm_cpu(
    q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, eps: float, head_dim: int
) -> tuple[Tensor, Tensor]:
    return (
        gdn.gemma_rmsnorm(q.reshape(-1, head_dim), q_weight, eps),
        gdn.gemma_rmsnorm(k.reshape(-1, head_dim), k_weight, eps),
    )


@register_fake(f"{NAMESPACE}::fused_qk_gemma_rmsnorm_cpu")
def _(q, k, q_weight, k_weight, eps, head_dim):
    return q.new_empty(q.numel() // head_dim, head_dim), k.new_empty(k.numel() // head_dim, head_dim)


# models/qwen3_5.py forward_prepare_fused_gate: q_gate [seq, heads * 2 * head_dim] interleaves each
# head's query and gate (models/utils.py fused_qk_gemma_rmsnorm_with_gate); returns the normed q
# [seq * heads, head_dim], the normed k [seq * kv_heads, head_dim] and the gate [seq * heads, head_dim].
@_op("fused_qk_gemma_rmsnorm_with_gate_cpu")
def fused_qk_gemma_rmsnorm_with_gate_cpu(
    q_gate: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, eps: float, head_dim: int, num_heads: int
) -> tuple[Tensor, Tensor, Tensor]:
    per_head = q_gate.reshape(q_gate.shape[0], num_heads, 2 * head_dim)
    q, gate = per_head[..., :head_dim], per_head[..., head_dim:]
    return (
        gdn.gemma_rmsnorm(q.reshape(-1, head_dim), q_weight, eps),
        gdn.gemma_rmsnorm(k.reshape(-1, head_dim), k_weight, eps),
        gate.reshape(-1, head_dim).clone(),
    )


@register_fake(f"{NAMESPACE}::fused_qk_gemma_rmsnorm_with_gate_cpu")
def _(q_gate, k, q_weight, k_weight, eps, head_dim, num_heads):
    rows = q_gate.shape[0] * num_heads
    return (
        q_gate.new_empty(rows, head_dim),
        k.new_empty(k.numel() // head_dim, head_dim),
        q_gate.new_empty(rows, head_dim),
    )


# models/qwen3_5.py Qwen3_5GatedDeltaNet.forward: the contiguous Qwen3.5 projection layout
# [all q | all k | all v | all z] and [all b | all a] -> (q|k|v [tokens, qkv], z [tokens, HV, V],
# b [tokens, HV], a [tokens, HV]) (kernels/ops/attention/triton_gdn_fused_proj.py).
@_op("fused_qkvzba_split_reshape_cat_contiguous_cpu")
def fused_qkvzba_split_reshape_cat_contiguous_cpu(
    mixed_qkvz: Tensor, mixed_ba: Tensor, num_heads_qk: int, num_heads_v: int, head_qk: int, head_v: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    # clone(), not contiguous(): a custom op's outputs may not alias its inputs, and a slice of a
    # one-token batch already is contiguous.
    key, value = num_heads_qk * head_qk, num_heads_v * head_v
    qkv = mixed_qkvz[:, : 2 * key + value].clone()
    z = mixed_qkvz[:, 2 * key + value :].reshape(-1, num_heads_v, head_v).clone()
    b, a = mixed_ba[:, :num_heads_v].clone(), mixed_ba[:, num_heads_v:].clone()
    return qkv, z, b, a


@register_fake(f"{NAMESPACE}::fused_qkvzba_split_reshape_cat_contiguous_cpu")
def _(mixed_qkvz, mixed_ba, num_heads_qk, num_heads_v, head_qk, head_v):
    tokens = mixed_qkvz.shape[0]
    return (
        mixed_qkvz.new_empty(tokens, 2 * num_heads_qk * head_qk + num_heads_v * head_v),
        mixed_qkvz.new_empty(tokens, num_heads_v, head_v),
        mixed_ba.new_empty(tokens, num_heads_v),
        mixed_ba.new_empty(tokens, num_heads_v),
    )


# models/qwen3_5.py _forward_input_proj (AMX machines only): both input projections in one call.
@_op("fused_input_proj_cpu")
def fused_input_proj_cpu(
    hidden: Tensor, w_qkvz: Tensor, w_ba: Tensor, is_vnni: bool
) -> tuple[Tensor, Tensor]:
    del is_vnni  # weights here are plain [out, in]
    return hidden @ w_qkvz.t(), hidden @ w_ba.t()


@register_fake(f"{NAMESPACE}::fused_input_proj_cpu")
def _(hidden, w_qkvz, w_ba, is_vnni):
    return hidden.new_empty(hidden.shape[0], w_qkvz.shape[0]), hidden.new_empty(
        hidden.shape[0], w_ba.shape[0]
    )


# layers/attention/linear/gdn_backend.py: fused_gdn_gating(A_log, a, b, dt_bias) -> (g, beta) [1, tokens, HV].
@_op("fused_gdn_gating_cpu")
def fused_gdn_gating_cpu(A_log: Tensor, a: Tensor, b: Tensor, dt_bias: Tensor) -> tuple[Tensor, Tensor]:
    return gdn.gdn_gating(A_log, a, b, dt_bias)


@register_fake(f"{NAMESPACE}::fused_gdn_gating_cpu")
def _(A_log, a, b, dt_bias):
    shape = (1, *a.shape)
    return a.new_empty(shape, dtype=torch.float32), b.new_empty(shape, dtype=torch.float32)


# layers/attention/linear/kernels/gdn_triton.py decode / target_verify (keyword arguments only).
@_op(
    "fused_sigmoid_gating_delta_rule_update_cpu",
    mutates_args=("initial_state_source", "intermediate_states_buffer"),
)
def fused_sigmoid_gating_delta_rule_update_cpu(
    A_log: Tensor,
    dt_bias: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    a: Tensor,
    b: Tensor,
    initial_state_source: Tensor,
    initial_state_indices: Tensor,
    cu_seqlens: Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = True,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
    is_kda: bool = False,
    disable_state_update: bool = False,
    intermediate_states_buffer: Tensor | None = None,
    intermediate_state_indices: Tensor | None = None,
    cache_steps: int | None = None,
    retrieve_parent_token: Tensor | None = None,
) -> Tensor:
    if is_kda:
        raise NotImplementedError("sgl_kernel stand-in: KDA gating is not implemented (Qwen3.5 uses GDN)")
    del cache_steps  # the buffer's second dimension
    return gdn.gated_delta_rule_update(
        A_log, dt_bias, q, k, v, a, b, initial_state_source, initial_state_indices, cu_seqlens,
        use_qk_l2norm_in_kernel, softplus_beta, softplus_threshold, disable_state_update,
        intermediate_states_buffer, intermediate_state_indices, retrieve_parent_token,
    )  # fmt: skip


@register_fake(f"{NAMESPACE}::fused_sigmoid_gating_delta_rule_update_cpu")
def _(A_log, dt_bias, q, k, v, a, b, initial_state_source, initial_state_indices, *args, **kwargs):
    return v.new_empty(v.shape)


# kernels/ops/attention/fla/layernorm_gated.py RMSNorm.forward (CPU): (x, weight, z, eps).
@_op("fused_rmsnorm_gated_cpu")
def fused_rmsnorm_gated_cpu(x: Tensor, weight: Tensor, z: Tensor | None, eps: float) -> Tensor:
    return gdn.rmsnorm_gated(x, weight, z, eps)


@register_fake(f"{NAMESPACE}::fused_rmsnorm_gated_cpu")
def _(x, weight, z, eps):
    return x.new_empty(x.shape)
