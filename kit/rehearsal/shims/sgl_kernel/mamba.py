"""`sgl_kernel.mamba`: the Python entry points SGLang 0.5.23 imports on CPU for hybrid (GDN) models.

gdn_backend.py: `from sgl_kernel.mamba import causal_conv1d_fn_cpu, causal_conv1d_update_cpu`;
kernels/gdn_triton.py: `from sgl_kernel.mamba import chunk_gated_delta_rule_cpu`. Their arguments
are those call sites'; the math is gdn.py's (plain torch, SGLang's state layouts).
"""

from __future__ import annotations

import torch

from . import gdn


def causal_conv1d_fn_cpu(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    query_start_loc: torch.Tensor | None = None,
    cache_indices: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    conv_states: torch.Tensor | None = None,
    activation: str | None = "silu",
    pad_slot_id: int = gdn.PAD_SLOT_ID,
    **kwargs,
) -> torch.Tensor:
    """Prefill conv over x [dim, tokens] (all sequences concatenated); returns [dim, tokens]."""
    del pad_slot_id, kwargs  # -1 is the pad slot (gdn.PAD_SLOT_ID); seq_lens_cpu, block_table: not needed
    if query_start_loc is None:
        query_start_loc = torch.tensor([0, x.shape[-1]], dtype=torch.int32)
    if cache_indices is None:
        cache_indices = torch.arange(query_start_loc.numel() - 1, dtype=torch.int32)
    if conv_states is None:
        conv_states = x.new_zeros(query_start_loc.numel() - 1, x.shape[0], weight.shape[1] - 1)
    return gdn.conv1d_varlen(
        x, weight, bias, conv_states, query_start_loc, cache_indices, has_initial_state, activation
    )


def causal_conv1d_update_cpu(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | bool | None = None,
    cache_seqlens: torch.Tensor | None = None,
    conv_state_indices: torch.Tensor | None = None,
    intermediate_conv_window: torch.Tensor | None = None,
    intermediate_state_indices: torch.Tensor | None = None,
    retrieve_next_token: torch.Tensor | None = None,
    retrieve_next_sibling: torch.Tensor | None = None,
    retrieve_parent_token: torch.Tensor | None = None,
    pad_slot_id: int = gdn.PAD_SLOT_ID,
    **kwargs,
) -> torch.Tensor:
    """Decode (x [batch, dim]) or speculative verify (x [batch, dim, drafts]); states rolled in place.

    Verify also keeps each draft step's window, [row, step, dim, width-1], in intermediate_conv_window
    (kernels/ops/mamba/causal_conv1d_triton.py, SAVE_INTERMEDIATE). Chain drafts only (eagle_topk 1).
    """
    del pad_slot_id, kwargs
    if cache_seqlens is not None:
        raise NotImplementedError(
            "sgl_kernel stand-in: a circular conv state (cache_seqlens) is not implemented"
        )
    if retrieve_next_token is not None:
        steps = retrieve_next_token.shape[-1]
        chain = torch.arange(1, steps + 1, dtype=retrieve_next_token.dtype)
        chain[-1] = -1
        if not bool((retrieve_next_token == chain).all()):
            raise NotImplementedError("sgl_kernel stand-in: draft trees (eagle_topk > 1) are not implemented")
        if retrieve_parent_token is not None:  # an output of the fused kernel: each token's parent
            retrieve_parent_token.copy_(torch.arange(-1, steps - 1, dtype=retrieve_parent_token.dtype))
    del retrieve_next_sibling
    if intermediate_conv_window is None or x.dim() == 2:
        return gdn.conv1d_update(x, conv_state, weight, bias, activation, conv_state_indices)
    # Verify: one token at a time, so each step's window can be kept.
    out = torch.empty_like(x)
    for t in range(x.shape[-1]):
        out[..., t] = gdn.conv1d_update(x[..., t], conv_state, weight, bias, activation, conv_state_indices)
        for i in range(x.shape[0]):
            slot = int(conv_state_indices[i]) if conv_state_indices is not None else i
            row = int(intermediate_state_indices[i]) if intermediate_state_indices is not None else i
            if slot >= 0 and row >= 0:
                intermediate_conv_window[row, t] = conv_state[slot].to(intermediate_conv_window.dtype)
    return out


def chunk_gated_delta_rule_cpu(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor,
    cu_seqlens: torch.Tensor,
    head_first: bool = False,
    use_qk_l2norm_in_kernel: bool = True,
    initial_state_indices: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor, None]:
    """Prefill GDN: (output [1, tokens, HV, V], final states, no per-chunk states).

    The state pool is updated in place at initial_state_indices (gdn_backend.py on CPU does not
    gather/scatter it). Per-chunk states (`h`) are only read by extra_buffer's state tracking, which
    SGLang refuses on CPU, so none are kept.
    """
    del kwargs
    if head_first:
        raise NotImplementedError("sgl_kernel stand-in: head_first layout is not implemented")
    if initial_state_indices is None:
        initial_state_indices = torch.arange(cu_seqlens.numel() - 1, dtype=torch.int32)
    out, final = gdn.chunk_gated_delta_rule(
        q, k, v, g, beta, initial_state, cu_seqlens, initial_state_indices, use_qk_l2norm_in_kernel
    )
    return out, final, None
