"""Where SGLang 0.5.23's Qwen3.5 path has no CPU route without AMX, give it the stand-in's torch one.

On a CPU without AMX (the rehearsal's machines) SGLang's CPU engine falls back to torch almost
everywhere, but two pieces of the Qwen3.5-MoE path go straight to a Triton kernel, which cannot
run on a CPU ("0 active drivers"):

- the Gated-DeltaNet output norm: kernels/ops/attention/fla/layernorm_gated.py (and
  fla/fused_norm_gate.py) choose `_use_cpu = is_cpu() and cpu_has_amx_support()` once; with AMX
  they call `torch.ops.sgl_kernel.fused_rmsnorm_gated_cpu`, without it Triton. Here `_use_cpu`
  is set, so the stand-in's op (ops.py) runs.
- the MoE block's shared-expert gate: models/qwen2_moe.py Qwen2MoeSparseMoeBlock.forward calls
  `fused_gate_sigmoid_mul_add` whenever the gate is not an AMX layer; its launcher
  (kernels/ops/elementwise/elementwise.py `_launch_fused_gate_sigmoid_mul`) is replaced by the
  same arithmetic in torch (gdn.shared_expert_gate).

Each is applied when its module is imported (or at once if it already is), only under SGLang's
CPU engine (SGLANG_USE_CPU_ENGINE=1). Nothing else in SGLang is touched.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

from . import gdn


def _use_cpu_op(module) -> None:
    module._use_cpu = True


def _torch_shared_expert_gate(module) -> None:
    module._launch_fused_gate_sigmoid_mul = gdn.shared_expert_gate


ROUTES = {
    "sglang.kernels.ops.attention.fla.layernorm_gated": _use_cpu_op,
    "sglang.kernels.ops.attention.fla.fused_norm_gate": _use_cpu_op,
    "sglang.kernels.ops.elementwise.elementwise": _torch_shared_expert_gate,
}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds a routed module with the path finder and applies its route once it has executed."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in ROUTES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader, route = spec.loader, ROUTES[fullname]
        original = loader.exec_module

        def exec_module(module):
            original(module)
            route(module)

        loader.exec_module = exec_module
        return spec


def install() -> None:
    """Route the modules already imported and those imported later; only under SGLang's CPU engine."""
    if os.environ.get("SGLANG_USE_CPU_ENGINE", "0") != "1":
        return
    for name, route in ROUTES.items():
        if name in sys.modules:
            route(sys.modules[name])
    if not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
