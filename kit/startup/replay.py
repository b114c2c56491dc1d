"""`kit repro`'s run: a bundle's replay plan (kit/diagnose/repro.py) started with kit up's own code.

Here, not in kit.diagnose: start-up records runs through kit.diagnose, so kit.diagnose never calls
start-up back (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kit.diagnose.repro import ReplayPlan, ReproResult, compare
from kit.output import jsonable
from kit.startup.overrun import DeadlinePolicy
from kit.startup.up import run_up


def run_replay(
    plan: ReplayPlan,
    differences_found: Sequence[str],
    *,
    keep: bool = False,
    on_progress: Callable | None = None,
    on_start: Callable | None = None,
) -> ReproResult:
    """Start the planned launch with kit up's own code (same clean-up on every path) and compare.

    A bundle recorded with a DEADLINE verdict (kit smoke, --strict-deadlines) is replayed under the
    same policy, so a deadline that passes again reproduces it."""
    strict = plan.bundle.result.get("verdict") == "deadline"
    result = run_up(
        plan.spec,
        plan.limits,
        keep=keep,
        on_progress=on_progress,
        on_start=on_start,
        first_token=plan.first_token,
        deadline_policy=DeadlinePolicy.VERDICT if strict else DeadlinePolicy.REPORT,
    )
    same, rows = compare(plan.bundle.result, jsonable(result))
    return ReproResult(
        bundle=str(plan.bundle.path),
        reproduced=same and result.verdict != "interrupted",
        compared=rows,
        differences=tuple(differences_found),
        changes=plan.changes,
        result=result,
        notes=plan.notes + ((plan.image_note,) if plan.image_note else ()),
    )
