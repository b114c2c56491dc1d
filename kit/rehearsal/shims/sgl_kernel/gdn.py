"""The hybrid (Gated-DeltaNet) CPU kernels SGLang 0.5.23 calls, in plain torch, with SGLang's layouts.

Pure functions of tensors: ops.py registers them as `torch.ops.sgl_kernel.*_cpu`, mamba.py wraps
the ones SGLang imports from `sgl_kernel.mamba`. Each follows the contract of the kernel it stands
in for (the file and release named beside it); tests hold them to transformers' own torch
references (modeling_qwen3_5_moe.py: torch_causal_conv1d_update, torch_recurrent_gated_delta_rule,
torch_chunk_gated_delta_rule). Written for clarity, not speed: the rehearsal model is tiny.

Layouts (SGLang's, not transformers'):
- conv state: [slots, dim, width - 1]; the conv weight: [dim, width].
- recurrent state: [slots, HV, V, K] (transformers keeps [.., K, V]).
- varlen batches: tokens of all sequences concatenated, `cu_seqlens` = query_start_loc [0, l0, l0+l1, ...];
  a negative slot index (PAD_SLOT_ID, -1) is a padded sequence: skipped, its output left zero.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

PAD_SLOT_ID = -1


def _silu_if(x: torch.Tensor, activation: str | bool | None) -> torch.Tensor:
    return F.silu(x) if activation in (True, "silu", "swish") else x


def conv1d_varlen(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    conv_states: torch.Tensor,
    query_start_loc: torch.Tensor,
    cache_indices: torch.Tensor,
    has_initial_state: torch.Tensor | None,
    activation: str | bool | None,
) -> torch.Tensor:
    """Causal depthwise conv over each sequence of x [dim, tokens]; conv_states updated in place.

    Contract: sglang 0.5.23 srt/layers/attention/mamba/causal_conv1d.py causal_conv1d_fn (x is
    (dim, cu_seq_len) for varlen; conv_states[cache_indices[i]] is sequence i's state, read when
    has_initial_state[i], then replaced by its last width-1 inputs).
    """
    width = weight.shape[1]
    out = torch.zeros_like(x)
    starts = query_start_loc.tolist()
    for i, (start, end) in enumerate(itertools.pairwise(starts)):
        slot = int(cache_indices[i])
        if slot == PAD_SLOT_ID or end <= start:
            continue
        if has_initial_state is not None and bool(has_initial_state[i]):
            history = conv_states[slot].to(torch.float32)
        else:
            history = x.new_zeros(x.shape[0], width - 1, dtype=torch.float32)
        window = torch.cat([history, x[:, start:end].to(torch.float32)], dim=-1)
        y = F.conv1d(window.unsqueeze(0), weight.to(torch.float32).unsqueeze(1), groups=x.shape[0])[0]
        if bias is not None:
            y = y + bias.to(torch.float32)[:, None]
        out[:, start:end] = _silu_if(y, activation).to(x.dtype)
        conv_states[slot] = window[:, -(width - 1) :].to(conv_states.dtype)
    return out


def conv1d_update(
    x: torch.Tensor,
    conv_states: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str | bool | None,
    conv_state_indices: torch.Tensor | None,
) -> torch.Tensor:
    """One decode step (x [batch, dim]) or a few (x [batch, dim, steps]); states shifted in place.

    Contract: the same file's causal_conv1d_update (conv_state [batch, dim, width-1] selected by
    conv_state_indices; out has x's shape).
    """
    squeeze = x.dim() == 2
    xs = x.unsqueeze(-1) if squeeze else x
    width = weight.shape[1]
    out = torch.zeros_like(xs)
    for i in range(xs.shape[0]):
        slot = int(conv_state_indices[i]) if conv_state_indices is not None else i
        if slot == PAD_SLOT_ID:
            continue
        window = torch.cat([conv_states[slot].to(torch.float32), xs[i].to(torch.float32)], dim=-1)
        y = F.conv1d(window.unsqueeze(0), weight.to(torch.float32).unsqueeze(1), groups=xs.shape[1])[0]
        if bias is not None:
            y = y + bias.to(torch.float32)[:, None]
        out[i] = _silu_if(y, activation).to(x.dtype)
        conv_states[slot] = window[:, -(width - 1) :].to(conv_states.dtype)
    return out.squeeze(-1) if squeeze else out


def gdn_gating(
    A_log: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    dt_bias: torch.Tensor,
    beta: float = 1.0,
    threshold: float = 20.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b), each [1, tokens, heads] float32.

    Contract: sglang 0.5.23 kernels/ops/attention/linear/fused_gdn_gating.py fused_gdn_gating.
    """
    x = a.to(torch.float32) + dt_bias.to(torch.float32)
    g = -torch.exp(A_log.to(torch.float32)) * F.softplus(x, beta=beta, threshold=threshold)
    return g.unsqueeze(0), torch.sigmoid(b.to(torch.float32)).unsqueeze(0)


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + 1e-6)


def delta_rule_sequence(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    use_qk_l2norm: bool,
    on_step=None,
    state_before=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule over one sequence, token by token, in float32.

    q, k [T, H, K]; v [T, HV, V]; g, beta [T, HV]; state [HV, V, K] (SGLang's layout). Per token:
    S <- S * exp(g); S <- S + beta * (v - S k) k^T; o = S q / sqrt(K) (q, k L2-normalised first
    when asked). Key heads are shared by HV / H value heads. Returns (o [T, HV, V], new state).
    on_step(t, state) sees the state after each token (speculative verify keeps them);
    state_before(t) may return the state token t starts from instead (a draft tree's parent).
    """
    heads_v = v.shape[1]
    q, k, v = q.to(torch.float32), k.to(torch.float32), v.to(torch.float32)
    if use_qk_l2norm:
        q, k = _l2norm(q), _l2norm(k)
    q = q * q.shape[-1] ** -0.5
    group = heads_v // q.shape[1]
    q = q.repeat_interleave(group, dim=1)
    k = k.repeat_interleave(group, dim=1)
    s = state.to(torch.float32).clone()
    out = torch.empty(v.shape, dtype=torch.float32)
    for t in range(q.shape[0]):
        if state_before is not None and t > 0:
            s = state_before(t).to(torch.float32)
        s = s * torch.exp(g[t].to(torch.float32))[:, None, None]
        memory = torch.einsum("hvk,hk->hv", s, k[t])
        delta = (v[t] - memory) * beta[t].to(torch.float32)[:, None]
        s = s + torch.einsum("hv,hk->hvk", delta, k[t])
        out[t] = torch.einsum("hvk,hk->hv", s, q[t])
        if on_step is not None:
            on_step(t, s)
    return out, s


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor,
    cu_seqlens: torch.Tensor,
    initial_state_indices: torch.Tensor,
    use_qk_l2norm_in_kernel: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prefill: each sequence of q/k/v [1, tokens, heads, dim] from its slot's state, updated in place.

    Contract: sglang 0.5.23 layers/attention/linear/kernels/gdn_triton.py TritonGDNKernel.extend on
    CPU (initial_state is the [slots, HV, V, K] pool, indexed by initial_state_indices, written back
    in place: "CPU kernels ... use proper indexed writes", gdn_backend.py). Returns (o [1, tokens,
    HV, V] in v's dtype, the final states [batch, HV, V, K]).
    """
    out = torch.zeros(v.shape, dtype=v.dtype)
    starts = cu_seqlens.tolist()
    finals = []
    for i, (start, end) in enumerate(itertools.pairwise(starts)):
        slot = int(initial_state_indices[i])
        if slot == PAD_SLOT_ID:
            finals.append(initial_state.new_zeros(initial_state.shape[1:]))
            continue
        o, s = delta_rule_sequence(
            q[0, start:end], k[0, start:end], v[0, start:end], g[0, start:end], beta[0, start:end],
            initial_state[slot], use_qk_l2norm_in_kernel,
        )  # fmt: skip
        out[0, start:end] = o.to(v.dtype)
        initial_state[slot] = s.to(initial_state.dtype)
        finals.append(initial_state[slot])
    return out, torch.stack(finals) if finals else initial_state[:0]


def gated_delta_rule_update(
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    initial_state_source: torch.Tensor,
    initial_state_indices: torch.Tensor,
    cu_seqlens: torch.Tensor | None,
    use_qk_l2norm_in_kernel: bool,
    softplus_beta: float,
    softplus_threshold: float,
    disable_state_update: bool = False,
    intermediate_states_buffer: torch.Tensor | None = None,
    intermediate_state_indices: torch.Tensor | None = None,
    retrieve_parent_token: torch.Tensor | None = None,
) -> torch.Tensor:
    """Decode (one token per sequence) or speculative verify (a few): gating fused in, states in place.

    Contract: sglang 0.5.23 kernels/ops/attention/linear/fused_sigmoid_gating_recurrent.py
    fused_sigmoid_gating_delta_rule_update: q, k [1, tokens, H, K], v [1, tokens, HV, V], a, b
    [tokens, HV]; sequence i is tokens cu_seqlens[i]:cu_seqlens[i+1] (one each without cu_seqlens)
    on slot initial_state_indices[i]. Verify (disable_state_update) leaves the pool as it was and
    writes the state after each draft token to intermediate_states_buffer[intermediate_state_indices[i], t];
    with retrieve_parent_token [batch, tokens] (a draft tree) token t starts from its parent's state
    there. Returns o [1, tokens, HV, V] in v's dtype.
    """
    tokens = q.shape[1]
    starts = cu_seqlens.tolist() if cu_seqlens is not None else list(range(tokens + 1))
    g, beta = gdn_gating(
        A_log, a.reshape(tokens, -1), b.reshape(tokens, -1), dt_bias, softplus_beta, softplus_threshold
    )
    out = torch.zeros(v.shape, dtype=v.dtype)
    for i, (start, end) in enumerate(itertools.pairwise(starts)):
        slot = int(initial_state_indices[i])
        if slot == PAD_SLOT_ID or end <= start:
            continue
        on_step = state_before = None
        if intermediate_states_buffer is not None and intermediate_state_indices is not None:
            row = int(intermediate_state_indices[i])
            if row >= 0:

                def on_step(t, s, row=row):
                    intermediate_states_buffer[row, t] = s.to(intermediate_states_buffer.dtype)

                if retrieve_parent_token is not None:

                    def state_before(t, row=row, i=i):
                        return intermediate_states_buffer[row, int(retrieve_parent_token[i, t])]

        o, s = delta_rule_sequence(
            q[0, start:end], k[0, start:end], v[0, start:end], g[0, start:end], beta[0, start:end],
            initial_state_source[slot], use_qk_l2norm_in_kernel, on_step, state_before,
        )  # fmt: skip
        out[0, start:end] = o.to(v.dtype)
        if not disable_state_update:
            initial_state_source[slot] = s.to(initial_state_source.dtype)
    return out


def gemma_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma RMSNorm (scale by 1 + weight), in float32 like SGLang's GemmaRMSNorm.forward_native."""
    xf = x.to(torch.float32)
    xf = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (xf * (1.0 + weight.to(torch.float32))).to(x.dtype)


def rmsnorm_gated(x: torch.Tensor, weight: torch.Tensor, z: torch.Tensor | None, eps: float) -> torch.Tensor:
    """norm(x) * weight * silu(z), per last dim (norm before gate, swish; what Qwen3.5's GDN uses).

    Contract: sglang 0.5.23 kernels/ops/attention/fla/layernorm_gated.py RMSNorm.forward on CPU.
    """
    xf = x.to(torch.float32)
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.to(torch.float32)
    if z is not None:
        y = y * F.silu(z.to(torch.float32).reshape(y.shape))
    return y.to(x.dtype)


def shared_expert_gate(
    hidden_states: torch.Tensor,
    gate_weight: torch.Tensor,
    shared_output: torch.Tensor,
    output: torch.Tensor,
    *,
    do_add: bool,
) -> None:
    """output (+)= sigmoid(hidden_states . gate_weight) * shared_output, per token, in place.

    Contract: sglang 0.5.23 kernels/ops/elementwise/elementwise.py _launch_fused_gate_sigmoid_mul
    (the shared expert's scalar gate of Qwen2/3/3.5 MoE blocks; float32 inside).
    """
    gate = torch.sigmoid(hidden_states.to(torch.float32) @ gate_weight.to(torch.float32))
    result = gate[:, None] * shared_output.to(torch.float32)
    if do_add:
        result = result + output.to(torch.float32)
    output.copy_(result.to(output.dtype))
