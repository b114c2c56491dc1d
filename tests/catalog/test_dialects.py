"""Dialects: one data file per SGLang range turns the same intent into that release's flags and env."""

from __future__ import annotations

import pytest

from kit.dialects import FACTS, INTENTS, list_dialects, load_dialect, translate
from kit.errors import InputError
from kit.launch import resolve, resolve_full

OLD = "sglang-0.5.10.post1-cu129-sm120"
NEW = "sglang-0.5.23-cu130-sm120"


def _value(argv, flag):
    return argv[argv.index(flag) + 1]


def test_every_dialect_file_loads_and_names_its_range():
    names = list_dialects()
    # One file per range of releases that behave alike (docs/conformance.md shows each boundary).
    assert names == [
        "sglang-0.5.10",
        "sglang-0.5.11",
        "sglang-0.5.13",
        "sglang-0.5.14",
        "sglang-0.5.16",
        "sglang-0.5.17",
        "sglang-0.5.19",
        "sglang-0.5.20",
        "sglang-0.5.21",
        "sglang-0.5.9",
    ]
    for name in names:
        dialect = load_dialect(name)
        assert dialect.name == name and dialect.sglang and dialect.about
        assert set(dialect.flags) <= set(INTENTS)


def test_mtp_on_0_5_10_gets_extra_buffer_and_spec_v2():
    spec = resolve("qwen-mtp", image=OLD)
    assert _value(spec.argv, "--mamba-scheduler-strategy") == "extra_buffer"
    assert "--mamba-radix-cache-strategy" not in spec.argv
    assert spec.env["SGLANG_ENABLE_SPEC_V2"] == "1"
    assert spec.dialect == "sglang-0.5.10"


def test_mtp_on_0_5_23_uses_the_renamed_flag_and_no_spec_v2():
    spec = resolve("qwen-mtp", image=NEW)
    assert _value(spec.argv, "--mamba-radix-cache-strategy") == "extra_buffer"
    assert "--mamba-scheduler-strategy" not in spec.argv
    assert "SGLANG_ENABLE_SPEC_V2" not in spec.env


@pytest.mark.parametrize("image", [OLD, NEW])
def test_the_model_cards_flags_on_every_release(image):
    spec = resolve("qwen-mtp", image=image)
    assert spec.argv[:5] == ("python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3.5-122B-A10B")
    for flag, value in [("--tp-size", "4"), ("--context-length", "262144"), ("--mem-fraction-static", "0.8"),
                        ("--reasoning-parser", "qwen3"), ("--speculative-algorithm", "NEXTN"),
                        ("--speculative-num-steps", "3"), ("--speculative-eagle-topk", "1"),
                        ("--speculative-num-draft-tokens", "4"), ("--watchdog-timeout", "1200"),
                        ("--soft-watchdog-timeout", "600")]:  # the longest stall window (load)  # fmt: skip
        assert _value(spec.argv, flag) == value
    assert (spec.device, spec.gpus, spec.ranks, spec.ipc_host) == ("cuda", 4, 4, True)
    assert spec.ulimits == {"memlock": -1, "stack": 67108864}
    assert (
        spec.hf_cache and spec.hf_cache.endswith("/.cache/huggingface") and not spec.hf_cache.startswith("~")
    )
    assert spec.pass_env == ("HF_TOKEN",)


def test_base_has_no_speculative_or_mamba_flags():
    for image in (OLD, NEW):
        argv = resolve("qwen-base", image=image).argv
        assert not any(a.startswith(("--speculative", "--mamba")) for a in argv)


def test_sm120_attention_backend_is_chosen_by_the_dialect_only_where_needed():
    # 0.5.10 accepts flashinfer for hybrid models on sm_120 and picks it itself (docs/conformance.md,
    # attention rows); only 0.5.9 needs triton written (tests/validate: test_0_5_9_needs_triton).
    assert "--attention-backend" not in resolve("qwen-base", image=OLD).argv
    assert "--attention-backend" not in resolve("qwen-base", image=NEW).argv
    # An explicit choice stays, and validate (not resolve) judges it.
    assert (
        _value(
            resolve("qwen-base", image=OLD, overrides=["attention_backend=fa3"]).argv, "--attention-backend"
        )
        == "fa3"
    )


def test_renamed_flags_in_extra_args_are_rewritten_and_removed_env_dropped():
    spec = resolve(
        "qwen-base",
        image=NEW,
        overrides=['extra_args=["--mamba-scheduler-strategy", "no_buffer"]', "env.SGLANG_ENABLE_SPEC_V2=1"],
    )
    assert spec.argv[-2:] == ("--mamba-radix-cache-strategy", "no_buffer")
    assert "SGLANG_ENABLE_SPEC_V2" not in spec.env
    assert any("dropped SGLANG_ENABLE_SPEC_V2" in note for note in spec.notes)
    assert any(
        "--mamba-scheduler-strategy is now --mamba-radix-cache-strategy (the old name is refused here)" in n
        for n in spec.notes
    )


def test_a_profiles_own_env_wins_over_a_companion():
    spec = resolve("qwen-mtp", image=OLD, overrides=["env.SGLANG_ENABLE_SPEC_V2=0"])
    assert spec.env["SGLANG_ENABLE_SPEC_V2"] == "0"


def test_translate_is_pure_and_keeps_booleans_apart_from_numbers():
    dialect = load_dialect("sglang-0.5.10")
    intent = {"model_path": "m", "device": "cuda", "tp": 1, "cuda_graph": True, "radix_cache": True,
              "mamba_cache": "auto", "speculative.algorithm": "NEXTN"}  # fmt: skip
    context = {"hybrid": "gdn", "capability": "12.0", "gpus": 1}
    first = translate(dialect, intent, context=context)
    assert first == translate(dialect, intent, context=context)
    assert first.intent["mamba_cache"] == "extra_buffer"  # 'auto' filled in by the companion
    assert first.env == {"SGLANG_ENABLE_SPEC_V2": "1"}
    assert "--disable-cuda-graph" not in first.args
    assert (
        translate(dialect, {**intent, "cuda_graph": False}, context=context).args.count(
            "--disable-cuda-graph"
        )
        == 1
    )


def test_dialect_schema_errors_name_the_file(tmp_path):
    (tmp_path / "sglang-9.toml").write_text(
        'name = "sglang-9"\nsglang = ">=9"\nabout = "x"\n[flags]\nmodel_pth = "--model-path"\n'
    )
    with pytest.raises(InputError) as info:
        load_dialect("sglang-9", tmp_path)
    assert info.value.one_line().startswith(
        f"{tmp_path / 'sglang-9.toml'}: flags: unknown intent 'model_pth'"
    )


def test_conditions_only_name_known_facts(tmp_path):
    (tmp_path / "d.toml").write_text(
        'name = "d"\nsglang = "x"\nabout = "x"\n[flags]\n[[rules]]\nid = "r"\nseverity = "error"\n'
        'when = { speculatve = true }\nmessage = "m"\nfix = "f"\n'
    )
    with pytest.raises(InputError) as info:
        load_dialect("d", tmp_path)
    assert "rules.0.when: unknown fact 'speculatve'" in info.value.one_line()
    assert "speculative" in FACTS


def test_unknown_dialect_lists_the_known_ones(tmp_path):
    with pytest.raises(InputError) as info:
        load_dialect("sglang-9.9")
    assert "known dialects: sglang-0.5.10, sglang-0.5.11" in info.value.one_line()


def test_resolved_keeps_what_validate_needs():
    r = resolve_full("qwen-mtp", image=OLD)
    assert r.manifest.pins.sglang == "0.5.10.post1"
    assert r.translation.applied == ("extra-buffer-spec-v2",)
    assert r.hardware and r.hardware.capability == "12.0"
