"""The profile's timing as tracker limits, and command-line overrides of it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.errors import InputError
from kit.launch import resolve
from kit.logs.limits import STAGES, limits_from_spec, parse_limit_overrides


def test_limits_come_from_the_catalog_timing():
    spec = resolve("tiny")
    limits = limits_from_spec(spec)
    assert limits.stall_window_s.init == spec.timing.stall_windows["init"]
    assert limits.deadline_s.load == spec.timing.deadlines["load"]
    assert limits.deadline_s.first_token == spec.timing.deadlines["first_token"]
    assert limits.expected_ranks == spec.ranks == 2


def test_overrides_win_over_the_catalog():
    spec = resolve("tiny")
    limits = limits_from_spec(spec, deadlines={"init": 7.0}, stall_windows={"load": 3.0})
    assert limits.deadline_s.init == 7.0
    assert limits.stall_window_s.load == 3.0
    assert limits.stall_window_s.init == spec.timing.stall_windows["init"]


def test_parse_limit_overrides_reads_stage_equals_seconds():
    assert parse_limit_overrides(["init=30", "load=600.5"], "--deadline") == {"init": 30.0, "load": 600.5}


@pytest.mark.parametrize(
    "bad", ["init", "nope=3", "init=abc", "init=0", "init=-1", "=3", "init=nan", "init=inf", "init=1e308",
            "init=true", "init=1_000", "init=0x10"]
)  # fmt: skip
def test_bad_overrides_name_the_option_and_the_fix(bad):
    with pytest.raises(InputError) as info:
        parse_limit_overrides([bad], "--stall")
    assert info.value.field == "--stall"
    assert info.value.hint


@given(st.lists(st.text(max_size=20), max_size=4))
def test_any_override_text_parses_or_raises_input_error(values):
    try:
        parsed = parse_limit_overrides(values, "--deadline")
    except InputError:
        return
    assert set(parsed) <= set(STAGES)
    assert all(v > 0 for v in parsed.values())


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ("init", "--stall: 'init' is not STAGE=SECONDS (stages: launch, init,"),
        ("init=nan", "--stall: 'nan' is not a number of seconds (a finite number, e.g. init=600)"),
        ("load=0", "--stall: 0 is out of range (more than 0 and at most 604800, e.g. load=600)"),
    ],
)
def test_bad_overrides_are_worded_as_every_cli_value_is(raw, said):
    with pytest.raises(InputError) as info:
        parse_limit_overrides([raw], "--stall")
    assert info.value.one_line().startswith(said)


def test_the_same_parser_reads_preflights_steps():
    from kit.pivot.steps import ALL_STEPS

    assert parse_limit_overrides(["p2p=30", " sweep = 1.5 "], "--deadline", ALL_STEPS, kind="step") == {
        "p2p": 30.0,
        "sweep": 1.5,
    }
    with pytest.raises(InputError) as info:
        parse_limit_overrides(["load=30"], "--deadline", ALL_STEPS, kind="step")
    assert "'load=30' is not STEP=SECONDS (steps: launch, setup, init" in info.value.one_line()
