"""Every TP a target offers starts, or `kit validate` refuses it: the splits SGLang 0.5.23 asserts.

The expected verdict is computed here, independently of kit/validate/_parallel.py, from each
model's config.json (the file SGLang reads) and the rules as SGLang 0.5.23's source states them
(the module docstring of kit/validate/_parallel.py cites each file). Hypothesis draws targets and
TP sizes; a second test holds every target at every TP it offers to VALID.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.catalog import load_catalog
from kit.launch import list_targets, resolve, resolve_full
from kit.rehearsal import tiny_qwen3_5
from kit.validate import validate

BIND = "SGLANG_CPU_OMP_THREADS_BIND"
# The TP sizes a target whose GPUs follow TP offers (the catalog's "TP 1, 2 or 4", gpu-quick's `tp`
# input), and a CPU rehearsal the same: its ranks are processes, any count starts.
SCALABLE_TPS = (1, 2, 4)


def _config(target: str) -> dict:
    r = resolve_full(target)
    assert r.model.config_path is not None, f"{target}: every catalog model carries its config.json"
    return json.loads(r.model.config_path.read_text())


def _expected_broken(config: dict, tp: int, dp_encoder: bool = False) -> set[str]:
    """The dimensions SGLang would fail to split at model build, by hand from config.json."""
    text = config.get("text_config", config)
    vision = config.get("vision_config", {})
    broken = set()
    if text["num_attention_heads"] % tp:
        broken.add("tp-heads")  # linear.py QKVParallelLinear divide(total_num_heads, tp_size)
    kv = text.get("num_key_value_heads", text["num_attention_heads"])
    if (tp % kv) if tp > kv else (kv % tp):
        broken.add("tp-kv-heads")  # replicated when tp > kv: divide(tp_size, total_num_kv_heads)
    if text.get("linear_num_value_heads", tp) % tp:
        broken.add("tp-linear-heads")  # mamba_utils.py divide(num_heads, tp_world_size)
    if text.get("num_experts"):
        if text["moe_intermediate_size"] % tp:
            broken.add("tp-moe-intermediate")
        if text.get("shared_expert_intermediate_size", tp) % tp:
            broken.add("tp-shared-expert-intermediate")
    elif text.get("intermediate_size", tp) % tp:
        broken.add("tp-mlp-intermediate")
    if vision and not dp_encoder:
        if vision["num_heads"] % tp:
            broken.add("tp-vision-heads")  # layers/attention/vision.py divide(num_heads, tp_size)
        if vision["intermediate_size"] % tp:
            broken.add("tp-vision-intermediate")
    return broken


def _offered(target: str) -> tuple[int, ...]:
    """The TP sizes TARGET offers: its profile's, and 1, 2, 4 where its GPUs (or CPU ranks) follow TP."""
    r = resolve_full(target)
    scalable = r.target_def.gpus == "tp" or r.spec.device == "cpu"
    return tuple(sorted({r.profile.tp, *(SCALABLE_TPS if scalable else ())}))


def _split_findings(report) -> dict[str, str]:
    return {f.id: f.severity for f in report.findings if f.id.startswith("tp-") and f.id != "tp-gpus"}


CASES = [(target, tp) for target in list_targets() for tp in _offered(target)]


def test_the_cases_cover_every_catalog_target():
    assert {t for t, _ in CASES} == set(load_catalog().targets)
    assert {("qwen-tiny-mtp", 4), ("tiny-qwen", 4), ("tiny", 4), ("qwen-base", 4)} <= set(CASES)


@pytest.mark.parametrize(("target", "tp"), CASES)
def test_every_tp_a_target_offers_is_valid_and_splits_evenly(target, tp):
    assert _expected_broken(_config(target), tp) == set(), (
        f"{target} offers TP {tp}, which its model cannot split"
    )
    report = validate(target, overrides=[f"tp={tp}"])
    assert report.ok, [(f.id, f.message) for f in report.findings if f.severity == "error"]
    spec = resolve(target, overrides=[f"tp={tp}"])
    if spec.device == "cpu":
        # One thread-bind group per rank: SGLang binds rank i to group i (numa_utils.py).
        assert len(spec.env[BIND].split("|")) >= tp


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(target=st.sampled_from(list_targets()), tp=st.integers(1, 16), dp_encoder=st.booleans())
def test_validates_verdict_on_the_splits_agrees_with_the_model_config(target, tp, dp_encoder):
    overrides = [f"tp={tp}"]
    if dp_encoder:
        extra = resolve_full(target).profile.extra_args
        overrides.append("extra_args=" + json.dumps([*extra, "--mm-enable-dp-encoder"]))
    report = validate(target, overrides=overrides)
    found = _split_findings(report)
    assert set(found) == _expected_broken(_config(target), tp, dp_encoder)
    # A GPU rank asserts; SGLang's CPU engine would pad (update_config.py): a rehearsal no GPU could run.
    assert set(found.values()) <= {"error"}


def test_the_tiny_models_vision_heads_divide_every_tp_and_keep_the_122bs_head_size():
    vision = tiny_qwen3_5.CONFIG["vision_config"]
    big = json.loads((resolve_full("qwen-base").model.config_path).read_text())["vision_config"]
    assert all(vision["num_heads"] % tp == 0 for tp in SCALABLE_TPS)
    assert all(vision["intermediate_size"] % tp == 0 for tp in SCALABLE_TPS)
    assert vision["hidden_size"] // vision["num_heads"] == big["hidden_size"] // big["num_heads"] == 72


def test_the_generated_vision_tower_has_those_heads():
    """transformers' own Qwen3.5 module (what save_pretrained writes), where the venv has it."""
    pytest.importorskip("transformers", reason="transformers is SGLang's dependency, not the kit's")
    shapes = tiny_qwen3_5.tensor_shapes()
    hidden = tiny_qwen3_5.CONFIG["vision_config"]["hidden_size"]
    assert shapes["model.visual.blocks.0.attn.qkv.weight"] == (3 * hidden, hidden)
    assert shapes["model.visual.blocks.0.mlp.linear_fc1.weight"][0] % 4 == 0


def test_a_cpu_rehearsal_at_tp_4_binds_four_groups_and_says_they_are_shared():
    r = resolve_full("tiny-qwen", overrides=["tp=4"])
    assert r.spec.env[BIND] == "0|1|0|1"
    assert any(n.startswith("cpu_threads_bind: 2 group(s) for 4 ranks") for n in r.spec.notes)
    assert resolve("tiny-qwen").env[BIND] == "0|1"  # the profile's own TP: as written


def test_too_few_bind_groups_set_through_env_are_refused_with_the_fix():
    report = validate("tiny-qwen", overrides=["tp=4", f"env.{BIND}=0|1"])
    (finding,) = [f for f in report.findings if f.id == "cpu-bind-groups"]
    assert not report.ok and finding.severity == "error"
    assert finding.fix == f"one group per rank: --set env.{BIND}=0|1|0|1"
    assert "numa_utils.py" in finding.source


def test_a_vision_split_is_refused_on_a_gpu_with_the_dp_encoder_as_the_other_fix():
    # The tiny model: 4 vision heads, so TP 3 breaks them (and the text heads).
    report = validate("qwen-tiny", overrides=["tp=3"])
    vision = next(f for f in report.findings if f.id == "tp-vision-heads")
    assert vision.severity == "error" and "--mm-enable-dp-encoder" in vision.fix
    assert "attention/vision.py" in vision.source
