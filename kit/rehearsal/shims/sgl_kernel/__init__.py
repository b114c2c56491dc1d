"""CPU compatibility stand-in for `sgl_kernel`, shipped ONLY in the CPU rehearsal image.

Why it exists: PyPI's `sglang-kernel` wheel is CUDA-only, yet SGLang's CPU path does
`from sgl_kernel import <name>_cpu` at import time. This module gives SGLang what the rehearsal
needs and nothing more:

- `assign_req_to_token_pool_cpu`, called on every prefill, written in plain torch with the same
  semantics as SGLang's triton kernel `assign_req_to_token_pool` (mem_cache/allocation.py);
  `copy_all_layer_kv_cache_cpu` (KV slot moves under speculative decoding) likewise;
- the hybrid (Gated-DeltaNet) ops the Qwen3.5 CPU path calls: `torch.ops.sgl_kernel.*_cpu`
  (ops.py, registered on import: models/qwen3_5.py binds some at import time) and
  `sgl_kernel.mamba` (conv1d and the chunked gated delta rule), plain torch in gdn.py; on CPUs
  without AMX, SGLang's gated RMSNorm is routed to one of them (routes.py: it has no torch path);
- every other `*_cpu` name imports, but raises NotImplementedError naming the op when called, so a
  code path the rehearsal models do not use fails loudly instead of silently.

Names without the `_cpu` suffix raise ImportError, as with no sgl_kernel at all, so SGLang's own
fallbacks still apply. Never install this in a GPU image.
"""

from __future__ import annotations

import ctypes

import torch

from . import (
    ops,  # noqa: F401  (registers torch.ops.sgl_kernel.*_cpu)
    routes,
)

routes.install()

__version__ = "0.0.0+kit.cpu.rehearsal"


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Write each request's new cache slots into its row of the req-to-token table.

    Request i takes the slice of `out_cache_loc` that follows all earlier requests' slices, and
    writes it at positions start_offset[i]:end_offset[i] of row req_pool_indices[i].
    """
    del pool_len  # the row length; implicit in req_to_token's shape here
    taken = 0
    for row, start, end in zip(
        req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist(), strict=True
    ):
        length = end - start
        req_to_token[row, start:end] = out_cache_loc[taken : taken + length].to(req_to_token.dtype)
        taken += length


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor, src_loc: torch.Tensor
) -> None:
    """Copy KV slot src_loc[i] to tgt_loc[i] in every layer's buffer (speculative decoding moves them).

    Same contract as SGLang's triton kernel copy_all_layer_kv_cache_tiled
    (kernels/ops/kvcache/cache_move.py, 0.5.23): data_ptrs[b] is the address of buffer b, whose
    slots are strides[b] bytes apart and strides[b] bytes wide. SGLang hands over addresses, not
    tensors, so the bytes move with memmove (overlap-safe, like the kernel's in-place copy).
    """
    for base, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        for tgt, src in zip(tgt_loc.tolist(), src_loc.tolist(), strict=True):
            if tgt != src:
                ctypes.memmove(base + tgt * stride, base + src * stride, stride)


def _not_implemented(name: str):
    def op(*args, **kwargs):
        raise NotImplementedError(
            f"sgl_kernel.{name} is not implemented in the kit's CPU rehearsal stand-in "
            "(kit/rehearsal/shims/sgl_kernel); the rehearsal model should not reach it"
        )

    op.__name__ = name
    return op


def __getattr__(name: str):
    if name.endswith("_cpu"):
        return _not_implemented(name)
    raise AttributeError(f"module 'sgl_kernel' (kit CPU rehearsal stand-in) has no attribute {name!r}")
