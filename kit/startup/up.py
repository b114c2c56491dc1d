"""`kit up` and `kit watch`: start (or attach to) a server, follow it to a verdict, then diagnose,
measure the first token, and clean up. Returns an UpResult; printing is the CLI's job."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from docker.models.containers import Container

from kit.diagnose.record import note_start, record_run
from kit.errors import CheckFailed, ExitCode, KitError
from kit.launch import api_key_from_env
from kit.logs import Crashed, Deadline, Hung, PhaseLimits, Ready, Verdict
from kit.logs.activity import SampleHistory, series_rows
from kit.logs.counters import readable_counters, unread_for_hang
from kit.logs.stacks import STACK_EVERY_S, RankStack, explain_hang
from kit.output import jsonable
from kit.runtime import server as runtime
from kit.runtime.docker_source import DockerSource
from kit.runtime.http import chat_first_token, server_startup_time
from kit.runtime.nvml import GpuInventory, lost_note, open_nvml, read_inventory, xid_note
from kit.runtime.source import Source
from kit.runtime.upstream import UpstreamEvidence, gather
from kit.spec import LaunchSpec
from kit.startup.overrun import DeadlinePolicy, DeadlineRow
from kit.startup.result import (
    Seen,
    UpResult,
    causes_for,
    error_lines,
    evidence_for,
    explain_ranks,
    failure_story,
    hang_basis,
    rank_rows,
    run_facts,
    sample_rows,
    sample_texts,
    span_rows,
    stack_rows,
    verdict_name,
)
from kit.startup.server import start_server
from kit.startup.serving import OnChange, ReadyNotice, ServingLimits, as_verdict, watch_serving
from kit.startup.watch import Progress, Watcher

ProgressCallback = Callable[[Progress], None]


def verdict_stacks(watcher: Watcher, now: float) -> dict[str, RankStack]:
    """The stacks a HUNG or DEADLINE verdict shows: the watch's last sample when it is recent (no
    second dump within STACK_EVERY_S), else one more sample taken now without suspending anyone."""
    samples = watcher.tracker.stack_samples
    last = samples[-1] if samples else None
    if last is None or now - last.t >= STACK_EVERY_S or not last.ranks:
        last = watcher.read_stacks(now, watcher.last_state)
    return {stack.rank: stack for stack in last.ranks}


def verdict_samples(result: UpResult, watcher: Watcher) -> dict[str, str]:
    """The dumps of the stack samples RESULT lists (a HUNG's or a DEADLINE's), by bundle name."""
    return sample_texts(watcher.tracker.stacks_while_quiet()) if result.stack_samples else {}


def seen_by(watcher: Watcher, now: float, container: str, upstream: UpstreamEvidence | None = None) -> Seen:
    """What the watch read besides the log, the kernel's log read now (OOM lines), and the upstream
    tools' word asked for this verdict (`ask_upstream`)."""
    state = watcher.final_state or watcher.last_state
    sample = watcher.last_sample
    # Only sources over real processes read the kernel's log (a replay's ranks are not the host's).
    read_kernel = getattr(watcher.source, "kernel_log", None)
    lines, note = read_kernel() if callable(read_kernel) else ((), None)
    read_cgroup_now = getattr(watcher.source, "cgroup_now", None)
    cgroup_now = read_cgroup_now() if callable(read_cgroup_now) else None
    return Seen(
        container=container,
        t=now,
        running=state is None or state.running,
        paused_for_s=None if watcher.paused_since is None else now - watcher.paused_since,
        oom_killed=bool(state and state.oom_killed),
        exit_code=None if state is None else state.exit_code,
        gone=bool(state and state.gone),
        cgroup_first=watcher.cgroup_first,
        cgroup_last=cgroup_now or watcher.cgroup_last,
        rank_processes=None if sample is None else sample.rank_processes,
        pid_ranks={**getattr(watcher.source, "pid_names", {}), **watcher.pid_ranks},
        child_exits=tuple(watcher.child_exits),
        kernel_lines=lines,
        kernel_note=note,
        upstream=upstream.words() if upstream is not None else (),
    )


def ask_upstream(source: Source, watcher: Watcher) -> UpstreamEvidence:
    """The upstream tools' word on a verdict other than READY (kit/runtime/upstream.py), asked once,
    before its causes are ranked: SGLang's soft watchdog from the log, NCCL RAS and the flight
    recorder asked where the server still runs. Its raw answers (`files`) go into the bundle."""
    return gather(source, watcher.soft_watchdog.words())


def _result(
    spec_target: str,
    image: str,
    container_name: str,
    verdict: Verdict,
    watcher: Watcher,
    now: float,
    stacks: dict[str, RankStack],
    device: str,
    nodes: int | None = None,
    upstream: UpstreamEvidence | None = None,
    **extra,
) -> UpResult:
    """The result of VERDICT, its causes ranked over one evidence record: what the watch read, the
    kernel's log, the stacks, and `upstream` (`ask_upstream`, None at READY)."""
    tracker = watcher.tracker
    explanation = explain_hang(stacks) if stacks else None
    waiting, missing = explain_ranks(verdict, explanation)
    environment = watcher.source.environment()
    seen = seen_by(watcher, now, container_name, upstream)
    facts = run_facts(tracker, device, environment, nodes)
    record = evidence_for(
        verdict, tracker, stacks, facts, seen, extra.get("gpus"), watcher.environment_evidence()
    )
    first, consequences = failure_story(verdict, tracker, record)
    readable = None if tracker.last_sample is None else readable_counters(tracker.last_sample)
    fields: dict = {
        "target": spec_target,
        "image": image,
        "container": container_name,
        "verdict": verdict_name(verdict),
        "exit_code": int(verdict.exit_code),
        "phase": tracker.phase.value if tracker.phase else None,
        "ranks": rank_rows(tracker, now),
        "timeline": span_rows(tracker, now),
        "stacks": stack_rows(stacks),
        "waiting_ranks": waiting,
        "missing_ranks": missing,
        "likely_causes": causes_for(verdict, tracker, stacks, device, record=record),
        "direct_evidence": (
            *record.lines(),
            *((seen.kernel_note,) if seen.kernel_note and not isinstance(verdict, Ready) else ()),
        ),
        "first_failure": first.describe() if first is not None else None,
        "consequences": consequences,
        "paused": seen.paused_for_s is not None,
        "activity": tracker.activity(),
        "survived_errors": error_lines(
            tracker,
            now,
            ended=watcher.final_state is not None,
            fatal=verdict.exception if isinstance(verdict, Crashed) else None,
        ),
        "gpu_error": tracker.gpu_error,
        "never_seen_ranks": tuple(rank.key for rank in tracker.never_seen()),
        "container_gone": bool(watcher.final_state is not None and watcher.final_state.gone),
        "counters": None if readable is None else readable.as_dict(),
        "upstream": () if upstream is None else upstream.lines(),
    }
    starts = [span.start for span in tracker.timeline]
    fields["launch_s"] = round((min(starts) if starts else now) - tracker.started_at, 2)
    if isinstance(verdict, Ready):
        fields["startup_s"] = round(verdict.at - tracker.started_at, 2)
    elif isinstance(verdict, Hung):
        rests_on, complete = hang_basis(verdict, unread_for_hang(readable, gpu=bool(facts.gpu)), seen)
        fields.update(
            quiet_for_s=round(verdict.quiet_for_s, 1),
            stuck_ranks=verdict.stuck_ranks,
            evidence=verdict.evidence,
            limit_s=None if tracker.stage == "serving" else tracker.limits.stall_window_s.of(tracker.stage),
            rests_on=rests_on,
            evidence_complete=complete,
            stack_samples=sample_rows(tracker.stacks_while_quiet(), tracker.started_at),
        )
    elif isinstance(verdict, Deadline):
        given = tracker.stage in tracker.limits.deadlines_given
        fields.update(
            limit_s=verdict.limit_s,
            limit_by="--deadline" if given else "profile",
            stuck_ranks=tracker.stuck_ranks(),
            evidence=tracker.evidence(),
            stack_samples=sample_rows(tracker.stacks_while_quiet(), tracker.started_at),
        )
    elif isinstance(verdict, Crashed):
        fields.update(exception=verdict.exception, evidence=verdict.evidence)
    fields["deadlines_passed"] = deadline_rows(watcher, now)
    attempts = watcher.attempts
    if attempts.earlier:
        fields.update(
            attempt=attempts.number,
            attempts=attempts.summary(),
            earlier_attempts=tuple(a.describe() for a in attempts.earlier),
        )
    fields.update(extra)
    return UpResult(**fields)


def deadline_rows(watcher: Watcher, now: float) -> tuple[DeadlineRow, ...]:
    """The stages that ran past their deadline and went on, with how long each took in the end."""
    rows = []
    for overrun in watcher.overruns:
        took = None
        if overrun.attempt == watcher.attempts.number:
            spans = [s for s in watcher.tracker.timeline if s.phase.value == overrun.stage]
            ends = [now if s.end is None else s.end for s in spans]
            if spans:
                took = round(max(ends) - min(s.start for s in spans), 2)
        rows.append(DeadlineRow(overrun.stage, overrun.limit_s, took, overrun.moving, overrun.attempt))
    return tuple(rows)


def follow_source(
    source: Source,
    spec: LaunchSpec,
    limits: PhaseLimits,
    *,
    session: str,
    first_token: bool = True,
    on_progress: ProgressCallback | None = None,
    inventory: GpuInventory | None = None,
    max_attempts: int = 3,
    deadline_policy: DeadlinePolicy = DeadlinePolicy.REPORT,
    serve: ServingLimits | None = None,
    on_serving: OnChange | None = None,
) -> UpResult:
    """Follow a server to its verdict; at READY time the first token, else diagnose.

    A stage past its deadline is reported and followed on (DeadlinePolicy.REPORT), or ends the watch
    with DEADLINE where the deadline is what is tested (DeadlinePolicy.VERDICT: the smoke tests).
    With `serve`, a READY server is then watched while it serves (kit/startup/serving.py) until it
    hangs or crashes, or until Ctrl-C / SIGTERM."""
    note_start(session, spec.target, source.name)  # `kit bundle create --last` knows the newest start
    watcher = Watcher(source, limits, max_attempts=max_attempts, deadline_policy=deadline_policy)
    history = SampleHistory()

    def progressed(progress: Progress) -> None:
        history.add(progress.sample)
        if on_progress is not None:
            on_progress(progress)

    verdict = watcher.run(progressed)
    now = source.clock()
    api_key = api_key_from_env(spec)  # read once: the first token and the serving watch use the same key
    stacks: dict[str, RankStack] = {}
    if isinstance(verdict, (Hung, Deadline)):
        stacks = verdict_stacks(watcher, now)
    nodes = launch_nodes(spec.argv)
    upstream = None if isinstance(verdict, Ready) else ask_upstream(source, watcher)
    result = _result(
        spec.target,
        spec.image,
        source.name,
        verdict,
        watcher,
        now,
        stacks,
        spec.device,
        nodes,
        upstream,
        gpus=inventory,
    )
    if isinstance(verdict, Ready) and source.base_url:
        said = server_startup_time(source.base_url, transport=source.http_transport(), api_key=api_key)
        result = _replace(result, sglang_startup_time=said)
    if isinstance(verdict, Ready) and first_token and source.base_url:
        try:
            token = chat_first_token(
                source.base_url,
                spec.model_path,
                timeout_s=limits.deadline_s.first_token,
                transport=source.http_transport(),
                api_key=api_key,
            )
            result = _replace(
                result,
                first_token_s=round(token.first_token_s, 3),
                first_token_endpoint=token.endpoint,
                first_token_in=token.first_in,
                reply=token.text or token.reasoning,
            )
        except CheckFailed as exc:
            upstream = ask_upstream(source, watcher)  # READY had no causes to rank: its word alone
            result = _replace(
                result,
                verdict="failed",
                exit_code=int(ExitCode.FAILED),
                exception=exc.one_line(),
                upstream=upstream.lines(),
            )
    if serve is not None and result.verdict == "ready":
        result, stacks, upstream = serve_ready(
            result,
            watcher,
            spec,
            serve,
            on_serving,
            inventory,
            base_url=source.base_url,
            api_key=api_key,
            history=history,
        )
    result = _replace(result, activity_series=series_rows(history.samples, watcher.tracker.started_at))
    if result.verdict != "ready":
        # The runs folder and a bundle (fingerprint, log, stacks, picture), secrets masked.
        files = upstream.files if upstream is not None else None
        samples = verdict_samples(result, watcher)
        recorded = record_run(
            session, source, spec, limits, stacks, jsonable(result), upstream=files, samples=samples
        )
        result = _replace(
            result,
            diagnostics=str(recorded.folder),
            bundle=str(recorded.bundle) if recorded.bundle else None,
            notes=(*result.notes, recorded.note) if recorded.note else result.notes,
        )
    return result


def serve_ready(
    ready: UpResult,
    watcher: Watcher,
    spec: LaunchSpec | None,
    limits: ServingLimits,
    on_change: OnChange | None,
    inventory: GpuInventory | None,
    *,
    base_url: str | None,
    api_key: str | None,
    history: SampleHistory | None = None,
) -> tuple[UpResult, dict[str, RankStack], UpstreamEvidence | None]:
    """Watch a READY server at BASE_URL (with its API key) while it serves. Ctrl-C / SIGTERM: the READY
    result with the serving counters (exit 0); HUNG / CRASHED: that verdict's result (with stacks for
    HUNG) and the upstream tools' word on it, to be recorded."""
    source = watcher.source
    if on_change is not None:
        on_change(ReadyNotice(ready))  # READY and its first token, said before the serving watch
    call, state, _interrupted = watch_serving(
        watcher,
        limits,
        base_url=base_url,
        api_key=api_key,
        transport=source.http_transport(),
        on_change=on_change,
        on_sample=None if history is None else history.add,
    )
    now = source.clock()
    summary = {
        **state.summary(now, since=watcher.tracker.started_at),
        "verdict": call.verdict.value,
        "why": call.why,
    }
    if call.verdict.value not in ("hung", "crashed"):
        return _replace(ready, serving=summary), {}, None
    verdict = as_verdict(call, state, watcher, now)
    stacks = verdict_stacks(watcher, now) if isinstance(verdict, Hung) else {}
    device = spec.device if spec is not None else "cpu"
    nodes = launch_nodes(spec.argv) if spec is not None else None
    upstream = ask_upstream(source, watcher)
    result = _result(
        ready.target,
        ready.image,
        ready.container,
        verdict,
        watcher,
        now,
        stacks,
        device,
        nodes,
        upstream,
        gpus=inventory,
    )
    keep = {k: getattr(ready, k) for k in ("startup_s", "first_token_s", "first_token_endpoint", "reply")}
    return _replace(result, exception=call.why, serving=summary, **keep), stacks, upstream


def follow_container(
    container: Container,
    spec: LaunchSpec,
    limits: PhaseLimits,
    *,
    session: str,
    first_token: bool = True,
    on_progress: ProgressCallback | None = None,
    max_attempts: int = 3,
    deadline_policy: DeadlinePolicy = DeadlinePolicy.REPORT,
    serve: ServingLimits | None = None,
    on_serving: OnChange | None = None,
) -> UpResult:
    """`follow_source` over a container: NVML where the launch uses GPUs, the host's inventory."""
    gpus = open_nvml() if spec.device == "cuda" else None
    inventory = gpus.inventory() if gpus is not None else read_inventory()
    source = DockerSource(container, gpus=gpus, port=spec.port)
    try:
        result = follow_source(
            source,
            spec,
            limits,
            session=session,
            first_token=first_token,
            on_progress=on_progress,
            max_attempts=max_attempts,
            inventory=inventory,
            deadline_policy=deadline_policy,
            serve=serve,
            on_serving=on_serving,
        )
        # A GPU lost during the start (a P2P hang can do it) is part of the verdict; so is where its
        # Xid evidence came from (NVML's events only count from their registration).
        notes = tuple(note for note in (lost_note(gpus), xid_note(gpus)) if note)
        return _replace(result, notes=(*result.notes, *notes)) if notes else result
    finally:
        source.close()
        if gpus is not None:
            gpus.close()


def _replace(result: UpResult, **changes) -> UpResult:
    return dataclasses.replace(result, **changes)


def run_up(
    spec: LaunchSpec,
    limits: PhaseLimits,
    *,
    fault: str | None = None,
    keep: bool = False,
    on_progress: ProgressCallback | None = None,
    on_start: Callable[[runtime.RunningServer], None] | None = None,
    first_token: bool = True,
    deadline_policy: DeadlinePolicy = DeadlinePolicy.REPORT,
    serve: ServingLimits | None = None,
    on_serving: OnChange | None = None,
) -> UpResult:
    """Start the target's container, follow it to a verdict, measure the first token, clean up.

    The container is removed on every path (verdict, error, Ctrl-C/SIGTERM) unless keep=True, but
    never for a passed deadline: a DEADLINE verdict (DeadlinePolicy.VERDICT) leaves it running.
    """
    server = start_server(spec, fault=fault, diagnose=True)
    result: UpResult | None = None
    try:
        if on_start:
            on_start(server)
        result = follow_container(
            server.container,
            spec,
            limits,
            session=server.session,
            first_token=first_token,
            on_progress=on_progress,
            deadline_policy=deadline_policy,
            serve=serve,
            on_serving=on_serving,
        )
    except KeyboardInterrupt:
        result = UpResult(spec.target, spec.image, server.name, "interrupted", int(ExitCode.INTERRUPTED))
    finally:
        removed = False
        kept = None if result is None else keep_reason(result)
        if kept is not None and result is not None:
            result = _replace(result, kept=kept)
        # A stage past its deadline still moves: that is no harm, so the server is left to the user.
        # A HUNG whose evidence is not complete is kept too (keep_reason).
        if not keep and kept is None and not (result is not None and result.verdict == "deadline"):
            try:
                removed = runtime.remove(server.container)
            except KitError:
                if result is not None:  # report it without hiding an error already on its way
                    result = _replace(result, notes=(*result.notes, f"could not remove {server.name}"))
    assert result is not None
    return _replace(result, container_removed=removed)


def keep_reason(result: UpResult) -> str | None:
    """Why a server judged HUNG is kept rather than removed, with the command that removes it; None
    when its evidence is complete (the stacks confirm the hang, the counters were readable) or the
    verdict is not HUNG. A paused container is never removed: unpausing it may be all it needs."""
    if result.verdict != "hung" and not result.paused:
        return None
    if result.paused:
        return (
            f"the container is paused, so it is never removed: `docker unpause {result.container}` "
            f"resumes it, `kit down {result.container}` removes it"
        )
    if result.evidence_complete:
        return None
    return (
        f"the evidence is not complete ({result.rests_on or 'counters only'}): the server is left "
        f"running to look at; `kit down {result.container}` removes it"
    )


def launch_nodes(argv: tuple[str, ...] | list[str]) -> int:
    """How many nodes the launch spans: its --nnodes (SGLang's flag), else one."""
    args = list(argv)
    for index, arg in enumerate(args):
        value = arg.split("=", 1)[1] if arg.startswith("--nnodes=") else None
        if arg == "--nnodes" and index + 1 < len(args):
            value = args[index + 1]
        if value is not None and value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def run_watch(
    container_ref: str,
    spec: LaunchSpec,
    limits: PhaseLimits,
    *,
    on_progress: ProgressCallback | None = None,
    first_token: bool = False,
    max_attempts: int = 3,
    deadline_policy: DeadlinePolicy = DeadlinePolicy.REPORT,
    serve: ServingLimits | None = None,
    on_serving: OnChange | None = None,
) -> UpResult:
    """Follow a container someone else started (compose, systemd); it is never removed here.

    A restart policy may start it again after a crash: the watch follows up to `max_attempts`
    launch attempts and judges the last one (the result counts the earlier ones)."""
    container = runtime.attach(container_ref)
    try:
        return follow_container(
            container,
            spec,
            limits,
            session=runtime.new_session_id(),
            first_token=first_token,
            on_progress=on_progress,
            max_attempts=max_attempts,
            deadline_policy=deadline_policy,
            serve=serve,
            on_serving=on_serving,
        )
    except KeyboardInterrupt:
        return UpResult(spec.target, spec.image, container.name, "interrupted", int(ExitCode.INTERRUPTED))
