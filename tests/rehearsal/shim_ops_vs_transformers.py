"""The sgl_kernel stand-in's hybrid ops against transformers' own Qwen3.5 torch code. Standalone.

Runs in a `kit check` venv (CPU torch, the release's transformers: 5.19.0 for SGLang 0.5.23, what the
images pin), with the stand-in on sys.path:

    python shim_ops_vs_transformers.py SHIMS_DIR

transformers' models/qwen3_5_moe/modeling_qwen3_5_moe.py is the reference: causal_conv1d_update and
causal_conv1d_fn, torch_chunk_gated_delta_rule and torch_recurrent_gated_delta_rule, the gating
lines of Qwen3_5MoeGatedDeltaNet.forward, Qwen3_5MoeRMSNorm, Qwen3_5MoeRMSNormGated, the attention's
query/gate split and output gate. Inputs are random (fixed seed), in SGLang's layouts on the op
side (varlen batches, slot-indexed state pools with a padded slot, [V, K] states), in transformers'
on the reference side. Prints `KIT_OPS_RESULT {op: "ok" | "error text"}`.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

MARKER = "KIT_OPS_RESULT "
TOL = {"atol": 2e-5, "rtol": 2e-5}


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    os.environ["SGLANG_USE_CPU_ENGINE"] = "1"  # the stand-in's routes apply under the CPU engine only
    import torch
    import torch.nn.functional as F
    from sgl_kernel import gdn, mamba  # the stand-in; registers torch.ops.sgl_kernel.*
    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as ref

    ops = torch.ops.sgl_kernel
    gen = torch.Generator().manual_seed(1234)

    def rand(*shape, scale=1.0):
        return torch.randn(*shape, generator=gen) * scale

    close = torch.testing.assert_close
    dim, width, slots = 24, 4, 6
    heads_k, heads_v, dk, dv = 2, 4, 16, 8

    def conv_prefill():
        lengths, slot_of, initial = [5, 1, 70], [3, -1, 0], [True, False, False]
        x = rand(dim, sum(lengths))
        weight, bias = rand(dim, width), rand(dim)
        pool = rand(slots, dim, width - 1)
        before = pool.clone()
        starts = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
        out = mamba.causal_conv1d_fn_cpu(
            x, weight, bias, query_start_loc=starts, cache_indices=torch.tensor(slot_of, dtype=torch.int32),
            has_initial_state=torch.tensor(initial), conv_states=pool, activation="silu",
        )  # fmt: skip
        for i, slot in enumerate(slot_of):
            seq = x[:, starts[i] : starts[i + 1]].unsqueeze(0)
            if slot < 0:
                assert not out[:, starts[i] : starts[i + 1]].any(), "a padded sequence produced output"
                continue
            if initial[i]:
                state = before[slot].unsqueeze(0).clone()
                want = ref.causal_conv1d_update(seq, state, weight, bias, "silu")
            else:  # no history: transformers' prefill conv, then the state is the last width-1 inputs
                want = ref.causal_conv1d_fn(seq, weight, bias, activation="silu")
                state = F.pad(seq, (width - 1, 0))[..., -(width - 1) :]
            close(out[:, starts[i] : starts[i + 1]], want[0], **TOL)
            close(pool[slot], state[0], **TOL)
        close(pool[[1, 2, 4, 5]], before[[1, 2, 4, 5]])  # other slots untouched

    def conv_decode_and_verify():
        weight, bias = rand(dim, width), rand(dim)
        pool = rand(slots, dim, width - 1)
        slot_of = torch.tensor([4, -1, 1], dtype=torch.int32)
        before = pool.clone()
        x = rand(3, dim)
        out = mamba.causal_conv1d_update_cpu(x, pool, weight, bias, "silu", conv_state_indices=slot_of)
        for i, slot in enumerate(slot_of.tolist()):
            if slot < 0:
                continue
            state = before[slot].unsqueeze(0).clone()
            close(
                out[i],
                ref.causal_conv1d_update(x[i][None, :, None], state, weight, bias, "silu")[0, :, 0],
                **TOL,
            )
            close(pool[slot], state[0], **TOL)
        # Speculative verify: 3 draft tokens; the window after each step is kept per request row.
        drafts = rand(2, dim, 3)
        pool2, windows = before.clone(), torch.zeros(5, 3, dim, width - 1)
        slots_of, rows_of = torch.tensor([2, 5], dtype=torch.int32), torch.tensor([0, 3], dtype=torch.int32)
        out = mamba.causal_conv1d_update_cpu(
            drafts, pool2, weight, bias, "silu", conv_state_indices=slots_of,
            intermediate_conv_window=windows, intermediate_state_indices=rows_of,
        )  # fmt: skip
        for i, (slot, row) in enumerate([(2, 0), (5, 3)]):
            state = before[slot].unsqueeze(0).clone()
            for t in range(3):
                want = ref.causal_conv1d_update(drafts[i : i + 1, :, t : t + 1], state, weight, bias, "silu")
                close(out[i, :, t], want[0, :, 0], **TOL)
                close(windows[row, t], state[0], **TOL)

    def gating():
        tokens = 7
        A_log, dt_bias = rand(heads_v), rand(heads_v)
        a, b = rand(tokens, heads_v, scale=8.0), rand(tokens, heads_v)
        g, beta = ops.fused_gdn_gating_cpu(A_log, a, b, dt_bias)
        close(g[0], -A_log.float().exp() * F.softplus(a.float() + dt_bias), **TOL)
        close(beta[0], b.sigmoid(), **TOL)

    def delta_inputs(tokens):
        q, k = rand(1, tokens, heads_k, dk), rand(1, tokens, heads_k, dk)
        v = rand(1, tokens, heads_v, dv)
        g = -rand(1, tokens, heads_v).abs() * 0.3
        beta = rand(1, tokens, heads_v).sigmoid()
        return q, k, v, g, beta

    def expand(x):  # transformers repeats key heads for the value heads before its kernels
        return x.repeat_interleave(heads_v // heads_k, dim=2)

    def chunk_prefill():
        lengths, slot_of = [3, 130, 1], [2, 5, -1]
        q, k, v, g, beta = delta_inputs(sum(lengths))
        pool = rand(slots, heads_v, dv, dk, scale=0.1)  # SGLang: [slots, HV, V, K]
        before = pool.clone()
        starts = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
        out, final, _ = mamba.chunk_gated_delta_rule_cpu(
            q, k, v, g, beta, initial_state=pool, cu_seqlens=starts,
            initial_state_indices=torch.tensor(slot_of, dtype=torch.int32), use_qk_l2norm_in_kernel=True,
        )  # fmt: skip
        for i, slot in enumerate(slot_of):
            s, e = starts[i], starts[i + 1]
            if slot < 0:
                assert not out[:, s:e].any(), "a padded sequence produced output"
                continue
            args = (expand(q[:, s:e]), expand(k[:, s:e]), v[:, s:e], g[:, s:e], beta[:, s:e])
            init = before[slot].transpose(-1, -2).unsqueeze(0)  # transformers: [B, HV, K, V]
            for fn in (ref.torch_chunk_gated_delta_rule, ref.torch_recurrent_gated_delta_rule):
                want, state = fn(
                    *args, initial_state=init, output_final_state=True, use_qk_l2norm_in_kernel=True
                )
                close(out[:, s:e], want, atol=2e-4, rtol=2e-4)
                close(pool[slot], state[0].transpose(-1, -2), atol=2e-4, rtol=2e-4)
            close(final[i], pool[slot])

    def recurrent_decode_and_verify():
        batch = 3
        q, k, v, _, _ = delta_inputs(batch)
        A_log, dt_bias = rand(heads_v), rand(heads_v)
        a, b = rand(batch, heads_v), rand(batch, heads_v)
        pool = rand(slots, heads_v, dv, dk, scale=0.1)
        before = pool.clone()
        slot_of = torch.tensor([1, -1, 4], dtype=torch.int32)
        common = {"A_log": A_log, "dt_bias": dt_bias, "use_qk_l2norm_in_kernel": True}
        common |= {"softplus_beta": 1.0, "softplus_threshold": 20.0}
        out = ops.fused_sigmoid_gating_delta_rule_update_cpu(
            q=q, k=k, v=v, a=a, b=b, initial_state_source=pool, initial_state_indices=slot_of,
            cu_seqlens=torch.arange(batch + 1, dtype=torch.int32), **common,
        )  # fmt: skip
        g = -A_log.float().exp() * F.softplus(a.float() + dt_bias)
        for i, slot in enumerate(slot_of.tolist()):
            if slot < 0:
                continue
            sl = slice(i, i + 1)
            want, state = ref.torch_recurrent_gated_delta_rule(
                expand(q[:, sl]), expand(k[:, sl]), v[:, sl], g[None, sl], b[None, sl].sigmoid(),
                initial_state=before[slot].transpose(-1, -2).unsqueeze(0), output_final_state=True,
                use_qk_l2norm_in_kernel=True,
            )  # fmt: skip
            close(out[:, sl], want, **TOL)
            close(pool[slot], state[0].transpose(-1, -2), **TOL)
        # Verify: 4 draft tokens on one request; the pool stays, each step's state is kept.
        q, k, v, _, _ = delta_inputs(4)
        a, b = rand(4, heads_v), rand(4, heads_v)
        pool2, steps = before.clone(), torch.zeros(2, 4, heads_v, dv, dk)
        out = ops.fused_sigmoid_gating_delta_rule_update_cpu(
            q=q, k=k, v=v, a=a, b=b, initial_state_source=pool2, initial_state_indices=torch.tensor([3]),
            cu_seqlens=torch.tensor([0, 4], dtype=torch.int32), disable_state_update=True,
            intermediate_states_buffer=steps, intermediate_state_indices=torch.tensor([1]), cache_steps=4,
            **common,
        )  # fmt: skip
        close(pool2, before)
        g = -A_log.float().exp() * F.softplus(a.float() + dt_bias)
        state = before[3].transpose(-1, -2).unsqueeze(0)
        for t in range(4):
            sl = slice(t, t + 1)
            want, state = ref.torch_recurrent_gated_delta_rule(
                expand(q[:, sl]), expand(k[:, sl]), v[:, sl], g[None, sl], b[None, sl].sigmoid(),
                initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True,
            )  # fmt: skip
            close(out[:, sl], want, **TOL)
            close(steps[1, t], state[0].transpose(-1, -2), **TOL)

    def rmsnorm_gated():
        norm = ref.Qwen3_5MoeRMSNormGated(dv, eps=1e-6)
        norm.weight.data = rand(dv)
        x, z = rand(10, dv), rand(10, dv)
        close(ops.fused_rmsnorm_gated_cpu(x, norm.weight.data, z, 1e-6), norm(x, z), **TOL)

    def qk_norm_and_gate():
        seq, heads, kv_heads, head = 5, 4, 2, 16
        q_norm, k_norm = ref.Qwen3_5MoeRMSNorm(head), ref.Qwen3_5MoeRMSNorm(head)
        q_norm.weight.data, k_norm.weight.data = rand(head, scale=0.1), rand(head, scale=0.1)
        qkv = rand(seq, heads * head * 2 + 2 * kv_heads * head)
        q_gate, k = qkv[:, : heads * head * 2], qkv[:, heads * head * 2 : heads * head * 2 + kv_heads * head]
        # transformers: q_proj's output viewed per head and chunked into (query, gate).
        query, gate = torch.chunk(q_gate.view(seq, heads, head * 2), 2, dim=-1)
        got_q, got_k, got_gate = ops.fused_qk_gemma_rmsnorm_with_gate_cpu(
            q_gate, k, q_norm.weight.data, k_norm.weight.data, 1e-6, head, heads
        )
        close(got_q, q_norm(query).reshape(-1, head), **TOL)
        close(got_k, k_norm(k.view(seq, kv_heads, head)).reshape(-1, head), **TOL)
        close(got_gate, gate.reshape(-1, head))
        plain_q, plain_k = ops.fused_qk_gemma_rmsnorm_cpu(
            query.reshape(seq, -1), k, q_norm.weight.data, k_norm.weight.data, 1e-6, head
        )
        close(plain_q, got_q)
        close(plain_k, got_k)
        # The attention output gate: attn_output * sigmoid(gate), in place.
        attn = rand(seq, heads * head)
        want = attn * torch.sigmoid(gate.reshape(seq, -1))
        ops.fused_sigmoid_mul_cpu(attn, gate.reshape(seq, -1))
        close(attn, want, **TOL)

    def projections():
        hidden, tokens = 12, 6
        w_qkv, w_z = rand(2 * heads_k * dk + heads_v * dv, hidden), rand(heads_v * dv, hidden)
        w_b, w_a = rand(heads_v, hidden), rand(heads_v, hidden)
        h = rand(tokens, hidden)
        # SGLang's merged in_proj_qkvz / in_proj_ba (weights stacked in checkpoint order).
        qkvz, ba = ops.fused_input_proj_cpu(h, torch.cat([w_qkv, w_z]), torch.cat([w_b, w_a]), False)
        close(qkvz, F.linear(h, torch.cat([w_qkv, w_z])), **TOL)
        mixed_qkv, z, b, a = ops.fused_qkvzba_split_reshape_cat_contiguous_cpu(
            qkvz, ba, heads_k, heads_v, dk, dv
        )
        # transformers: in_proj_qkv, in_proj_z (reshaped per value head), in_proj_b, in_proj_a.
        close(mixed_qkv, F.linear(h, w_qkv), **TOL)
        close(z, F.linear(h, w_z).reshape(tokens, -1, dv), **TOL)
        close(b, F.linear(h, w_b), **TOL)
        close(a, F.linear(h, w_a), **TOL)
        # One token (a decode step): its slices are contiguous, and the outputs still may not alias.
        one = ops.fused_qkvzba_split_reshape_cat_contiguous_cpu(qkvz[:1], ba[:1], heads_k, heads_v, dk, dv)
        for got, full in zip(one, (mixed_qkv, z, b, a), strict=True):
            close(got, full[:1])

    def shared_expert_gate():
        hidden, tokens = 12, 5
        gate = torch.nn.Linear(hidden, 1, bias=False)  # transformers' shared_expert_gate
        h, shared, routed = rand(tokens, hidden), rand(tokens, hidden), rand(tokens, hidden)
        want = routed + F.sigmoid(gate(h)) * shared  # Qwen3_5MoeSparseMoeBlock.forward
        out = routed.clone()
        gdn.shared_expert_gate(h, gate.weight.data.squeeze(0), shared, out, do_add=True)
        close(out, want, **TOL)

    def kv_slot_copy():
        # No transformers counterpart: held to its contract (every layer's slot src -> slot tgt).
        import sgl_kernel

        layers = [rand(10, 2, 8).to(torch.bfloat16) for _ in range(3)]
        want = [layer.clone() for layer in layers]
        src, tgt = torch.tensor([1, 4, 7]), torch.tensor([2, 4, 0])
        for layer in want:
            layer[tgt] = layer[src].clone()
        ptrs = torch.tensor([layer.data_ptr() for layer in layers])
        strides = torch.tensor([layer[0].numel() * layer.element_size() for layer in layers])
        sgl_kernel.copy_all_layer_kv_cache_cpu(ptrs, strides, tgt, src)
        for got, expected in zip(layers, want, strict=True):
            assert torch.equal(got, expected)

    def routes():
        # SGLang's modules that would launch Triton on a CPU without AMX take the stand-in's routes.
        from sglang.kernels.ops.attention.fla import layernorm_gated
        from sglang.kernels.ops.elementwise import elementwise

        assert layernorm_gated._use_cpu is True
        assert elementwise._launch_fused_gate_sigmoid_mul is gdn.shared_expert_gate
        norm = layernorm_gated.RMSNorm(dv, eps=1e-6)
        x, z = rand(4, dv), rand(4, dv)
        close(norm(x, z), ref.Qwen3_5MoeRMSNormGated(dv, eps=1e-6)(x, z), **TOL)

    checks = {
        "causal_conv1d_fn_cpu": conv_prefill,
        "causal_conv1d_update_cpu": conv_decode_and_verify,
        "fused_gdn_gating_cpu": gating,
        "chunk_gated_delta_rule_cpu": chunk_prefill,
        "fused_sigmoid_gating_delta_rule_update_cpu": recurrent_decode_and_verify,
        "fused_rmsnorm_gated_cpu": rmsnorm_gated,
        "fused_qk_gemma_rmsnorm_with_gate_cpu": qk_norm_and_gate,
        "fused_qkvzba_split_reshape_cat_contiguous_cpu": projections,
        "shared_expert_gate": shared_expert_gate,
        "copy_all_layer_kv_cache_cpu": kv_slot_copy,
        "routes": routes,
    }
    results = {}
    for name, fn in checks.items():
        try:
            fn()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc(limit=3)[-1500:]
    print(MARKER + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
