"""`kit smoke TARGET`: the smoke suite's checks from the command line, on one server start.

Same check functions as tests/smoke (kit.testing.checks, speculative, serving): init and first token
within deadlines, health, repeatable greedy answers, one structured-output request, one tool call;
for a speculative profile its greedy answer against the reference profile's and SGLang's acceptance
length against the floor; a serving window last. The planted-fault checks run only where the fault
switch exists (the CPU rehearsal image).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kit.errors import ExitCode
from kit.logs import PhaseLimits
from kit.runtime import server as runtime
from kit.spec import LaunchSpec
from kit.startup.overrun import DeadlinePolicy
from kit.startup.result import UpResult
from kit.startup.server import start_server
from kit.startup.up import follow_container, run_up
from kit.testing import checks, serving, speculative
from kit.testing.checks import CheckResult

# A smoke test exists to hold the start to the profile's deadlines: a passed one fails it (DEADLINE),
# where `kit up` reports it and follows on (kit/startup/overrun.py).
STRICT = DeadlinePolicy.VERDICT


@dataclass(frozen=True)
class SmokeReport:
    target: str
    image: str
    startup: str
    checks: tuple[CheckResult, ...]
    startup_exit_code: int = int(ExitCode.OK)  # the start's verdict, as `kit up` exits on it

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def exit_code(self) -> int:
        """As `kit up`: a start that did not reach READY exits with its verdict (CRASHED 1, HUNG 4,
        DEADLINE 5); after READY, any failed check is FAILED (1)."""
        if self.startup_exit_code != ExitCode.OK:
            return int(self.startup_exit_code)
        return int(ExitCode.OK if self.ok else ExitCode.FAILED)


def _not_ready(result: UpResult) -> CheckResult:
    return CheckResult("server ready", False, f"{result.verdict} in {result.phase}: {result.exception or ''}")


def _serving_checks(result: UpResult, spec: LaunchSpec, url: str, container, *, tool_call: bool, add) -> None:
    """The checks of one started server, in order, each reported as it ends (`add`)."""
    add([checks.init_within_deadline(result, spec)])
    if result.verdict != "ready":
        add([_not_ready(result)])
        return
    for check in (
        checks.first_token_chat,
        checks.first_token_generate,
        checks.health_generate,
        checks.greedy_repeatable,
        checks.structured_output,
    ):
        add([check(url, spec)])
    if tool_call:
        add([checks.tool_call_parsed(url, spec)])
    if speculative.references_wanted(spec):
        add([speculative.greedy_reference_recorded(url, spec)])
    if speculative.is_speculative(spec):
        add([speculative.greedy_matches_reference(url, spec), speculative.accept_length(url, spec)])
    add([serving.serving_window(url, spec, container)])  # last: it watches for a crash after the rest


def _own_start(spec: LaunchSpec, limits: PhaseLimits, check: Callable[[str, LaunchSpec], CheckResult]):
    """One check on a start of its own (the container is removed after it on every path)."""
    server = start_server(spec, diagnose=True)
    try:
        ready = follow_container(
            server.container, spec, limits, session=server.session, first_token=False, deadline_policy=STRICT
        )
        return check(server.url, spec) if ready.verdict == "ready" else _not_ready(ready)
    finally:
        runtime.remove(server.container)


def run_smoke(
    spec: LaunchSpec,
    limits: PhaseLimits,
    *,
    faults: bool = True,
    on_check: Callable[[CheckResult], None] | None = None,
    tool_spec: LaunchSpec | None = None,
    fault: str | None = None,
    simulated_spec: LaunchSpec | None = None,
) -> SmokeReport:
    """Start SPEC once and run its checks; `tool_spec` (the profile's smoke.tool_call_overrides) gets a
    start of its own for the tool call, `simulated_spec` (a speculative profile's
    smoke.simulate_accept_length) one for the acceptance length under SGLang's simulation; on the CPU
    rehearsal, planted faults last. `fault` (test-only, CPU rehearsal) is planted in the first start."""
    results: list[CheckResult] = []

    def add(found: list[CheckResult]) -> None:
        for check in found:
            results.append(check)
            if on_check:
                on_check(check)

    server = start_server(spec, fault=fault, diagnose=True)
    try:
        up = follow_container(
            server.container, spec, limits, session=server.session, first_token=False, deadline_policy=STRICT
        )
        _serving_checks(up, spec, server.url, server.container, tool_call=tool_spec is None, add=add)
    finally:
        runtime.remove(server.container)  # raises a KitError naming the container if it cannot
    if tool_spec is not None and up.verdict == "ready":
        add([_own_start(tool_spec, limits, checks.tool_call_parsed)])
    if simulated_spec is not None and up.verdict == "ready":
        # SGLang's accepted-draft simulation: the acceptance length against the simulated one.
        add([_own_start(simulated_spec, limits, speculative.accept_length)])
    if faults and spec.device == "cpu":
        hang = run_up(spec, limits, fault="hang-init:rank=1", first_token=False)
        add([checks.planted_hang_named(hang, limits)])
        crash = run_up(spec, limits, fault="crash-load:rank=1", first_token=False)
        add([checks.planted_crash_named(crash)])
    return SmokeReport(spec.target, spec.image, up.verdict, tuple(results), startup_exit_code=up.exit_code)
