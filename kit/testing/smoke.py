"""`kit smoke TARGET`: the smoke suite's checks from the command line, on one server start.

Same check functions as tests/smoke (kit.testing.checks); the planted-fault checks run only where
the fault switch exists (the CPU rehearsal image).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kit.errors import ExitCode
from kit.logs import PhaseLimits
from kit.runtime import server as runtime
from kit.spec import LaunchSpec
from kit.startup.result import UpResult
from kit.startup.up import follow_container, run_up
from kit.testing import checks
from kit.testing.checks import CheckResult


@dataclass(frozen=True)
class SmokeReport:
    target: str
    image: str
    startup: str
    checks: tuple[CheckResult, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def exit_code(self) -> int:
        return int(ExitCode.OK if self.ok else ExitCode.FAILED)


def _serving_checks(result: UpResult, spec: LaunchSpec, url: str) -> list[CheckResult]:
    found = [checks.init_within_deadline(result, spec)]
    if result.verdict != "ready":
        found.append(
            CheckResult(
                "server ready", False, f"{result.verdict} in {result.phase}: {result.exception or ''}"
            )
        )
        return found
    found += [
        checks.first_token_chat(url, spec),
        checks.first_token_generate(url, spec),
        checks.health_generate(url, spec),
        checks.greedy_repeatable(url, spec),
    ]
    return found


def run_smoke(
    spec: LaunchSpec,
    limits: PhaseLimits,
    *,
    faults: bool = True,
    on_check: Callable[[CheckResult], None] | None = None,
) -> SmokeReport:
    results: list[CheckResult] = []

    def add(found: list[CheckResult]) -> None:
        for check in found:
            results.append(check)
            if on_check:
                on_check(check)

    server = runtime.start_server(spec, diagnose=True)
    try:
        up = follow_container(server.container, spec, limits, session=server.session, first_token=False)
        add(_serving_checks(up, spec, server.url))
    finally:
        runtime.remove(server.container)  # raises a KitError naming the container if it cannot
    if faults and spec.device == "cpu":
        hang = run_up(spec, limits, fault="hang-init:rank=1", first_token=False)
        add([checks.planted_hang_named(hang, limits)])
        crash = run_up(spec, limits, fault="crash-load:rank=1", first_token=False)
        add([checks.planted_crash_named(crash)])
    return SmokeReport(spec.target, spec.image, up.verdict, tuple(results))
