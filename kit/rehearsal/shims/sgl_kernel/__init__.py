"""CPU compatibility stand-in for `sgl_kernel`, shipped ONLY in the CPU rehearsal image.

Why it exists: PyPI's `sglang-kernel` wheel is CUDA-only, yet SGLang's CPU path does
`from sgl_kernel import <name>_cpu` at import time. This module gives SGLang what the rehearsal
needs and nothing more:

- `assign_req_to_token_pool_cpu`, called on every prefill, written in plain torch with the same
  semantics as SGLang's triton kernel `assign_req_to_token_pool` (mem_cache/allocation.py);
- every other `*_cpu` name imports, but raises NotImplementedError naming the op when called, so a
  code path the tiny Qwen2 model does not use fails loudly instead of silently.

Names without the `_cpu` suffix raise ImportError, as with no sgl_kernel at all, so SGLang's own
fallbacks still apply. Never install this in a GPU image.
"""

from __future__ import annotations

import torch

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
