"""`kit watch --pid N | --unit NAME`: follow a server that runs as host processes to its verdict.

The same Watcher, verdicts, stacks and bundle as `kit watch CONTAINER` (kit/startup/up.py), over a
HostSource (kit/runtime/host_source.py). Limits come from the catalog target when one is given (or
the target whose model path the argv serves), else the tracker's defaults. The watched processes
are never signalled, stopped or restarted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from kit.diagnose.fact_sources import HostServer
from kit.diagnose.host_record import image_label
from kit.diagnose.record import record_run
from kit.errors import CheckFailed, ExitCode, InputError
from kit.logs import Crashed, Deadline, Hung, PhaseLimits, Ready
from kit.output import jsonable
from kit.runtime import processes as procs
from kit.runtime.host_source import HostSource
from kit.runtime.http import chat_first_token
from kit.runtime.nvml import NvmlGpus, open_nvml, read_inventory
from kit.runtime.server import new_session_id
from kit.startup.overrun import DeadlinePolicy
from kit.startup.result import UpResult
from kit.startup.serving import OnChange, ServingLimits
from kit.startup.up import (
    _result,
    ask_upstream,
    launch_nodes,
    serve_ready,
    verdict_samples,
    verdict_stacks,
)
from kit.startup.watch import Progress, Watcher


def default_limits(deadlines: Mapping[str, float], stall_windows: Mapping[str, float]) -> PhaseLimits:
    """The tracker's default limits with command-line overrides (no target to take them from)."""
    base = PhaseLimits()
    return dataclasses.replace(
        base,
        deadline_s=dataclasses.replace(base.deadline_s, **deadlines),
        stall_window_s=dataclasses.replace(base.stall_window_s, **stall_windows),
    )


@dataclasses.dataclass(frozen=True)
class HostWatch:
    """What `kit watch` was asked to follow on this host."""

    pid: int | None = None
    unit: str | None = None
    log: str | None = None

    def __post_init__(self) -> None:
        if (self.pid is None) == (self.unit is None):
            raise InputError("--pid | --unit", "give exactly one of --pid N or --unit NAME", "see --help")

    def source(self, *, gpus) -> HostSource:
        if self.pid is not None:
            return HostSource.for_pid(self.pid, log=self.log, gpus=gpus)
        return HostSource.for_unit(str(self.unit), log=self.log, gpus=gpus)


def _ended_message(exception: str | None, source: HostSource) -> str | None:
    """The watcher names a stopped server as a container; here it is a process or a unit."""
    if not exception or not exception.startswith("the server container"):
        return exception
    rest = exception.removeprefix("the server container").strip()
    if rest == "exited with code None":
        return f"the server process ({source.name}) ended; only its parent knows its exit code"
    return f"the server ({source.name}) {rest}"


@dataclasses.dataclass
class OpenedHost:
    """A host watch's source, opened: every check of --pid/--unit/--log made (the process is there,
    its log can be followed, systemd answers), so `kit watch` prints nothing before they pass. Close
    it (a `with` block) whether or not it was followed."""

    what: HostWatch
    source: HostSource
    gpus: NvmlGpus | None
    device: str
    launcher: int | None  # the SGLang launcher under a wrapper PID, when one was found
    argv: list[str] | None

    closed: bool = False

    def __enter__(self) -> OpenedHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.source.close()
            if self.gpus is not None:
                self.gpus.close()


def open_host_watch(what: HostWatch, spec) -> OpenedHost:
    """Open what `what` names: its processes, its log (file or journal) and, for a CUDA server, NVML."""
    # A wrapper PID (docker-init, tini, a shell, uv run, conda run) leads to the launcher under it.
    launcher = procs.find_launcher(what.pid) if what.pid is not None else None
    argv = procs.read_cmdline(launcher or what.pid) if what.pid is not None else None
    device = spec.device if spec is not None else _device(argv)
    gpus = open_nvml() if device == "cuda" else None
    try:
        source = what.source(gpus=gpus)
    except BaseException:
        if gpus is not None:
            gpus.close()
        raise
    return OpenedHost(what, source, gpus, device, launcher, argv)


def run_watch_host(
    opened: OpenedHost,
    spec,
    limits: PhaseLimits,
    *,
    on_progress: Callable[[Progress], None] | None = None,
    first_token: bool = False,
    max_attempts: int = 3,
    deadline_policy: DeadlinePolicy = DeadlinePolicy.REPORT,
    serve: ServingLimits | None = None,
    on_serving: OnChange | None = None,
) -> UpResult:
    """Follow opened host processes to a verdict; on one other than READY record the runs folder and
    bundle. A stage past its deadline is reported and followed on unless `deadline_policy` says
    VERDICT. With `serve`, a READY server is then watched while it serves (never stopped). `opened`
    is closed on the way out."""
    what, source, gpus, device = opened.what, opened.source, opened.gpus, opened.device
    launcher, argv = opened.launcher, opened.argv
    inventory = gpus.inventory() if gpus is not None else read_inventory()
    main = source.where.main_pid()
    if main is not None and launcher is None:
        launcher = procs.find_launcher(main)  # a unit's MainPID is often the shell
    followed = launcher if launcher is not None and launcher != main else None
    main = launcher or main
    argv = argv or (procs.read_cmdline(main) if main else None) or []
    target = spec.target if spec is not None else "host"
    image = image_label(main)
    try:
        watcher = Watcher(source, limits, max_attempts=max_attempts, deadline_policy=deadline_policy)
        try:
            verdict = watcher.run(on_progress)
        except KeyboardInterrupt:
            return UpResult(target, image, source.name, "interrupted", int(ExitCode.INTERRUPTED))
        now = source.clock()
        stacks = verdict_stacks(watcher, now) if isinstance(verdict, (Hung, Deadline)) else {}
        nodes = launch_nodes(argv)
        upstream = None if isinstance(verdict, Ready) else ask_upstream(source, watcher)
        result = _result(
            target, image, source.name, verdict, watcher, now, stacks, device, nodes, upstream, gpus=inventory
        )
        if isinstance(verdict, Crashed):
            result = dataclasses.replace(result, exception=_ended_message(result.exception, source))
        result = dataclasses.replace(result, notes=(*result.notes, *source.notes))
        if followed is not None:
            given = what.pid if what.pid is not None else source.where.main_pid()
            note = f"followed pid {followed}, the SGLang launcher under pid {given}"
            result = dataclasses.replace(result, notes=(note, *result.notes))
        if isinstance(verdict, Ready) and first_token:
            result = _first_token(result, argv, limits)
            if result.verdict == "failed":  # READY had no causes to rank: the upstream word alone
                upstream = ask_upstream(source, watcher)
                result = dataclasses.replace(result, upstream=upstream.lines())
        if serve is not None and result.verdict == "ready":
            facts = _launch_facts(argv)
            result, stacks, upstream = serve_ready(
                result,
                watcher,
                spec,
                serve,
                on_serving,
                inventory,
                base_url=facts.base_url,
                api_key=facts.api_key,
            )
            if result.serving and result.verdict == "crashed":
                result = dataclasses.replace(result, exception=_ended_message(result.exception, source))
        if result.verdict != "ready":
            pid = source.where.main_pid() or main
            recorded = record_run(
                new_session_id(),
                source,
                spec,
                limits,
                stacks,
                jsonable(result),
                host=HostServer(pid, what.unit),
                upstream=upstream.files if upstream is not None else None,
                samples=verdict_samples(result, watcher),
            )
            result = dataclasses.replace(
                result,
                diagnostics=str(recorded.folder),
                bundle=str(recorded.bundle) if recorded.bundle else None,
                notes=(*result.notes, recorded.note) if recorded.note else result.notes,
            )
        return result
    finally:
        opened.close()


def _launch_facts(argv: list[str]):
    from kit.diagnose.hostenv import launch_facts

    return launch_facts(argv)


def _device(argv: list[str] | None) -> str:
    from kit.diagnose.hostenv import launch_facts

    return launch_facts(argv or []).device


def _first_token(result: UpResult, argv: list[str], limits: PhaseLimits) -> UpResult:
    from kit.diagnose.hostenv import launch_facts

    facts = launch_facts(argv)
    if not facts.model:
        return dataclasses.replace(
            result, notes=(*result.notes, "no --model-path in the argv: no first token")
        )
    try:
        token = chat_first_token(
            facts.base_url, facts.model, timeout_s=limits.deadline_s.first_token, api_key=facts.api_key
        )
    except CheckFailed as exc:
        return dataclasses.replace(
            result, verdict="failed", exit_code=int(ExitCode.FAILED), exception=exc.one_line()
        )
    return dataclasses.replace(
        result,
        first_token_s=round(token.first_token_s, 3),
        first_token_endpoint=token.endpoint,
        first_token_in=token.first_in,
        reply=token.text or token.reasoning,
    )


__all__ = ["HostWatch", "OpenedHost", "default_limits", "open_host_watch", "run_watch_host"]
