"""`--set KEY=VALUE`: dotted keys into the profile, TOML values, every mistake one line naming the key."""

from __future__ import annotations

import pytest

from kit.catalog import apply_overrides, parse_override, profile_with_overrides
from kit.catalog._overrides import parse_value
from kit.errors import InputError
from kit.launch import resolve, resolve_full

BASE = {"tp": 4, "timing": {"deadlines": {"init": 1}}, "speculative": {"num_steps": 3}}


@pytest.mark.parametrize(
    ("text", "value"),
    [("2", 2), ("0.85", 0.85), ("true", True), ('["a", "b"]', ["a", "b"]), ("qwen3", "qwen3"), ("0|1", "0|1"),
     ("0.0.0.0", "0.0.0.0"), ("16g", "16g"), ('"quoted"', "quoted")],
)  # fmt: skip
def test_values_are_toml_else_strings(text, value):
    assert parse_value(text) == value


def test_dotted_keys_reach_nested_tables():
    out = apply_overrides(
        BASE, ["speculative.num_steps=2", "timing.deadlines.load=99", "env.NCCL_P2P_DISABLE=1"]
    )
    assert out["speculative"]["num_steps"] == 2
    assert out["timing"]["deadlines"] == {"init": 1, "load": 99}
    assert out["env"] == {"NCCL_P2P_DISABLE": "1"}  # env values stay strings
    assert BASE["speculative"]["num_steps"] == 3  # the input is not changed


def test_none_resets_a_key_to_its_default():
    assert "speculative" not in apply_overrides(BASE, ["speculative=none"])


def test_later_overrides_win():
    assert apply_overrides(BASE, ["tp=2", "tp=8"])["tp"] == 8


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("tp", "--set tp: expected KEY=VALUE"),
        ("=3", "--set =3: expected KEY=VALUE"),
        ("speculative..num_steps=2", "--set speculative..num_steps: empty part"),
        ("mamba=no_buffer", "--set mamba: unknown key (did you mean mamba_cache?"),
        ("speculative.steps=2", "--set speculative.steps: unknown key (did you mean num_steps"),
        ("tp.x=2", "--set tp.x: 'tp' is a value, not a table"),
        ("env.A.B=1", "--set env.A.B: 'env' holds plain values"),
        ("extends=base", "--set extends: unknown key"),
    ],
)
def test_bad_keys_are_input_errors(item, expected):
    with pytest.raises(InputError) as info:
        apply_overrides(BASE, [item])
    assert info.value.one_line().startswith(expected)


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (
            "mamba_cache=none_buffer",
            "--set mamba_cache: 'none_buffer' is not one of the values (give one of auto, no_buffer,",
        ),
        ("tp=0", "--set tp: must be greater than 0 (got 0) (give a whole number, e.g. --set tp=4)"),
        ("tp=four", "--set tp: 'four' is not a whole number (give one, e.g. --set tp=4)"),
        # strict: TOML reads these as a bool, a float and nan; none is a whole or finite number
        ("tp=true", "--set tp: 'true' is not a whole number"),
        ("context_length=1e21", "--set context_length: '1e21' is not a whole number"),
        ("mem_fraction=nan", "--set mem_fraction: 'nan' is not a finite number"),
        ("timing.deadlines.init=inf", "--set timing.deadlines.init: 'inf' is not a finite number"),
        ("env.A=1\nExecStartPre=/bin/true", "--set env.A: a control character ('\\n') in the value"),
        ("nosuch=1", "--set nosuch: unknown key (did you mean nnodes?"),
        ("speculative.num_steps=2", "--set: speculative.eagle_topk: missing"),
        ("env.1BAD=x", "--set: env: '1BAD' is not an environment variable name"),
    ],
)
def test_bad_values_name_the_key(item, expected):
    with pytest.raises(InputError) as info:
        profile_with_overrides({"timing": _TIMING}, [item])
    assert info.value.one_line().startswith(expected)


_TIMING = {
    "deadlines": {"init": 1, "load": 1, "memory": 1, "capture": 1, "warmup": 1, "first_token": 1},
    "stall_windows": {"init": 1, "load": 1, "memory": 1, "capture": 1, "warmup": 1},
}


def test_parse_override_splits_on_the_first_equals():
    assert parse_override('extra_args=["--x=1"]') == (("extra_args",), '["--x=1"]')


def test_overrides_apply_before_the_dialect():
    r = resolve_full("qwen-mtp", image="sglang-0.5.10.post1-cu129-sm120", overrides=["mamba_cache=no_buffer"])
    # An explicit choice is never 'fixed' by a companion: it reaches SGLang as written.
    assert r.spec.argv[r.spec.argv.index("--mamba-scheduler-strategy") + 1] == "no_buffer"
    assert "SGLANG_ENABLE_SPEC_V2" not in r.spec.env
    assert r.translation.facts["mamba_cache"] == "no_buffer"


def test_speculative_can_be_switched_off():
    spec = resolve("qwen-mtp", overrides=["speculative=none"])
    assert not any(arg.startswith("--speculative") for arg in spec.argv)
