"""`kit bisect TARGET`: a ladder that stops at the first failing rung, then changes one thing at a time.

    doctor -> preflight -> base -> target

`doctor` is the host (kit/pivot/doctor.py); `preflight` the image's SGLang building its groups alone
(kit/pivot/preflight.py); `base` the target without MTP (the profile its own profile extends, as a
catalog target, else `--set speculative=none`); `target` the target itself. A rung identical to the
one before is skipped. On the first rung that fails, the changes of kit/pivot/ladder.toml are tried
one at a time, each alone, until one turns the rung green; a change SGLang's own code already makes
on this launch and host (its custom all-reduce is off on more than two PCIe-only GPUs, it sets
NCCL_CUMEM_ENABLE=0 itself) is skipped with the reason (kit/pivot/sglang_rules.py). On the target
rung "MTP off" is known from the base rung without a run; the ladder still looks for a change that
keeps MTP.

    result = run_bisect("qwen-mtp", budget_s=3600, observer=...)   # BisectResult; the CLI prints it
    plan = plan_ladder("qwen-base")                                # what would run, skip, not apply

The ladder itself is kit/pivot/ladder.py (`climb`, over injected runners, tested without Docker);
`run_bisect` gives it the real ones: run_doctor, run_preflight and run_up, each under the profile's
limits. A total budget ends the run in progress like Ctrl-C does: its container is removed and the
report says so.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from kit.errors import ExitCode, InputError
from kit.launch import resolve_full
from kit.pivot.ladder import (
    GREEN,
    RUNGS,
    BisectResult,
    Budget,
    BudgetSpent,
    Change,
    Rung,
    Trial,
    Variant,
    budget_alarm,
    climb,
    load_changes,
)
from kit.pivot.rungs import apply_change, base_of, plan_rungs, previous_image
from kit.pivot.sglang_rules import Skip, gpu_nvlink

# -- the real runners ---------------------------------------------------------------------------------


class Observer(Protocol):
    """What a front end sees: each run's start and end, and the live progress of preflight and up."""

    def begin(self, variant: Variant) -> None: ...

    def preflight_progress(self, progress: Any) -> None: ...

    def up_progress(self, progress: Any) -> None: ...

    def up_started(self, name: str, url: str | None) -> None: ...

    def end(self, trial: Trial) -> None: ...


class QuietObserver:
    def begin(self, variant: Variant) -> None:
        pass

    def preflight_progress(self, progress: Any) -> None:
        pass

    def up_progress(self, progress: Any) -> None:
        pass

    def up_started(self, name: str, url: str | None) -> None:
        pass

    def end(self, trial: Trial) -> None:
        pass


class _Runners:
    """Runs a variant for real; remembers every container it started so none outlives the ladder."""

    def __init__(self, fault: str | None, observer: Observer):
        self.fault = fault
        self.observer = observer
        self.started: list[str] = []

    def __call__(self, variant: Variant) -> Trial:
        self.observer.begin(variant)
        try:
            trial = getattr(self, variant.rung.name)(variant)
        finally:
            self.sweep()
        trial = replace(trial, overrides=variant.overrides, image=variant.image)
        self.observer.end(trial)
        return trial

    def sweep(self) -> None:
        """Remove what a run left behind (a budget alarm inside a removal, say)."""
        if not self.started:
            return
        from docker.errors import DockerException, NotFound

        from kit.runtime.engine import client

        for name in self.started:
            with contextlib.suppress(NotFound, DockerException, Exception):
                client().containers.get(name).remove(force=True, v=True)
        self.started.clear()

    def doctor(self, variant: Variant) -> Trial:
        from kit.pivot.doctor import run_doctor

        report = run_doctor(variant.target, image=variant.image, overrides=variant.overrides)
        failed = [c for c in report.checks if c.status == "fail"]
        return Trial(
            "doctor",
            variant.label,
            "pass" if report.ok else "fail",
            phase=",".join(c.id for c in failed) or None,
            seconds=report.seconds,
            exit_code=report.exit_code,
            detail="; ".join(f"{c.id}: {c.summary} (fix: {c.fix})" for c in failed)
            or f"{report.counts['pass']} pass, {report.counts['warn']} warn, "
            f"{report.counts['not-checked']} not checked",
        )

    def preflight(self, variant: Variant) -> Trial:
        from kit.pivot.preflight import run_preflight

        spec = resolve_full(variant.target, image=variant.image, overrides=variant.overrides).spec
        result = run_preflight(
            spec,
            fault=self.fault if spec.device == "cpu" else None,
            retry_without_p2p=False,  # the ladder's own NCCL_P2P_DISABLE=1 change does that
            on_progress=self.observer.preflight_progress,
            on_start=self.started.append,
        )
        detail = "every step passed" if result.verdict == "ok" else result.message
        if result.missing_ranks:
            detail += f"; missing {', '.join(result.missing_ranks)}"
        return Trial(
            "preflight",
            variant.label,
            result.verdict,
            phase=result.step,
            seconds=result.seconds,
            exit_code=result.exit_code,
            detail=detail,
            diagnostics=result.diagnostics,
        )

    def _up(self, variant: Variant) -> Trial:
        from kit.startup import limits_from_spec, run_up
        from kit.startup.result import headline

        spec = resolve_full(variant.target, image=variant.image, overrides=variant.overrides).spec
        started = time.monotonic()

        def on_start(server) -> None:
            self.started.append(server.name)
            self.observer.up_started(server.name, server.url)

        result = run_up(
            spec,
            limits_from_spec(spec),
            fault=self.fault if spec.device == "cpu" else None,
            on_progress=self.observer.up_progress,
            on_start=on_start,
        )
        return Trial(
            variant.rung.name,
            variant.label,
            result.verdict,
            phase=result.phase,
            seconds=round(time.monotonic() - started, 2),
            exit_code=result.exit_code,
            detail=headline(result),
            diagnostics=result.diagnostics,
        )

    base = _up
    target = _up


def _command(verb: str, target: str, image: str | None, overrides: tuple[str, ...]) -> str:
    from shlex import join

    argv = ["kit", verb, target]
    if image:
        argv += ["--image", image]
    for item in overrides:
        argv += ["--set", item]
    return join(argv)


def fix_commands(target: str, variant: Variant, own_image: str) -> tuple[str, str]:
    """(the launch that went green, the ladder again with the change for every rung).

    OWN_IMAGE is the target's own image: --image appears only for another one.
    """
    verb = {"doctor": "doctor", "preflight": "preflight"}.get(variant.rung.name, "up")
    other_image = variant.image if variant.image != own_image else None
    green = _command(verb, variant.target, other_image, variant.overrides)
    added = variant.overrides[len(variant.rung.overrides) :]
    again = _command("bisect", target, other_image, added)
    return green, again


def check_bisect(
    target: str,
    *,
    image: str | None = None,
    overrides: tuple[str, ...] = (),
    fault: str | None = None,
    budget_s: float | None = None,
    start_at: str = "doctor",
) -> tuple[Rung, ...]:
    """Every input check of a bisect, run before anything (the CLI asks it before its header): the
    rung, the budget, the target, image and --set of each rung, the fault switch. Its rungs."""
    if start_at not in RUNGS:
        raise InputError("--from", f"unknown rung '{start_at}'", f"rungs: {', '.join(RUNGS)}")
    if budget_s is not None and budget_s <= 0:
        raise InputError("--budget", f"{budget_s:g} s", "give more than 0 seconds")
    rungs = plan_rungs(target, image, overrides)
    if fault and resolve_full(target, image=image, overrides=overrides).spec.device != "cpu":
        raise InputError("--fault", "faults exist only in the CPU rehearsal image", "use the tiny target")
    return rungs


def run_bisect(
    target: str,
    *,
    image: str | None = None,
    overrides: tuple[str, ...] = (),
    fault: str | None = None,
    budget_s: float | None = None,
    start_at: str = "doctor",
    observer: Observer | None = None,
    on_trial: Callable[[Trial], None] = lambda trial: None,
) -> BisectResult:
    rungs = check_bisect(
        target, image=image, overrides=overrides, fault=fault, budget_s=budget_s, start_at=start_at
    )
    from kit.runtime.engine import image_exists

    runners = _Runners(fault, observer or QuietObserver())
    budget = Budget(budget_s)
    began = time.monotonic()
    nvlink = host_nvlink(target, image, overrides)

    def apply(rung: Rung, change: Change | None) -> Variant | Skip | str:
        return apply_change(rung, change, image_built=image_exists, nvlink=nvlink)

    trials: list[Trial] = []
    found: dict[str, Any] = {}
    try:
        with budget_alarm(budget):
            climb(
                rungs,
                load_changes(),
                runners,
                budget=budget,
                start_at=start_at,
                apply=apply,
                on_trial=on_trial,
                trials=trials,
                found=found,
            )
    except KeyboardInterrupt:  # between runs: nothing of ours is running; keep what was found
        found["ended"] = "budget" if budget.spent else "interrupted"
    finally:
        runners.sweep()
    from kit.catalog import load_catalog

    own_image = load_catalog().targets[target][1].image
    return summarise(
        target, rungs[0].image, trials, found, time.monotonic() - began, budget_s, own_image=own_image
    )


def summarise(
    target: str,
    image: str,
    trials: list[Trial],
    found: dict[str, Any],
    seconds: float,
    budget_s: float | None,
    *,
    own_image: str | None = None,
) -> BisectResult:
    ended = found["ended"]
    first: Trial | None = found.get("trial")
    fix: Change | None = found.get("fix")
    variant = found.get("fix_variant")
    if ended == "interrupted":
        code = int(ExitCode.INTERRUPTED)
    elif first is not None:
        code = first.exit_code or int(ExitCode.FAILED)
    elif ended == "budget":
        code = int(ExitCode.DEADLINE)
    else:
        code = int(ExitCode.OK)
    green, again = fix_commands(target, variant, own_image or image) if variant else (None, None)
    notes = []
    if ended == "budget":
        runs = f"{len(trials)} run" + ("" if len(trials) == 1 else "s")
        notes.append(f"the budget of {budget_s:g} s ran out after {runs}; nothing the ladder started is left")
    return BisectResult(
        target=target,
        image=image,
        verdict=ended,
        exit_code=code,
        trials=tuple(trials),
        failing_rung=first.rung if first else None,
        failing_verdict=first.verdict if first else None,
        failing_phase=first.phase if first else None,
        fix=fix.title if fix else None,
        fix_command=green,
        next_command=again,
        also_green=tuple(found.get("also_green", ())),
        bundle=first.diagnostics if first else None,
        seconds=round(seconds, 2),
        budget_s=budget_s,
        notes=tuple(notes),
    )


def host_nvlink(target: str, image: str | None, overrides: tuple[str, ...]) -> bool | None:
    """The fact SGLang's custom all-reduce rule needs: are the target's GPUs NVLink-joined (NVML)."""
    spec = resolve_full(target, image=image, overrides=overrides).spec
    return gpu_nvlink(spec.ranks) if spec.device == "cuda" else None


@dataclass(frozen=True)
class PlannedChange:
    rung: str
    change: str
    action: str
    """run | skipped (SGLang already does it here) | n/a (does not apply) | known (from the base rung)"""
    detail: str = ""


def plan_ladder(
    target: str, *, image: str | None = None, overrides: tuple[str, ...] = (), nvlink: bool | None = None
) -> tuple[tuple[Rung, ...], tuple[PlannedChange, ...], bool | None]:
    """What a bisect of TARGET would do on each rung if that rung failed, without running anything:
    (rungs, every change per rung, the NVLink fact used). NVLINK None: read from this host's NVML.
    A plan runs nothing, so it needs no engine: with none answering, an older image counts as unbuilt."""
    from kit.errors import EnvironmentProblem
    from kit.runtime.engine import image_exists

    def image_built(tag: str) -> bool:
        try:
            return image_exists(tag)
        except EnvironmentProblem:
            return False

    rungs = plan_rungs(target, image, overrides)
    if nvlink is None:
        nvlink = host_nvlink(target, image, overrides)
    rows = []
    for rung in rungs:
        if rung.name == "doctor" or rung.same_as:
            continue
        for change in load_changes():
            if rung.name not in change.rungs:
                continue
            applied = apply_change(rung, change, image_built=image_built, nvlink=nvlink)
            if isinstance(applied, Skip):
                rows.append(PlannedChange(rung.name, change.title, "skipped", applied.detail))
            elif isinstance(applied, str):
                rows.append(PlannedChange(rung.name, change.title, "n/a", applied))
            elif change.id == "mtp-off":
                rows.append(
                    PlannedChange(rung.name, change.title, "known", "from the base rung, when it passed")
                )
            else:
                added = applied.overrides[len(rung.overrides) :]
                how = " ".join(f"--set {item}" for item in added) or f"--image {applied.image}"
                rows.append(PlannedChange(rung.name, change.title, "run", how))
    return rungs, tuple(rows), nvlink


__all__ = [
    "GREEN",
    "RUNGS",
    "BisectResult",
    "Budget",
    "BudgetSpent",
    "Change",
    "PlannedChange",
    "Rung",
    "Trial",
    "Variant",
    "apply_change",
    "base_of",
    "budget_alarm",
    "climb",
    "fix_commands",
    "load_changes",
    "plan_ladder",
    "plan_rungs",
    "previous_image",
    "run_bisect",
    "summarise",
]
