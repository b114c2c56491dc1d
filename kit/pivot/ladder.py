"""The bisect ladder as data and its climb: changes, rungs, trials, the budget. Pure but for the alarm.

    trials, found = climb(rungs, load_changes(), run, budget=Budget(3600), apply=...)

`climb` runs the rungs in order through an injected runner (tested without Docker); on the first
red rung it tries the changes of kit/pivot/ladder.toml one at a time, each alone. `apply` says for
each change what to launch (a Variant), that SGLang's own rules make it a no-op here (a Skip,
kit/pivot/sglang_rules.py), or why it does not apply (a string).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

from kit.errors import ExitCode
from kit.pivot.sglang_rules import Skip

RUNGS = ("doctor", "preflight", "base", "target")
LADDER_FILE = Path(__file__).resolve().parent / "ladder.toml"
GREEN = {"pass", "ok", "ready"}


# -- the data ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    id: str
    title: str
    kind: str
    rungs: tuple[str, ...]
    why: str
    set: tuple[str, ...] = ()
    arg: str | None = None
    needs: str | None = None
    backends: dict[str, tuple[str, ...]] = field(default_factory=dict)


@cache
def load_changes() -> tuple[Change, ...]:
    data = tomllib.loads(LADDER_FILE.read_text(encoding="utf-8"))
    return tuple(
        Change(
            id=c["id"],
            title=c["title"],
            kind=c["kind"],
            rungs=tuple(c["rungs"]),
            why=c.get("why", ""),
            set=tuple(c.get("set", ())),
            arg=c.get("arg"),
            needs=c.get("needs"),
            backends={k: tuple(v) for k, v in (c.get("backends") or {}).items()},
        )
        for c in data["change"]
    )


@dataclass(frozen=True)
class Rung:
    """One rung as launched: which catalog target, with which overrides and image."""

    name: str
    target: str
    image: str
    overrides: tuple[str, ...] = ()
    about: str = ""
    same_as: str | None = None
    """The rung before it launches exactly this: skipped."""


@dataclass(frozen=True)
class Variant:
    """A rung with one change applied (or none): what a runner needs."""

    rung: Rung
    change: Change | None
    target: str
    image: str
    overrides: tuple[str, ...]

    @property
    def label(self) -> str:
        return self.change.title if self.change else "as configured"


@dataclass(frozen=True)
class Trial:
    """A row of the report."""

    rung: str
    change: str
    """'as configured', or the change's title."""
    verdict: str
    """Green: pass, ok, ready, known (green without a run). Red: fail, failed, crashed, hung, deadline.
    Else: n/a, skipped, interrupted, budget."""
    phase: str | None = None
    """Where it ended: doctor's failing checks, preflight's step, the server's start-up phase."""
    seconds: float = 0.0
    exit_code: int = 0
    detail: str = ""
    diagnostics: str | None = None
    overrides: tuple[str, ...] = ()
    image: str | None = None

    @property
    def green(self) -> bool:
        return self.verdict in GREEN or self.verdict == "known"

    @property
    def ran(self) -> bool:
        return self.verdict not in ("n/a", "skipped", "known")


@dataclass(frozen=True)
class BisectResult:
    target: str
    image: str
    verdict: str
    """green (every rung passed) | fixed (a change turned the failing rung green) | not fixed |
    interrupted | budget (the budget ran out first)"""
    exit_code: int
    trials: tuple[Trial, ...]
    failing_rung: str | None = None
    failing_verdict: str | None = None
    failing_phase: str | None = None
    fix: str | None = None
    """The first change that turned the failing rung green in a run."""
    fix_command: str | None = None
    """The launch that went green, as a command."""
    next_command: str | None = None
    """The ladder again with the fix on every rung (does the target climb with it?)."""
    also_green: tuple[str, ...] = ()
    """Changes known to turn it green without a run of their own (MTP off, from the base rung)."""
    bundle: str | None = None
    """The failing rung's diagnostics (log, stacks, result)."""
    seconds: float = 0.0
    budget_s: float | None = None
    notes: tuple[str, ...] = ()


# -- the ladder -------------------------------------------------------------------------------------


class Budget:
    """The total time for the whole ladder; `spent` once it ran out."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic):
        self.seconds = seconds
        self.clock = clock
        self.started = clock()
        self.spent = False

    def left(self) -> float | None:
        return None if self.seconds is None else self.seconds - (self.clock() - self.started)

    def check(self) -> bool:
        left = self.left()
        if left is not None and left <= 0:
            self.spent = True
        return self.spent


class BudgetSpent(KeyboardInterrupt):
    """Raised in the main thread when the budget runs out: runs stop as on Ctrl-C, cleaning up."""


@contextlib.contextmanager
def budget_alarm(budget: Budget) -> Iterator[None]:
    """Interrupt the run in progress when the budget runs out (main thread only; else between runs)."""
    left = budget.left()
    if left is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def ring(signum, frame):
        budget.spent = True
        raise BudgetSpent

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, max(0.01, left))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


Runner = Callable[[Variant], Trial]


def climb(
    rungs: tuple[Rung, ...],
    changes: tuple[Change, ...],
    run: Runner,
    *,
    budget: Budget,
    start_at: str = "doctor",
    apply: Callable[[Rung, Change | None], Variant | Skip | str],
    on_trial: Callable[[Trial], None] = lambda trial: None,
    trials: list[Trial] | None = None,
    found: dict[str, Any] | None = None,
) -> tuple[list[Trial], dict[str, Any]]:
    """Run the ladder; returns the trials and what it found (failing rung, fix, how it ended).

    TRIALS and FOUND, when given, are filled in place, so a caller interrupted mid-way keeps them.
    """
    trials = [] if trials is None else trials
    found = {} if found is None else found
    found["ended"] = "green"

    def record(trial: Trial) -> Trial:
        trials.append(trial)
        on_trial(trial)
        return trial

    def attempt(variant: Variant) -> Trial | None:
        """Run one variant; None when the ladder must stop (interrupted, budget)."""
        if budget.check():
            found["ended"] = "budget"
            return None
        try:
            trial = run(variant)
        except KeyboardInterrupt:
            trial = Trial(
                variant.rung.name, variant.label, "interrupted", exit_code=int(ExitCode.INTERRUPTED)
            )
        if trial.verdict == "interrupted" or budget.spent:
            found["ended"] = "budget" if budget.spent else "interrupted"
            record(replace(trial, verdict="budget" if budget.spent else "interrupted"))
            return None
        return record(trial)

    base_green = False
    for rung in rungs[RUNGS.index(start_at) :]:
        if rung.same_as:
            record(
                Trial(
                    rung.name, "as configured", "skipped", detail=f"launches exactly what {rung.same_as} did"
                )
            )
            continue
        variant = apply(rung, None)
        assert isinstance(variant, Variant)
        first = attempt(variant)
        if first is None:
            return trials, found
        if first.green:
            base_green = base_green or rung.name == "base"
            continue
        found.update(ended="not fixed", rung=rung.name, trial=first)
        if rung.name == "doctor":
            record(
                Trial("doctor", "-", "n/a", detail="no launch change fixes the host: see the checks' fixes")
            )
            return trials, found
        for change in changes:
            if rung.name not in change.rungs:
                continue  # not a change of this rung's kind (MTP on preflight): no row
            applied = apply(rung, change)
            if change.id == "mtp-off" and base_green and isinstance(applied, Variant):
                # The base rung is this launch without MTP, and it passed: no run needed.
                record(Trial(rung.name, change.title, "known", detail="the base rung (no MTP) passed"))
                found.setdefault("also_green", []).append(change.title)
                continue
            if isinstance(applied, str):
                record(Trial(rung.name, change.title, "n/a", detail=applied))
                continue
            if isinstance(applied, Skip):  # SGLang already does it here: a run would change nothing
                record(Trial(rung.name, change.title, "skipped", detail=applied.detail))
                continue
            trial = attempt(applied)
            if trial is None:
                return trials, found
            if trial.green:
                found.update(ended="fixed", fix=change, fix_variant=applied)
                return trials, found
        if found.get("also_green"):
            found["ended"] = "fixed"
        return trials, found
    return trials, found
