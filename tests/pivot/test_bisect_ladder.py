"""The bisect ladder over fake runners (no Docker): which rung fails, which change turns it green, the
budget, Ctrl-C; and the rungs and changes the real catalog gives."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit.errors import InputError
from kit.pivot.bisect import (
    RUNGS,
    Budget,
    BudgetSpent,
    Rung,
    Trial,
    Variant,
    apply_change,
    budget_alarm,
    climb,
    fix_commands,
    load_changes,
    plan_rungs,
    previous_image,
    run_bisect,
    summarise,
)

CHANGES = load_changes()
CHANGE = {c.id: c for c in CHANGES}
TITLES = [c.title for c in CHANGES]


def fake_rungs(same_target: bool = False) -> tuple[Rung, ...]:
    return tuple(
        Rung(name, "t", "img", same_as="base" if same_target and name == "target" else None) for name in RUNGS
    )


def apply_everywhere(rung: Rung, change) -> Variant | str:
    """Every change applies wherever the ladder data says it may."""
    if change is not None and rung.name not in change.rungs:
        return "applies elsewhere"
    return Variant(rung, change, rung.target, rung.image, (*rung.overrides, *(change.set if change else ())))


class World:
    """Which (rung, change) runs are green; records every run."""

    def __init__(self, failing: dict[str, set[str]]):
        self.failing = failing  # rung -> labels that stay red ('as configured' and change titles)
        self.runs: list[tuple[str, str]] = []

    def __call__(self, variant: Variant) -> Trial:
        self.runs.append((variant.rung.name, variant.label))
        red = variant.label in self.failing.get(variant.rung.name, set())
        verdicts = {"doctor": ("pass", "fail"), "preflight": ("ok", "hung")}
        green, bad = verdicts.get(variant.rung.name, ("ready", "hung"))
        return Trial(variant.rung.name, variant.label, bad if red else green, phase="init" if red else None,
                     exit_code=4 if red else 0, diagnostics="/runs/x" if red else None)  # fmt: skip


def run_ladder(world: World, **kwargs):
    trials, found = climb(
        fake_rungs(kwargs.pop("same_target", False)),
        CHANGES,
        world,
        budget=kwargs.pop("budget", Budget(None)),
        apply=apply_everywhere,
        **kwargs,
    )
    return summarise("t", "img", trials, found, 1.0, None)


def test_all_green_runs_each_rung_once_and_exits_0():
    world = World({})
    result = run_ladder(world)
    assert result.verdict == "green" and result.exit_code == 0
    assert world.runs == [(r, "as configured") for r in RUNGS]


def test_the_first_failing_rung_is_named_and_the_first_green_change_ends_the_ladder():
    world = World({"preflight": {"as configured"}})
    result = run_ladder(world)
    assert (result.failing_rung, result.failing_verdict, result.failing_phase) == (
        "preflight",
        "hung",
        "init",
    )
    assert result.fix == "NCCL_P2P_DISABLE=1" and result.verdict == "fixed" and result.exit_code == 4
    assert world.runs == [
        ("doctor", "as configured"),
        ("preflight", "as configured"),
        ("preflight", "NCCL_P2P_DISABLE=1"),
    ]
    assert result.bundle == "/runs/x"


def test_changes_are_tried_one_at_a_time_in_the_ladders_order_until_one_is_green():
    still_red = {"as configured", "NCCL_P2P_DISABLE=1", "NCCL_CUMEM_ENABLE=0", "--disable-custom-all-reduce"}
    world = World({"base": still_red})
    result = run_ladder(world)
    tried = [label for rung, label in world.runs if rung == "base"]
    assert tried == [
        "as configured",
        "NCCL_P2P_DISABLE=1",
        "NCCL_CUMEM_ENABLE=0",
        "--disable-custom-all-reduce",
        "CUDA graphs off",
    ]
    assert result.fix == "CUDA graphs off"
    assert "target" not in {rung for rung, _ in world.runs}  # the ladder stopped at base


def test_on_the_target_rung_mtp_off_is_known_from_the_base_rung_and_the_ladder_looks_for_one_that_keeps_mtp():
    world = World({"target": {"as configured", "NCCL_P2P_DISABLE=1"}})
    result = run_ladder(world)
    rows = [(t.rung, t.change, t.verdict) for t in result.trials if t.rung == "target"]
    assert rows[:3] == [
        ("target", "as configured", "hung"),
        ("target", "MTP off", "known"),
        ("target", "NCCL_P2P_DISABLE=1", "hung"),
    ]
    assert ("target", "MTP off") not in world.runs  # no run for what the base rung proved
    assert result.also_green == ("MTP off",) and result.fix == "NCCL_CUMEM_ENABLE=0"


def test_when_only_mtp_off_helps_the_report_says_so():
    world = World({"target": {"as configured", *TITLES} - {"MTP off"}})
    result = run_ladder(world)
    assert result.verdict == "fixed" and result.fix is None and result.also_green == ("MTP off",)


def test_nothing_helps_is_not_fixed_with_the_failing_verdicts_exit_code():
    world = World({"base": {"as configured", *TITLES}})
    result = run_ladder(world)
    assert result.verdict == "not fixed" and result.fix is None and result.exit_code == 4


def test_a_failing_doctor_stops_the_ladder_without_launch_changes():
    world = World({"doctor": {"as configured"}})
    result = run_ladder(world)
    assert world.runs == [("doctor", "as configured")]
    assert result.failing_rung == "doctor" and [t.verdict for t in result.trials] == ["fail", "n/a"]


def test_a_target_identical_to_base_is_skipped():
    world = World({})
    result = run_ladder(world, same_target=True)
    assert [t.verdict for t in result.trials][-1] == "skipped"
    assert ("target", "as configured") not in world.runs


def test_start_at_skips_the_rungs_below():
    world = World({})
    run_ladder(world, start_at="base")
    assert [rung for rung, _ in world.runs] == ["base", "target"]


def test_an_interrupted_run_stops_the_ladder_with_130():
    def interrupted(variant: Variant) -> Trial:
        if variant.rung.name == "preflight":
            raise KeyboardInterrupt
        return Trial(variant.rung.name, variant.label, "pass")

    trials, found = climb(fake_rungs(), CHANGES, interrupted, budget=Budget(None), apply=apply_everywhere)
    result = summarise("t", "img", trials, found, 1.0, None)
    assert result.verdict == "interrupted" and result.exit_code == 130
    assert [t.verdict for t in result.trials] == ["pass", "interrupted"]


def test_a_spent_budget_stops_before_the_next_run_and_is_5():
    clock = iter([0.0, 0.0, 100.0, 100.0, 100.0]).__next__
    world = World({})
    trials, found = climb(
        fake_rungs(), CHANGES, world, budget=Budget(10, clock=clock), apply=apply_everywhere
    )
    result = summarise("t", "img", trials, found, 100.0, 10)
    assert result.verdict == "budget" and result.exit_code == 5 and len(world.runs) == 1
    assert "budget of 10 s ran out" in result.notes[0]


def test_the_budget_alarm_interrupts_a_run_in_progress():
    budget = Budget(0.3)
    started = time.monotonic()
    with pytest.raises(BudgetSpent), budget_alarm(budget):
        time.sleep(5)
    assert budget.spent and time.monotonic() - started < 2


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(RUNGS), st.sets(st.sampled_from(["as configured", *TITLES]))))
def test_the_report_names_the_lowest_red_rung_and_the_first_green_change_in_order(failing):
    world = World(failing)
    result = run_ladder(world)
    red = [r for r in RUNGS if "as configured" in failing.get(r, set())]
    if not red:
        assert result.verdict == "green" and result.failing_rung is None
        return
    rung = red[0]
    assert result.failing_rung == rung
    assert all(r != rung or label in failing[rung] or label != "as configured" for r, label in world.runs)
    usable = [c.title for c in CHANGES if rung in c.rungs and rung != "doctor"]
    if rung == "target":
        usable = [t for t in usable if t != "MTP off"]  # known from base, never run
    greens = [t for t in usable if t not in failing[rung]]
    assert result.fix == (greens[0] if greens else None)
    # every rung below the failing one ran once, as configured, and passed
    assert [r for r, label in world.runs if r != rung] == list(RUNGS[: RUNGS.index(rung)])


# -- the real catalog ---------------------------------------------------------------------------------


def test_tiny_has_one_launch_rung_and_cpu_changes():
    rungs = plan_rungs("tiny", None, ())
    assert [r.name for r in rungs] == list(RUNGS)
    assert rungs[3].same_as == "base"  # no MTP: base and target launch the same
    base = rungs[2]
    found = {c.id: apply_change(base, c, image_built=lambda ref: True) for c in CHANGES}
    assert found["cuda-graphs-off"] == "CUDA graphs are already off"
    assert found["attention-backend"].overrides == ("attention_backend=torch_native",)
    assert found["previous-image"] == "no older cpu image than sglang-0.5.23-cpu"


def test_qwen_mtp_climbs_from_qwen_base_and_the_previous_image_needs_building():
    rungs = plan_rungs("qwen-mtp", None, ("mem_fraction=0.75",))
    base, target = rungs[2], rungs[3]
    assert base.target == "qwen-base" and base.overrides == ("mem_fraction=0.75",) and target.same_as is None
    assert previous_image("sglang-0.5.23-cu130-sm120") == "sglang-0.5.10.post1-cu129-sm120"
    built = apply_change(target, CHANGES[-1], image_built=lambda ref: True)
    assert built.image == "sglang-0.5.10.post1-cu129-sm120"
    assert "is not built" in apply_change(target, CHANGES[-1], image_built=lambda ref: False)
    custom = apply_change(target, CHANGE["no-custom-all-reduce"], image_built=lambda ref: True, nvlink=True)
    assert custom.overrides[-1] == 'extra_args=["--disable-custom-all-reduce"]'
    mtp = apply_change(base, CHANGES[0], image_built=lambda ref: True)
    assert mtp == "applies to target"


def test_every_applied_change_resolves_to_a_launch_with_that_change():
    from kit.launch import resolve

    for target in ("tiny", "qwen-mtp"):
        for rung in plan_rungs(target, None, ()):
            if rung.name == "doctor":
                continue
            for change in CHANGES:
                variant = apply_change(rung, change, image_built=lambda ref: True, nvlink=True)
                if not isinstance(variant, Variant):  # does not apply, or SGLang already does it
                    continue
                spec = resolve(variant.target, image=variant.image, overrides=variant.overrides)
                before = resolve(rung.target, image=rung.image, overrides=rung.overrides)
                assert spec.argv != before.argv or spec.env != before.env or spec.image != before.image, (
                    change.id
                )


def test_fix_commands_are_the_green_launch_and_the_ladder_again():
    rung = Rung("preflight", "tiny", "sglang-0.5.23-cpu")
    variant = Variant(rung, CHANGES[1], "tiny", "sglang-0.5.23-cpu", ("env.NCCL_P2P_DISABLE=1",))
    assert fix_commands("tiny", variant, "sglang-0.5.23-cpu") == (
        "kit preflight tiny --set env.NCCL_P2P_DISABLE=1",
        "kit bisect tiny --set env.NCCL_P2P_DISABLE=1",
    )
    other = Variant(rung, CHANGES[1], "tiny", "pivot-test", ("env.NCCL_P2P_DISABLE=1",))
    assert fix_commands("tiny", other, "sglang-0.5.23-cpu")[1] == (
        "kit bisect tiny --image pivot-test --set env.NCCL_P2P_DISABLE=1"
    )


def test_bad_input_is_an_input_error_before_anything_runs():
    with pytest.raises(InputError, match="--from"):
        run_bisect("tiny", start_at="middle")
    with pytest.raises(InputError, match="--budget"):
        run_bisect("tiny", budget_s=0)
    with pytest.raises(InputError, match="--fault"):
        run_bisect("qwen-base", fault="hang-p2p")
    with pytest.raises(InputError, match="target"):
        run_bisect("nope")
