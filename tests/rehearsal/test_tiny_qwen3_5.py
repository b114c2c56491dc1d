"""The tiny production-architecture target: the 122B's config keys, qwen-base's flags, SGLang's tensor names.

The pure tests read data files. The `slow` ones run the image's SGLang release in a `kit check`
venv (created on first use, as `kit check` does): its own argument parser on both profiles, and its
own Qwen3.5 model classes loading a freshly generated checkpoint (sglang_loads_tiny_qwen3_5.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kit.check import check, ensure_venv
from kit.launch import resolve, resolve_full
from kit.rehearsal import tiny_qwen3_5
from kit.validate import validate

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "kit" / "catalog" / "models"
GENERATOR = ROOT / "kit" / "rehearsal" / "tiny_qwen3_5.py"
SHIMS = ROOT / "kit" / "rehearsal" / "shims"
LOADER = Path(__file__).resolve().parent / "sglang_loads_tiny_qwen3_5.py"
TARGETS = {"qwen-tiny": "qwen-base", "qwen-tiny-mtp": "qwen-mtp"}


def _keys(config: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in config.items():
        keys.add(prefix + key)
        if isinstance(value, dict):
            keys |= _keys(value, f"{prefix}{key}.")
    return keys


def test_the_catalog_config_is_what_the_generator_writes():
    assert json.loads((CATALOG / "qwen3.5-tiny.config.json").read_text()) == tiny_qwen3_5.CONFIG


def test_the_config_has_exactly_the_122b_keys_and_its_per_head_sizes():
    big = json.loads((CATALOG / "qwen3.5-122b-a10b.config.json").read_text())
    tiny = tiny_qwen3_5.CONFIG
    assert _keys(tiny) == _keys(big)
    assert (tiny["architectures"], tiny["model_type"]) == (big["architectures"], big["model_type"])
    same = (
        "model_type", "architectures", "head_dim", "linear_key_head_dim", "linear_value_head_dim",
        "linear_conv_kernel_dim", "full_attention_interval", "partial_rotary_factor", "rope_parameters",
        "attn_output_gate", "hidden_act", "mtp_num_hidden_layers", "max_position_embeddings",
    )  # fmt: skip
    text, big_text = tiny["text_config"], big["text_config"]
    assert {k: text[k] for k in same} == {k: big_text[k] for k in same}
    # The ratios the kernels specialise on: value heads per key head, query heads per KV head.
    assert text["linear_num_value_heads"] // text["linear_num_key_heads"] == 4
    assert big_text["linear_num_value_heads"] // big_text["linear_num_key_heads"] == 4
    assert text["layer_types"].count("full_attention") * 4 == text["num_hidden_layers"]


def test_the_catalog_facts_are_the_configs():
    facts = resolve_full("qwen-tiny").model.facts
    text = tiny_qwen3_5.CONFIG["text_config"]
    assert (facts.architecture, facts.model_type, facts.hybrid) == (
        tiny_qwen3_5.CONFIG["architectures"][0], tiny_qwen3_5.CONFIG["model_type"], "gdn",
    )  # fmt: skip
    assert (facts.layers, facts.full_attention_layers) == (
        text["num_hidden_layers"], text["layer_types"].count("full_attention"),
    )  # fmt: skip
    assert (facts.hidden_size, facts.attention_heads, facts.kv_heads, facts.head_dim) == (
        text["hidden_size"], text["num_attention_heads"], text["num_key_value_heads"], text["head_dim"],
    )  # fmt: skip
    assert (facts.linear_key_heads, facts.linear_value_heads, facts.linear_key_head_dim) == (
        text["linear_num_key_heads"], text["linear_num_value_heads"], text["linear_key_head_dim"],
    )  # fmt: skip
    assert (facts.experts, facts.experts_per_token, facts.mtp_layers) == (
        text["num_experts"], text["num_experts_per_tok"], text["mtp_num_hidden_layers"],
    )  # fmt: skip
    assert facts.max_context_length == text["max_position_embeddings"]


def _without(argv: tuple[str, ...], flags: tuple[str, ...]) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in flags:
            skip = True
        else:
            out.append(arg)
    return out


@pytest.mark.parametrize("tiny", sorted(TARGETS))
def test_the_tiny_targets_launch_with_the_production_flags(tiny):
    """Flag for flag the production launch at the same TP; only the model (and its revision) differ,
    and SGLang's soft watchdog, set from each profile's own longest stall window (kit/launch.py)."""
    production = resolve(TARGETS[tiny])
    spec = resolve(tiny, overrides=[f"tp={production.ranks}"])
    assert (spec.image, spec.gpus, spec.ranks) == (production.image, 4, 4)
    ignored = ("--model-path", "--revision", "--soft-watchdog-timeout")
    assert _without(spec.argv, ignored) == _without(production.argv, ignored)
    assert spec.env == {k: v for k, v in production.env.items() if k != "HF_HUB_OFFLINE"}
    assert spec.model_path == "/opt/kit/models/qwen-tiny"


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("tiny", sorted(TARGETS))
def test_every_tp_the_target_offers_validates_and_takes_as_many_gpus(tiny, tp):
    report = validate(tiny, overrides=[f"tp={tp}"])
    assert report.ok, [f.message for f in report.findings if f.severity == "error"]
    assert resolve(tiny, overrides=[f"tp={tp}"]).gpus == tp
    assert report.argv[report.argv.index("--tp-size") + 1] == str(tp)


def test_a_tp_the_heads_do_not_divide_is_refused():
    report = validate("qwen-tiny", overrides=["tp=3"])
    assert not report.ok
    assert {"tp-kv-heads", "tp-linear-heads"} <= {f.id for f in report.findings}


@pytest.mark.slow
@pytest.mark.parametrize("tiny", sorted(TARGETS))
def test_the_releases_own_parser_accepts_both_profiles(tiny):
    for tp in (1, 4):
        result = check(tiny, overrides=[f"tp={tp}"])
        assert result.accepted, f"{result.error_type}: {result.error}"
        assert result.sglang == resolve_full(tiny).manifest.pins.sglang
        assert result.resolved["tp_size"] == tp
    print(f"\n{tiny}: accepted by SGLang {result.sglang}'s parser at TP 1 and 4 ({result.seconds} s each)")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """SGLang's Qwen3.5 classes (the target image's release) loading a freshly generated checkpoint."""
    release = resolve_full("qwen-tiny").manifest.pins.sglang
    venv, _ = ensure_venv(release)
    python = str(venv / "bin" / "python")
    model = tmp_path_factory.mktemp("qwen-tiny") / "model"
    subprocess.run([python, str(GENERATOR), str(model)], check=True, capture_output=True, timeout=600)
    done = subprocess.run(
        [python, str(LOADER), str(model), str(SHIMS), str(ROOT / "kit" / "check")],
        capture_output=True, text=True, timeout=600, cwd=model.parent,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("KIT_LOAD_RESULT ")]
    assert lines, f"the loader gave no result (exit {done.returncode}): {done.stderr[-2000:]}"
    return release, json.loads(lines[-1].split(" ", 1)[1])


def _elements(shape: list[int]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


@pytest.mark.slow
def test_sglang_loads_every_tensor_into_the_production_model_class(loaded):
    release, result = loaded
    main = result["classes"]["Qwen3_5MoeForConditionalGeneration"]
    assert result["sglang"] == release
    assert main["error"] is None and main["warnings"] == [], (main["error"], main["warnings"])
    assert main["unloaded"] == [], "parameters no checkpoint tensor reached"
    # And no tensor is left over: the checkpoint's non-MTP elements are exactly the model's.
    checkpoint = result["checkpoint"]
    assert (
        sum(_elements(s) for n, s in checkpoint.items() if not n.startswith("mtp.")) == main["param_elements"]
    )
    assert any(n.startswith("visual.") for n in main["params"])  # the vision tower is built and loaded
    print(f"\nSGLang {release}: {len(checkpoint)} tensors, {main['param_elements']} elements, all loaded")


@pytest.mark.slow
def test_sglang_loads_the_mtp_head_from_the_mtp_tensors(loaded):
    _, result = loaded
    mtp = result["classes"]["Qwen3_5ForCausalLMMTP"]
    assert mtp["error"] is None and mtp["warnings"] == [], (mtp["error"], mtp["warnings"])
    # lm_head is the target's at run time (the draft worker's set_embed_and_head), not a checkpoint tensor.
    assert mtp["unloaded"] == ["lm_head.weight"]
    checkpoint = result["checkpoint"]
    own = sum(_elements(s) for n, s in checkpoint.items() if n.startswith("mtp."))
    embed = _elements(checkpoint["model.language_model.embed_tokens.weight"])
    assert own + embed == mtp["param_elements"] - _elements(mtp["params"]["lm_head.weight"])
