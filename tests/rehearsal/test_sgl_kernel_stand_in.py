"""The CPU rehearsal's sgl_kernel stand-in: its hybrid (Gated-DeltaNet) ops against transformers' torch code.

`slow`: runs shim_ops_vs_transformers.py in the `kit check` venv of the CPU image's release (CPU
torch and the transformers that release pins, 5.19.0 for 0.5.23), created on first use.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kit.check import ensure_venv
from kit.launch import resolve_full

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().parent / "shim_ops_vs_transformers.py"
OPS = [
    "causal_conv1d_fn_cpu",
    "causal_conv1d_update_cpu",
    "fused_gdn_gating_cpu",
    "chunk_gated_delta_rule_cpu",
    "fused_sigmoid_gating_delta_rule_update_cpu",
    "fused_rmsnorm_gated_cpu",
    "fused_qk_gemma_rmsnorm_with_gate_cpu",
    "fused_qkvzba_split_reshape_cat_contiguous_cpu",
    "shared_expert_gate",
    "copy_all_layer_kv_cache_cpu",
    "routes",
]


@pytest.fixture(scope="module")
def results():
    venv, _ = ensure_venv(resolve_full("tiny").manifest.pins.sglang)
    done = subprocess.run(
        [str(venv / "bin" / "python"), str(SCRIPT), str(ROOT / "kit" / "rehearsal" / "shims")],
        capture_output=True, text=True, timeout=600, cwd=ROOT / "tests",
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("KIT_OPS_RESULT ")]
    assert lines, f"no result (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(lines[-1].split(" ", 1)[1])


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
def test_the_stand_in_op_matches_transformers(results, op):
    assert results[op] == "ok", results[op]


@pytest.mark.slow
def test_every_op_was_checked(results):
    assert sorted(results) == sorted(OPS)
