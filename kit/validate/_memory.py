"""Will the model fit? Weights per GPU + a KV/state reserve against GPU memory x mem_fraction.

    budget        = gpu_memory x mem_fraction          (SGLang's static pool; the rest is activations)
    weights       = size_on_disk / tp                  (experts and attention are sharded by TP)
    draft         = size_on_disk x mtp_layers / layers / tp        (MTP only; one more decoder layer)
    kv per token  = 2 (K and V) x kv_layers x ceil(kv_heads / tp) x head_dim x 2 bytes (bf16)
                    kv_layers = full-attention layers (+ the MTP layer); a hybrid model's linear
                    layers keep no KV. KV heads are replicated when tp > kv_heads.
    kv reserve    = kv per token x tokens               tokens = max_total_tokens, else context_length:
                                                        at least one full-length request must fit
    state         = linear_layers x (v_heads/tp x k_dim x v_dim x 4 bytes   (fp32 recurrent state)
                    + (conv_kernel - 1) x (2 x k_heads x k_dim + v_heads x v_dim) / tp x 2 bytes)
                    per request, x requests (max_running_requests, else 1), x 2 with extra_buffer
    fits          = weights + draft + kv reserve + state reserve <= budget

All sizes in GiB. It is a lower bound on what SGLang needs, made to catch the impossible (TP 2 for a
234 GiB model on 96 GB cards) in a second, not to replace SGLang's own sizing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kit.catalog import Hardware, ModelFacts, Profile

GIB = 1024**3
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8": 1}
DEFAULT_MEM_FRACTION = 0.85
"""Assumed when a profile leaves mem_fraction to SGLang (its choice depends on the GPU)."""


@dataclass(frozen=True)
class MemoryFit:
    gpu: str
    gpu_memory_gib: float
    mem_fraction: float
    mem_fraction_assumed: bool
    budget_gib: float
    weights_gib: float
    draft_gib: float
    kv_bytes_per_token: int
    kv_tokens: int
    kv_reserve_gib: float
    state_mib_per_request: float
    state_requests: int
    state_reserve_gib: float
    needed_gib: float
    headroom_gib: float
    fits: bool

    def summary(self) -> str:
        parts = [f"weights {self.weights_gib:.1f}"]
        if self.draft_gib:
            parts.append(f"draft {self.draft_gib:.1f}")
        parts.append(f"KV {self.kv_reserve_gib:.2f} ({self.kv_tokens} tokens x {self.kv_bytes_per_token} B)")
        if self.state_requests:
            per = f"{self.state_mib_per_request:.1f} MiB"
            parts.append(f"state {self.state_reserve_gib:.2f} ({self.state_requests} x {per})")
        return (
            f"{self.needed_gib:.1f} GiB needed of {self.budget_gib:.1f} GiB per GPU "
            f"({self.gpu_memory_gib:g} GiB x {self.mem_fraction:g}): {' + '.join(parts)}; "
            f"headroom {self.headroom_gib:.1f} GiB"
        )


def memory_fit(model: ModelFacts, profile: Profile, hardware: Hardware, mamba_cache: str | None) -> MemoryFit:
    tp = profile.tp
    dtype = _DTYPE_BYTES[model.dtype]
    fraction = profile.mem_fraction or DEFAULT_MEM_FRACTION
    budget = hardware.memory_gib * fraction

    weights = model.size_on_disk_gib / tp
    speculative = profile.speculative is not None
    draft = model.size_on_disk_gib * model.mtp_layers / model.layers / tp if speculative else 0.0

    kv_layers = (model.full_attention_layers or model.layers) + (model.mtp_layers if speculative else 0)
    kv_heads_per_gpu = math.ceil(model.kv_heads / tp)
    kv_per_token = 2 * kv_layers * kv_heads_per_gpu * model.head_dim * dtype
    tokens = profile.max_total_tokens or profile.context_length or model.max_context_length
    kv_reserve = kv_per_token * tokens / GIB

    state_per_request = 0.0
    requests = 0
    if model.hybrid:
        linear_layers = model.layers - (model.full_attention_layers or 0)
        v_heads = model.linear_value_heads or 0
        k_heads = model.linear_key_heads or 0
        k_dim = model.linear_key_head_dim or 0
        v_dim = model.linear_value_head_dim or k_dim
        recurrent = v_heads / tp * k_dim * v_dim * 4
        conv = ((model.linear_conv_kernel or 4) - 1) * (2 * k_heads * k_dim + v_heads * v_dim) / tp * dtype
        state_per_request = linear_layers * (recurrent + conv)
        requests = profile.max_running_requests or 1
        if mamba_cache in ("extra_buffer", "extra_buffer_lazy"):
            requests *= 2
    state_reserve = state_per_request * requests / GIB

    needed = weights + draft + kv_reserve + state_reserve
    return MemoryFit(
        gpu=hardware.name,
        gpu_memory_gib=hardware.memory_gib,
        mem_fraction=fraction,
        mem_fraction_assumed=profile.mem_fraction is None,
        budget_gib=round(budget, 3),
        weights_gib=round(weights, 3),
        draft_gib=round(draft, 3),
        kv_bytes_per_token=kv_per_token,
        kv_tokens=tokens,
        kv_reserve_gib=round(kv_reserve, 3),
        state_mib_per_request=round(state_per_request / 1024**2, 3),
        state_requests=requests,
        state_reserve_gib=round(state_reserve, 3),
        needed_gib=round(needed, 3),
        headroom_gib=round(budget - needed, 3),
        fits=needed <= budget,
    )
