"""GPU-shaped start-ups replayed through the real watcher (see replay.py and docs/scenarios.md).

run_scenario("init-hang-tp4")   -> ScenarioRun: the kit's UpResult and each expectation checked
list_scenarios()                -> the names of the scenario files in this folder
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kit.launch import resolve
from kit.logs.limits import limits_from_spec
from kit.runtime.nvml import GpuInventory
from kit.scenarios.replay import ReplaySource, Scenario, list_scenarios, load_scenario
from kit.startup.result import UpResult
from kit.startup.up import follow_source
from kit.startup.watch import Progress

__all__ = [
    "Expectation",
    "ReplaySource",
    "Scenario",
    "ScenarioRun",
    "list_scenarios",
    "load_scenario",
    "run_scenario",
]


class ScenarioOver(Exception):
    """The scenario's time ran out before the watcher reached a verdict."""


@dataclass(frozen=True)
class Expectation:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class ScenarioRun:
    scenario: str
    title: str
    result: UpResult | None
    verdict_at_s: float | None  # scenario time of the verdict
    latency_s: float | None  # HUNG: verdict time minus (last progress + stall window)
    expectations: tuple[Expectation, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return all(e.ok for e in self.expectations)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


class _BoundedReplay(ReplaySource):
    """Stops the watch when the scenario's time is up (a real container would just go on)."""

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        if self.finished():
            raise ScenarioOver


def run_scenario(name: str, *, on_progress: Callable[[Progress], None] | None = None) -> ScenarioRun:
    """Replay a scenario through `follow_source` (kit up's own code) and check what it expects."""
    scenario = load_scenario(name)
    spec = resolve(scenario.target, image=scenario.image)
    limits = limits_from_spec(spec)
    source = _BoundedReplay(scenario)
    inventory = source.gpus.inventory() if source.gpus else GpuInventory(error="the scenario has no GPUs")
    try:
        result = follow_source(
            source,
            spec,
            limits,
            session=f"replay-{scenario.name}",
            on_progress=on_progress,
            inventory=inventory,
        )
    except ScenarioOver:
        failed = Expectation(
            "a verdict", False, f"no verdict within the scenario's {scenario.duration_s:.0f} s"
        )
        return ScenarioRun(scenario.name, scenario.title, None, None, None, (failed,))
    verdict_at = source.clock()
    expect = scenario.expect
    latency = None
    if result.verdict == "hung" and expect.quiet_from is not None:
        window = limits.stall_window_s.of(result.phase or "launch")
        latency = round(verdict_at - (expect.quiet_from + window), 2)
    checks = _check(scenario, result, latency)
    return ScenarioRun(scenario.name, scenario.title, result, round(verdict_at, 2), latency, tuple(checks))


def _check(scenario: Scenario, result: UpResult, latency: float | None) -> list[Expectation]:
    expect = scenario.expect
    checks = [
        Expectation("verdict", result.verdict == expect.verdict, f"{result.verdict} (want {expect.verdict})")
    ]
    if expect.phase is not None:
        checks.append(
            Expectation("phase", result.phase == expect.phase, f"{result.phase} (want {expect.phase})")
        )
    if expect.verdict == "hung" and expect.quiet_from is not None:
        ok = latency is not None and 0 <= latency <= expect.within_s
        checks.append(
            Expectation(
                "verdict latency",
                ok,
                f"{latency} s after the stall window (want 0 .. {expect.within_s:g} s)",
            )
        )
    if expect.stuck is not None:
        got = tuple(result.stuck_ranks)
        checks.append(Expectation("stuck ranks", got == expect.stuck, f"{', '.join(got) or '-'}"))
    if expect.causes_first:
        ids = [c.id for c in result.likely_causes]
        lead = ids[: len(expect.causes_first)]
        checks.append(
            Expectation(
                "causes first",
                set(lead) == set(expect.causes_first),
                f"{', '.join(ids[:4]) or '-'} (want {', '.join(expect.causes_first)} first)",
            )
        )
    if expect.causes_absent:
        offered = {c.id for c in result.likely_causes}
        wrong = sorted(offered & set(expect.causes_absent))
        checks.append(
            Expectation(
                "causes ruled out", not wrong, f"{', '.join(wrong) or 'none'} offered (want none of them)"
            )
        )
    if expect.activity is not None:
        shape = result.activity.shape if result.activity is not None else None
        checks.append(Expectation("activity", shape == expect.activity, f"{shape} (want {expect.activity})"))
    if expect.survived is not None:
        got = len(result.survived_errors)
        checks.append(
            Expectation("errors survived", got == expect.survived, f"{got} (want {expect.survived})")
        )
    if expect.first_token_in is not None:
        checks.append(
            Expectation(
                "first token",
                result.first_token_in == expect.first_token_in and result.first_token_s is not None,
                f"in {result.first_token_in} after {result.first_token_s} s (want {expect.first_token_in})",
            )
        )
    if expect.attempt is not None:
        checks.append(
            Expectation(
                "attempt",
                result.attempt == expect.attempt and result.earlier_attempts == expect.earlier,
                f"{result.attempts or f'attempt {result.attempt}'} "
                f"(want attempt {expect.attempt} after {', '.join(expect.earlier) or 'none'})",
            )
        )
    for phase, (low, high) in expect.phases_s.items():
        spans = [s.elapsed_s for s in result.timeline if s.phase == phase and s.rank != "main"]
        took = max(spans, default=None)
        ok = took is not None and low <= took <= high
        checks.append(Expectation(f"{phase} took", ok, f"{took} s (want {low:g} .. {high:g} s)"))
    return checks
