"""`kit preflight`: the image's SGLang builds its TP group alone, in seconds, before a model is loaded.

One container from the target's image and container settings (GPUs, IPC, /dev/shm, ulimits) runs
kit/pivot/inimage/ranks.py, copied in at run time with kit/images/inimage/sglang_groups.py: the
launcher does what SGLang's launcher does before it spawns its schedulers (its argument parser over
the target's launch, its ServerArgs resolution and `_set_envs_and_config`: NCCL_CUMEM_ENABLE=0,
NCCL_NVLS_ENABLE=0, ...), then N ranks build SGLang's own groups (its warm-up all_reduce included),
and run the kit's checked all_reduce on SGLang's TP group, a write into every other rank's memory
(CUDA IPC on GPUs) and an all_reduce sweep. NCCL_DEBUG=INFO whatever the profile says, so NCCL
names its transports. The kit reads the events from the container's output and keeps each step's
deadline (kit/pivot/preflight.toml). On a hang it reads every rank's stack (py-spy), then runs the
same step again with NCCL_P2P_DISABLE=1: if that passes, the hang is NCCL's peer-to-peer path
("P2P"), else not.

    spec = preflight_spec("qwen-base")                 # or image="sglang-0.5.23-cpu"
    result = run_preflight(spec, ranks=4)              # PreflightResult; printing is the CLI's job

The container is removed on every path (verdict, error, Ctrl-C).
"""

from __future__ import annotations

import contextlib
import json
import queue
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from kit import paths
from kit.errors import EnvironmentProblem, ExitCode, InputError
from kit.launch import resolve_full
from kit.logs.stacks import RankStack, explain_hang
from kit.output import jsonable
from kit.pivot.graph_step import graph_request
from kit.pivot.preflight_container import IN_CONTAINER, RANKS_SCRIPT, PreflightContainer
from kit.pivot.steps import (
    LIMITS_FILE,
    STEPS,
    DevicePlan,
    PairRow,
    PreflightRun,
    RunVerdict,
    StepRow,
    device_plan,
    nccl_version,
    pair_rows,
    plan_steps,
    step_rows,
    transports,
)
from kit.render.docker import host_settings
from kit.runtime import server as runtime
from kit.runtime.engine import LABEL_IMAGE, LABEL_MANAGED, LABEL_SESSION, LABEL_TARGET, image_exists
from kit.runtime.server import run_labels
from kit.spec import LaunchSpec
from kit.startup.result import StackRow

MANAGED = "preflight"
P2P_OFF = {"NCCL_P2P_DISABLE": "1"}
KIT_ENV = {"NCCL_DEBUG": "INFO", "PYTHONUNBUFFERED": "1"}
"""The kit's own settings: NCCL names its transports whatever the profile's NCCL_DEBUG says."""


@dataclass(frozen=True)
class SweepRow:
    bytes: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float


@dataclass(frozen=True)
class Attempt:
    """One container's run: as configured, or the retry with NCCL_P2P_DISABLE=1."""

    env: dict[str, str]
    verdict: str
    step: str | None
    message: str
    seconds: float
    steps: tuple[StepRow, ...]


@dataclass(frozen=True)
class PreflightResult:
    target: str
    image: str
    image_ref: str
    device: str
    backend: str
    ranks: int
    verdict: str
    """ok | failed | crashed | hung | deadline | interrupted"""
    exit_code: int
    seconds: float
    """End to end: first container created to last one removed."""
    step: str | None = None
    """The step the verdict is about (None when ok)."""
    message: str = ""
    steps: tuple[StepRow, ...] = ()
    sweep: tuple[SweepRow, ...] = ()
    pairs: tuple[PairRow, ...] = ()
    nccl: str | None = None
    transports: tuple[str, ...] = ()
    """How ranks reached each other: NCCL's channels ('P2P/IPC', 'SHM/direct/direct'), or 'gloo'."""
    nccl_lines: tuple[str, ...] = ()
    """NCCL_DEBUG=INFO's transport lines, as printed."""
    stacks: tuple[StackRow, ...] = ()
    waiting_ranks: tuple[str, ...] = ()
    missing_ranks: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    """The last lines that were not rank events (a traceback, NCCL warnings)."""
    p2p: str | None = None
    """After a hang: 'P2P' (the step passed again with NCCL_P2P_DISABLE=1) or 'not P2P'; else None."""
    retry: Attempt | None = None
    env: dict[str, str] = field(default_factory=dict)
    """What the kit set for this run besides the profile's env (the fault switch, NCCL_DEBUG)."""
    sglang: str | None = None
    """The image's SGLang release whose set-up the ranks ran (None: it could not be used; see notes)."""
    groups: str | None = None
    """Who built the groups: 'sglang' (the release's own init, `recipe`) or 'torch.distributed'."""
    recipe: str | None = None
    """'bootstrap' (init_parallel_runtime, 0.5.23) or 'model-runner' (0.5.10.post1's calls)."""
    server_args: dict = field(default_factory=dict)
    """The launch's distributed flags as SGLang's own parser read them (kit/pivot/preflight.toml)."""
    settings: dict = field(default_factory=dict)
    """{variable: {value, source: sglang | profile | kit, by?, replaced?}}: the ranks' environment."""
    tp_group: dict = field(default_factory=dict)
    """What SGLang built on its TP group (rank 0): backend, PyNccl, custom all-reduce."""
    graph: dict = field(default_factory=dict)
    """The graph step (rank 0): path, sizes with their time per replay, the PyNccl size; or skipped."""
    diagnostics: str | None = None
    containers_removed: bool = True
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PreflightProgress:
    """One step of the watch loop, for live renderers."""

    attempt: str  # "run" or "retry with NCCL_P2P_DISABLE=1"
    elapsed: float
    step: str | None
    quiet_for: float
    ended: tuple[tuple[str, int], ...]  # (step, rank) that ended since the last call
    sweep: tuple[dict, ...]  # sweep rows that arrived since the last call
    container: str
    skipped: tuple[str, ...] = ()  # steps every rank skipped (the graph step on CPU): not "ok"


ProgressCallback = Callable[[PreflightProgress], None]


# -- what to run ------------------------------------------------------------------------------------


def default_target(device: str) -> str:
    """The first catalog target (by name) for this device kind: GPU targets ask for GPUs, CPU ones not."""
    from kit.catalog import load_catalog

    for name, (_, target) in sorted(load_catalog().targets.items()):
        if bool(target.gpus) == (device == "cuda"):
            return name
    raise InputError("TARGET", f"no catalog target runs on {device}", "name a target")


def preflight_spec(
    target: str | None, *, image: str | None = None, overrides: tuple[str, ...] = (), host_has_gpus: bool
) -> LaunchSpec:
    """The launch whose image and container settings the preflight uses.

    Without a target: the first catalog target for the image's device kind (or, without an image,
    for this host: CUDA where NVML sees GPUs, else the CPU rehearsal).
    """
    if target is None:
        if image is not None:
            from kit.images.manifest import load_manifest

            device = load_manifest(image).flavor
        else:
            device = "cuda" if host_has_gpus else "cpu"
        target = default_target(device)
    return resolve_full(target, image=image, overrides=overrides).spec


def sglang_fields() -> list[str]:
    """The launch flags SGLang's distributed set-up reads (preflight.toml's [sglang] server_args)."""
    return list(tomllib.loads(LIMITS_FILE.read_text(encoding="utf-8"))["sglang"]["server_args"])


def launch_flags(spec: LaunchSpec) -> list[str]:
    """The launch's flags: the server's argv after `python -m sglang.launch_server`."""
    argv = list(spec.argv)
    if "-m" in argv:
        return argv[argv.index("-m") + 2 :]
    return argv[1:]


def env_sources(spec: LaunchSpec, environment: dict[str, str]) -> dict[str, str]:
    """For each variable the container gets: 'profile' (the target's env, as given) or 'kit'."""
    return {
        key: "profile" if spec.env.get(key) == value else "kit"
        for key, value in environment.items()
        if key != "PYTHONUNBUFFERED"
    }


def rank_request(
    spec: LaunchSpec,
    ranks: int,
    plan: DevicePlan,
    until: str | None,
    environment: dict[str, str],
    graph: dict | None = None,
) -> dict:
    """The ranks' request; `graph`: the graph step's plan where the caller has it (else it is made
    here, which on CUDA runs SGLang's own resolution of the launch: graph_step.graph_request)."""
    limits = plan.limits
    total = sum(limit.deadline_s for limit in limits.values())
    return {
        "world_size": ranks,
        "device": spec.device,
        "backend": "nccl" if spec.device == "cuda" else "gloo",
        "steps": list(STEPS),
        "until": until,
        "launch_argv": launch_flags(spec),
        "server_args": sglang_fields(),
        "env_sources": env_sources(spec, environment),
        "sweep": plan.sweep,
        # the widths the server's graphs reduce (graph_step.py)
        "graph": graph if graph is not None else graph_request(spec, ranks),
        "p2p_bytes": plan.p2p_bytes,
        # torch's own timeouts stay out of the way: the kit's step deadlines decide.
        "collective_timeout_s": total + 60,
        "run_timeout_s": total + 120,
    }


def container_kwargs(
    spec: LaunchSpec, ranks: int, *, name: str, session: str, environment: dict[str, str]
) -> dict:
    """The preflight container: the server's settings (GPUs, IPC, shm, ulimits, the compile cache),
    the ranks' command."""
    settings = host_settings(spec, ranks if spec.device == "cuda" else 0)
    kwargs: dict = {
        "image": spec.image_ref,
        "command": ["python", "-u", f"{IN_CONTAINER}/ranks.py", f"{IN_CONTAINER}/request.json"],
        "name": name,
        "environment": {**settings.pop("environment", {}), **environment},
        "labels": {
            **run_labels(),  # KIT_RUN_LABELS: a caller's own mark (CI jobs, tests on a shared engine)
            LABEL_MANAGED: MANAGED,
            LABEL_SESSION: session,
            LABEL_TARGET: spec.target,
            LABEL_IMAGE: spec.image,
        },
        # py-spy reads the ranks' stacks on a hang.
        "cap_add": sorted({*spec.cap_add, "SYS_PTRACE"}),
        **settings,
    }
    return kwargs


def run_environment(spec: LaunchSpec, fault: str | None, extra: dict[str, str]) -> tuple[dict, dict]:
    """(the container's environment, what the kit added to or changed in the profile's): NCCL's
    transport lines on, whatever the profile's NCCL_DEBUG."""
    added = {**KIT_ENV, **extra}
    if fault:
        if spec.device != "cpu":
            raise InputError("--fault", "faults exist only in the CPU rehearsal image", "use a CPU image")
        added["KIT_FAULT"] = fault
    return {**spec.env, **added}, added


# -- the run ----------------------------------------------------------------------------------------


@dataclass
class _Outcome:
    run: PreflightRun
    verdict: RunVerdict
    seconds: float
    stacks: dict[str, RankStack]
    log: str
    removed: bool


def _watch(
    box: PreflightContainer,
    run: PreflightRun,
    started: float,
    label: str,
    on_progress: ProgressCallback | None,
) -> RunVerdict:
    stream_open = True
    while True:
        ended: list[tuple[str, int]] = []
        sweep: list[dict] = []
        deadline = time.monotonic() + 0.2
        while True:
            try:
                at, line = box.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                stream_open = False
                break
            event = run.feed_line(line, at)
            if event and event.get("ev") == "end" and event.get("rank") != -1:
                ended.append((str(event.get("step")), int(event.get("rank", -1))))
            elif event and event.get("ev") == "launcher":
                ended += [("launch", rank) for rank in range(run.world)]
            elif event and event.get("ev") == "end" and event.get("rank") == -1:
                ended += [(str(event.get("step")), rank) for rank in range(run.world)]
            elif event and event.get("ev") == "progress":
                sweep.append(run.sweep[-1])
        now = time.monotonic()
        if not stream_open and run.container_exit is None:
            run.container_exited(box.exit_code())
        if on_progress:
            on_progress(
                PreflightProgress(
                    label,
                    now - started,
                    run.active_step(),
                    run.quiet_for(now),
                    tuple(ended),
                    tuple(sweep),
                    box.name,
                    tuple(r.step for r in step_rows(run, None) if r.status == "skipped"),
                )
            )
        verdict = run.verdict(now)
        if verdict is not None:
            return verdict


def _attempt(
    spec: LaunchSpec,
    ranks: int,
    plan: DevicePlan,
    *,
    environment: dict[str, str],
    session: str,
    label: str,
    until: str | None,
    on_progress: ProgressCallback | None,
    on_start: Callable[[str], None] | None,
    want_stacks: bool = True,
) -> _Outcome:
    request = rank_request(spec, ranks, plan, until, environment)
    name = f"kit-preflight-{session}" + ("-retry" if label != "run" else "")
    box = PreflightContainer(
        container_kwargs(spec, ranks, name=name, session=session, environment=environment), request
    )
    removed = False
    try:
        started = box.start()
        if on_start:
            on_start(box.name)
        run = PreflightRun(ranks, plan_steps(request), plan, started)
        verdict = _watch(box, run, started, label, on_progress)
        stacks: dict[str, RankStack] = {}
        if want_stacks and verdict.verdict in ("hung", "deadline") and run.pids:
            stacks = box.stacks(run.pids)
        log = box.log_text() if verdict.verdict != "ok" else ""
        seconds = time.monotonic() - started
    finally:
        removed = box.remove()
    return _Outcome(run, verdict, seconds, stacks, log, removed)


def _stack_rows(stacks: dict[str, RankStack]) -> tuple[StackRow, ...]:
    return tuple(StackRow(s.rank, s.pid, s.kind.value, s.where) for s in stacks.values())


def _write_diagnostics(session: str, outcome: _Outcome, result: PreflightResult) -> Path:
    folder = paths.cache_dir() / "runs" / f"preflight-{session}"
    (folder / "stacks").mkdir(parents=True, exist_ok=True)
    (folder / "preflight.log").write_text(outcome.log, encoding="utf-8")
    for rank, stack in outcome.stacks.items():
        (folder / "stacks" / f"{rank}.txt").write_text(stack.text, encoding="utf-8")
    (folder / "result.json").write_text(json.dumps(jsonable(result), indent=2) + "\n", encoding="utf-8")
    return folder


def setup_fields(run: PreflightRun, spec: LaunchSpec, environment: dict[str, str], notes: list[str]) -> dict:
    """What the launcher's setup and the ranks' init said: SGLang's release, its settings and groups."""
    setup = run.setup
    init = run.state["init"].details.get(0, {}) if "init" in run.state else {}
    settings = setup.get("settings") or {
        key: {"value": environment[key], "source": source}
        for key, source in sorted(env_sources(spec, environment).items())
    }
    if setup.get("error"):
        notes.append(f"{setup['error']}: the groups were plain torch.distributed, not what the server builds")
    if spec.env.get("NCCL_DEBUG", "INFO") != "INFO":
        notes.append(
            f"NCCL_DEBUG=INFO for preflight (the profile's {spec.env['NCCL_DEBUG']} stays the server's), "
            "so NCCL names its transports"
        )
    return {
        "sglang": setup.get("sglang") if not setup.get("error") else None,
        "groups": init.get("groups"),
        "recipe": init.get("recipe"),
        "server_args": setup.get("server_args") or {},
        "settings": settings,
        "tp_group": {k: init[k] for k in ("backend", "tp_world", "pynccl", "custom_all_reduce") if k in init},
    }


def _p2p_off(env: dict[str, str]) -> bool:
    return env.get("NCCL_P2P_DISABLE", "0").strip() not in ("", "0")


def check_preflight(
    spec: LaunchSpec, *, ranks: int | None = None, until: str | None = None, fault: str | None = None
) -> int:
    """Every check run_preflight makes before it starts anything (the CLI asks them before its
    header): --tp, --until, the fault switch, then the engine and the image. The ranks to run."""
    ranks = ranks or spec.ranks
    if ranks < 1:
        raise InputError("--tp", f"{ranks} ranks", "use 1 or more")
    if spec.device == "cuda" and spec.gpus and ranks > spec.gpus:
        raise InputError("--tp", f"{ranks} ranks but the target has {spec.gpus} GPUs", "lower --tp")
    if until is not None and until not in STEPS:
        raise InputError("--until", f"unknown step '{until}'", f"steps: {', '.join(STEPS)}")
    run_environment(spec, fault, {})  # bad input first, before the engine is asked
    if not image_exists(spec.image_ref):
        raise EnvironmentProblem(
            f"image {spec.image_ref} not built", hint=f"run 'kit image build {spec.image}'"
        )
    return ranks


def run_preflight(
    spec: LaunchSpec,
    *,
    ranks: int | None = None,
    fault: str | None = None,
    retry_without_p2p: bool = True,
    until: str | None = None,
    deadlines: dict[str, float] | None = None,
    on_progress: ProgressCallback | None = None,
    on_start: Callable[[str], None] | None = None,
) -> PreflightResult:
    """Run the preflight for SPEC's image and container settings; see the module's docstring."""
    ranks = check_preflight(spec, ranks=ranks, until=until, fault=fault)
    environment, added = run_environment(spec, fault, {})
    plan = device_plan(spec.device, deadlines)
    session = runtime.new_session_id()
    began = time.monotonic()
    base = {
        "target": spec.target,
        "image": spec.image,
        "image_ref": spec.image_ref,
        "device": spec.device,
        "backend": "nccl" if spec.device == "cuda" else "gloo",
        "ranks": ranks,
        "env": {k: v for k, v in added.items() if k != "PYTHONUNBUFFERED"},
    }
    try:
        outcome = _attempt(
            spec,
            ranks,
            plan,
            environment=environment,
            session=session,
            label="run",
            until=until,
            on_progress=on_progress,
            on_start=on_start,
        )
    except KeyboardInterrupt:
        return PreflightResult(
            **base,
            verdict="interrupted",
            exit_code=int(ExitCode.INTERRUPTED),
            seconds=round(time.monotonic() - began, 2),
        )
    run, verdict = outcome.run, outcome.verdict
    explanation = explain_hang(outcome.stacks) if outcome.stacks else None
    waiting = tuple(s.rank for s in explanation.waiting) if explanation else ()
    missing = tuple(s.rank for s in explanation.missing) if explanation else ()
    if verdict.verdict in ("hung", "deadline") and not missing and not waiting:
        missing = tuple(f"rank{r}" for r in run.never_began(verdict.step or "launch"))
    lines = run.nccl_lines
    notes: list[str] = []
    setup = setup_fields(run, spec, environment, notes)
    result = PreflightResult(
        **base,
        **setup,
        verdict=verdict.verdict,
        exit_code=verdict.exit_code,
        seconds=0.0,
        step=verdict.step,
        message=verdict.message,
        steps=step_rows(run, verdict),
        sweep=tuple(SweepRow(**row) for row in run.sweep),
        pairs=pair_rows(run.state["p2p"].details) if "p2p" in run.state else (),
        graph=run.state["graph"].details.get(0, {}) if "graph" in run.state else {},
        nccl=nccl_version(lines) or (run.state["init"].details.get(0, {}).get("nccl")),
        transports=transports(lines) or ((base["backend"],) if base["backend"] == "gloo" else ()),
        nccl_lines=tuple(lines),
        stacks=_stack_rows(outcome.stacks),
        waiting_ranks=waiting,
        missing_ranks=missing,
        errors=tuple(
            f"rank {e.get('rank')} in {e.get('step')}: {e.get('error')}" for e in run.errors + run.failures
        ),
        evidence=tuple(run.other_lines[-12:]) if verdict.verdict != "ok" else (),
        containers_removed=outcome.removed,
    )
    retry_outcome: _Outcome | None = None
    if verdict.verdict in ("hung", "deadline") and retry_without_p2p:
        if _p2p_off(environment):
            result = replace(result, p2p="not P2P")
            notes.append("NCCL_P2P_DISABLE was already set: the hang is not NCCL's peer-to-peer path")
        elif verdict.step == "launch":
            notes.append("no rank started: nothing NCCL does was reached, so no retry without P2P")
        else:
            try:
                retry_outcome = _attempt(
                    spec,
                    ranks,
                    plan,
                    environment={**environment, **P2P_OFF},
                    session=session,
                    label="retry with NCCL_P2P_DISABLE=1",
                    until=verdict.step,
                    on_progress=on_progress,
                    on_start=on_start,
                    want_stacks=False,  # the first run's stacks are the evidence; this one answers P2P
                )
            except KeyboardInterrupt:
                notes.append("interrupted during the retry with NCCL_P2P_DISABLE=1")
                result = replace(result, verdict="interrupted", exit_code=int(ExitCode.INTERRUPTED))
            if retry_outcome is not None:
                again = retry_outcome.verdict
                result = replace(
                    result,
                    # A retry that crashed answers nothing about P2P: no verdict, the retry's row says why.
                    p2p={"ok": "P2P", "hung": "not P2P", "deadline": "not P2P"}.get(again.verdict),
                    retry=Attempt(
                        P2P_OFF,
                        again.verdict,
                        again.step,
                        again.message,
                        round(retry_outcome.seconds, 2),
                        step_rows(retry_outcome.run, again),
                    ),
                    containers_removed=result.containers_removed and retry_outcome.removed,
                )
                if spec.device == "cpu":
                    notes.append(
                        "CPU rehearsal: Gloo has no NCCL P2P path; the retry shows whether the hang "
                        "depends on NCCL_P2P_DISABLE"
                    )
    result = replace(result, notes=tuple(notes), seconds=round(time.monotonic() - began, 2))
    if verdict.verdict != "ok":
        folder = _write_diagnostics(session, outcome, result)
        result = replace(result, diagnostics=str(folder))
        with contextlib.suppress(OSError):
            (folder / "result.json").write_text(json.dumps(jsonable(result), indent=2) + "\n")
    return result


def host_has_gpus() -> bool:
    from kit.runtime.nvml import open_nvml

    gpus = open_nvml()
    if gpus is None:
        return False
    gpus.close()
    return True


__all__ = [
    "RANKS_SCRIPT",
    "Attempt",
    "PreflightProgress",
    "PreflightResult",
    "SweepRow",
    "container_kwargs",
    "default_target",
    "host_has_gpus",
    "preflight_spec",
    "rank_request",
    "run_environment",
    "run_preflight",
]
