"""`kit bisect TARGET`: a ladder that stops at the first failing rung, then changes one thing at a time.

    doctor -> preflight -> base -> target

`doctor` is the host (kit/pivot/doctor.py); `preflight` the image's torch.distributed alone
(kit/pivot/preflight.py); `base` the target without MTP (the profile its own profile extends, as a
catalog target, else `--set speculative=none`); `target` the target itself. A rung identical to the
one before is skipped. On the first rung that fails, the changes of kit/pivot/ladder.toml are tried
one at a time, each alone, until one turns the rung green. On the target rung "MTP off" is known
from the base rung without a run; the ladder still looks for a change that keeps MTP.

    result = run_bisect("qwen-mtp", budget_s=3600, observer=...)   # BisectResult; the CLI prints it

`climb(...)` is the ladder itself, over injected runners (tested without Docker); `run_bisect` gives it
the real ones: run_doctor, run_preflight and run_up, each under the profile's limits. A total budget
ends the run in progress like Ctrl-C does: its container is removed and the report says so.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from kit.catalog._load import read_toml
from kit.errors import ExitCode, InputError
from kit.launch import Resolved, resolve_full

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


# -- rungs and changes --------------------------------------------------------------------------------


def base_of(r: Resolved) -> tuple[str, tuple[str, ...], str]:
    """(catalog target, extra overrides, what it is) for the base rung of resolved target R."""
    raw = read_toml(r.model.path).get("profiles", {}).get(r.target_def.profile, {})
    parent = raw.get("extends") if isinstance(raw, dict) else None
    if parent:
        for name, target in sorted(r.model.targets.items()):
            if target.profile == parent:
                return name, (), f"{name} (profile {parent}, which {r.target_def.profile} extends)"
    if r.profile.speculative is not None:
        return r.target, ("speculative=none",), f"{r.target} with MTP off"
    return r.target, (), f"{r.target} (its profile has no MTP)"


def plan_rungs(target: str, image: str | None, overrides: tuple[str, ...]) -> tuple[Rung, ...]:
    r = resolve_full(target, image=image, overrides=overrides)
    image_name = r.spec.image
    base_target, base_extra, base_about = base_of(r)
    base = resolve_full(base_target, image=image_name, overrides=(*overrides, *base_extra)).spec
    same = base.argv == r.spec.argv and base.env == r.spec.env and base.image_ref == r.spec.image_ref
    return (
        Rung("doctor", target, image_name, overrides, "host checks for the target"),
        Rung("preflight", target, image_name, overrides, "the image's torch.distributed alone"),
        Rung("base", base_target, image_name, (*overrides, *base_extra), base_about),
        Rung("target", target, image_name, overrides, f"{target} itself", same_as="base" if same else None),
    )


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version))


def previous_image(image: str) -> str | None:
    """The image of the same flavour with the newest SGLang older than IMAGE's (by manifest pins)."""
    from kit import paths
    from kit.images.manifest import load_manifest

    current = load_manifest(image)
    older = []
    for path in sorted(paths.images_dir().glob("*.toml")):
        try:
            other = load_manifest(path.stem)
        except InputError:
            continue
        if other.flavor == current.flavor and _version_key(other.pins.sglang) < _version_key(
            current.pins.sglang
        ):
            older.append((_version_key(other.pins.sglang), other.name))
    return max(older)[1] if older else None


def apply_change(rung: Rung, change: Change | None, *, image_built: Callable[[str], bool]) -> Variant | str:
    """The rung with CHANGE applied, or why the change does not apply there (a string)."""
    if change is None:
        return Variant(rung, None, rung.target, rung.image, rung.overrides)
    if rung.name not in change.rungs:
        return "applies to " + ", ".join(change.rungs)
    r = resolve_full(rung.target, image=rung.image, overrides=rung.overrides)
    profile, spec = r.profile, r.spec
    overrides = rung.overrides
    image = rung.image
    if change.needs == "speculative" and profile.speculative is None:
        return "the profile has no MTP"
    if change.needs == "cuda_graph" and not profile.cuda_graph:
        return "CUDA graphs are already off"
    if change.kind == "set":
        for item in change.set:
            key, _, value = item.partition("=")
            if key.startswith("env.") and spec.env.get(key[4:]) == value:
                return f"{key[4:]}={value} is already set"
        overrides = (*overrides, *change.set)
    elif change.kind == "extra_arg":
        if change.arg in profile.extra_args or change.arg in spec.argv:
            return f"{change.arg} is already set"
        overrides = (*overrides, f"extra_args={json.dumps([*profile.extra_args, change.arg])}")
    elif change.kind == "attention":
        choices = [b for b in change.backends.get(spec.device, ()) if b != profile.attention_backend]
        if not choices:
            return f"no other attention backend listed for {spec.device}"
        overrides = (*overrides, f"attention_backend={choices[0]}")
    elif change.kind == "image":
        previous = previous_image(rung.image)
        if previous is None:
            return f"no older {r.manifest.flavor} image than {rung.image}"
        from kit.images.manifest import load_manifest

        if not image_built(load_manifest(previous).tag):
            return f"{previous} is not built (kit image build {previous})"
        image = previous
    else:
        return f"unknown kind {change.kind}"
    return Variant(rung, change, rung.target, image, overrides)


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
    apply: Callable[[Rung, Change | None], Variant | str],
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
    if start_at not in RUNGS:
        raise InputError("--from", f"unknown rung '{start_at}'", f"rungs: {', '.join(RUNGS)}")
    if budget_s is not None and budget_s <= 0:
        raise InputError("--budget", f"{budget_s:g} s", "give more than 0 seconds")
    rungs = plan_rungs(target, image, overrides)
    if fault and resolve_full(target, image=image, overrides=overrides).spec.device != "cpu":
        raise InputError("--fault", "faults exist only in the CPU rehearsal image", "use the tiny target")
    from kit.runtime.engine import image_exists

    runners = _Runners(fault, observer or QuietObserver())
    budget = Budget(budget_s)
    began = time.monotonic()

    def apply(rung: Rung, change: Change | None) -> Variant | str:
        return apply_change(rung, change, image_built=image_exists)

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
        notes.append(f"the budget of {budget_s:g} s ran out; the run in progress was stopped and removed")
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
