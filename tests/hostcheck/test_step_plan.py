"""The step table as data (kit/hostcheck/steps.toml, plan.py): the order and limits the bash runner
gets, KIT_CHECK_STEPS's choice, and the table held to the runner's registry and the device budget."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kit.hostcheck.plan import PlannedStep, load_steps, plan_lines, select
from kit.hostcheck.runner import STEPS

ROOT = Path(__file__).resolve().parents[2]
# The device command of docs/gpu-host-check.md.
DEVICE_STEPS = "wheels,import,env,watch-spin,watch-compile,watch-quiet,ties"


def test_the_table_is_the_runners_steps_in_its_order():
    table = load_steps()
    assert [s.name for s in table] == list(STEPS)
    assert table[0] == PlannedStep("wheels", 60, (), host_packages_only=True)
    assert [s.name for s in table if s.host_packages_only] == ["wheels"]


def test_each_steps_own_limit_fits_inside_what_the_runner_gives_it():
    """A step's own time limit (its args) ends before `timeout` kills it, so it records its verdict."""
    own = {"--watch-limit", "--pytest-limit", "--ties-limit"}
    for step in load_steps():
        pairs = dict(zip(step.args[::2], step.args[1::2], strict=True))
        for flag in own & pairs.keys():
            assert float(pairs[flag]) < step.limit, (step.name, flag)


def test_the_device_commands_steps_fit_its_budget():
    chosen = select(load_steps(), DEVICE_STEPS)
    assert [s.name for s in chosen] == DEVICE_STEPS.split(",")
    assert sum(s.limit for s in chosen) == 590  # limits are ceilings: the 420 s budget cuts the last ones


def test_kit_check_steps_keeps_the_tables_order_and_ignores_unknown_names():
    table = load_steps()
    assert select(table, "") == table
    assert [s.name for s in select(table, "ties,import,no-such-step")] == ["import", "ties"]
    assert select(table, "no-such-step") == []


def test_plan_lines_are_what_the_bash_runner_splits_on_tabs():
    lines = plan_lines(select(load_steps(), "wheels,watch-hang"))
    assert lines == ["wheels\t60\thost", "watch-hang\t100\tkit\t--stall\t20\t--watch-limit\t75"]
    done = subprocess.run(
        [sys.executable, "-m", "kit.hostcheck", "plan", "--only", "wheels,watch-hang"],
        capture_output=True, text=True, timeout=60, cwd=ROOT, check=True,
    )  # fmt: skip
    assert done.stdout.splitlines() == lines


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[[step]]\nname = "a"\nlimit = 0\n', "limit must be a positive whole number"),
        ('[[step]]\nname = "a"\nlimit = 1.5\n', "limit must be a positive whole number"),
        ('[[step]]\nname = "a"\nlimit = 5\nargs = ["a\\tb"]\n', "args must be non-empty strings"),
        ('[[step]]\nname = "a"\nlimit = 5\n[[step]]\nname = "a"\nlimit = 6\n', "listed twice"),
    ],
)
def test_a_bad_table_is_refused_with_the_field_named(text, says):
    with pytest.raises(ValueError, match=says):
        load_steps(text)
