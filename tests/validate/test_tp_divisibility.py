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


def _expected_broken(
    config: dict, tp: int, dp_encoder: bool = False, *, language_only: bool = False, attn_dp: int = 1
) -> set[str]:
    """The dimensions SGLang would fail to split at model build, by hand from config.json."""
    text = config.get("text_config", config)
    vision = config.get("vision_config", {})
    broken = set()
    attn_tp = tp // attn_dp  # runtime_context.py derive_attn_tp_size: the attention heads' group
    if text["num_attention_heads"] % attn_tp:
        broken.add("tp-heads")  # qwen3_5.py assert total_num_heads % attn_tp_size == 0
    kv = text.get("num_key_value_heads", text["num_attention_heads"])
    if (attn_tp % kv) if attn_tp > kv else (kv % attn_tp):
        broken.add("tp-kv-heads")  # replicated when tp > kv: divide(tp_size, total_num_kv_heads)
    if text.get("linear_num_value_heads", attn_tp) % attn_tp:
        broken.add("tp-linear-heads")  # mamba_utils.py divide(num_heads, tp_world_size)
    if text.get("linear_num_key_heads", attn_tp) % attn_tp:
        broken.add("tp-linear-key-heads")  # qwen3_5.py num_k_heads // attn_tp_size, floored
    if text.get("num_experts"):
        if text["moe_intermediate_size"] % tp:
            broken.add("tp-moe-intermediate")
        if text.get("shared_expert_intermediate_size", tp) % tp:
            broken.add("tp-shared-expert-intermediate")
    elif text.get("intermediate_size", tp) % tp:
        broken.add("tp-mlp-intermediate")
    if vision and not dp_encoder and not language_only:
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


@settings(max_examples=160, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    target=st.sampled_from(list_targets()),
    tp=st.integers(1, 16),
    dp_encoder=st.booleans(),
    language_only=st.booleans(),
    attn_dp=st.sampled_from([1, 2, 4]),
    spelling=st.booleans(),
)
def test_validates_verdict_on_the_splits_agrees_with_the_model_config(
    target, tp, dp_encoder, language_only, attn_dp, spelling
):
    if tp % attn_dp:
        attn_dp = 1  # SGLang refuses a TP that attention-DP does not divide (parallel_hook.py)
    overrides = [f"tp={tp}"]
    added = ["--mm-enable-dp-encoder"] if dp_encoder else []
    added += ["--language-model-only"] if language_only else []
    if attn_dp > 1:  # 0.5.23's flag, or the deprecated spelling it turns into it
        added += (
            ["--attn-dp-size", str(attn_dp)]
            if spelling
            else ["--dp-size", str(attn_dp), "--enable-dp-attention"]
        )
    if added:
        extra = resolve_full(target).profile.extra_args
        overrides.append("extra_args=" + json.dumps([*extra, *added]))
    report = validate(target, overrides=overrides)
    found = _split_findings(report)
    assert set(found) == _expected_broken(
        _config(target), tp, dp_encoder, language_only=language_only, attn_dp=attn_dp
    )
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


def test_the_tiny_models_key_heads_refuse_tp_8_even_with_the_dp_encoder():
    """Issue 38: the 4 linear key heads of qwen-tiny split over 8 ranks (models/qwen3_5.py
    num_k_heads // attn_tp_size = 0), which the vision splits' DP encoder does not change."""
    from catalog_helpers import run_cli

    args = ["validate", "qwen-tiny", "--set", "tp=8", "--set", 'extra_args=["--mm-enable-dp-encoder"]']
    code, out, _ = run_cli(args)
    assert code == 1 and out.startswith("INVALID")
    assert "error tp-linear-key-heads: TP 8 does not divide the 4 linear-attention key heads" in out
    assert "4 // 8 = 0 whole linear-attention key heads" in out
    assert [line for line in out.splitlines() if line.startswith("error")] == [
        line for line in out.splitlines() if "tp-linear-key-heads" in line and line.startswith("error")
    ]


def test_attention_dp_narrows_the_heads_split_and_language_only_drops_the_tower():
    # qwen-tiny: 8 heads, 2 KV heads, 4 key heads, 4 vision heads. TP 8 with attention DP 4 splits the
    # attention over 2 ranks (all divide), the vision tower over 8 (4 heads: broken).
    wide = validate("qwen-tiny", overrides=["tp=8", 'extra_args=["--attn-dp-size", "4"]'])
    assert set(_split_findings(wide)) == {"tp-vision-heads"}  # its MLP: 576 over 8 divides
    bare = validate(
        "qwen-tiny", overrides=["tp=8", 'extra_args=["--attn-dp-size", "4", "--language-model-only"]']
    )
    assert set(_split_findings(bare)) == set()
    # Attention DP 2 leaves an attention-TP width of 4 over 2 KV heads: replicated, fine; TP 16 with
    # attention DP 2: 8 wide, over 4 key heads: broken, and named as the attention-TP width.
    narrow = validate(
        "qwen-tiny", overrides=["tp=16", 'extra_args=["--attn-dp-size", "2", "--language-model-only"]']
    )
    (keys,) = [f for f in narrow.findings if f.id == "tp-linear-key-heads"]
    assert keys.message.startswith("attention-TP 8 does not divide the 4 linear-attention key heads")
    assert "attention-TP width (tp / attn-dp-size) of 1, 2, 4" in keys.fix


def test_a_fetched_config_json_is_read_instead_of_the_catalogs(tmp_path):
    """qwen-base's catalog config estimates some keys; once `kit model fetch` has put the pinned
    snapshot in the HF cache, validate reads that file (and says so)."""
    r = resolve_full("qwen-base", overrides=[f"container.hf_cache={tmp_path}"])
    real = json.loads(r.model.config_path.read_text())
    real["text_config"]["linear_num_key_heads"] = 6  # a value no TP of 4 divides
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen3.5-122B-A10B" / "snapshots" / r.spec.hf_revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(real))
    report = validate("qwen-base", overrides=[f"container.hf_cache={tmp_path}"])
    (finding,) = [f for f in report.findings if f.id == "tp-linear-key-heads"]
    assert "6 linear-attention key heads" in finding.message
    assert f"the fetched config.json (Qwen/Qwen3.5-122B-A10B@{r.spec.hf_revision[:8]})" in finding.message
    assert validate("qwen-base").ok  # the catalog's own config: 16 key heads split over 4
