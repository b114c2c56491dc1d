"""What `kit up` / `kit watch` return, and the verdict paragraph people read. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kit.logs import Crashed, Deadline, Hung, Ready, Tracker, Verdict
from kit.logs.activity import ActivitySummary, CgroupReading
from kit.logs.causes import rank_causes
from kit.logs.evidence import (
    UPSTREAM_SOURCES,
    Evidence,
    Facts,
    Finding,
    FirstFailure,
    UpstreamWord,
    cgroup_findings,
    child_exit_findings,
    container_findings,
    first_failure,
    kernel_findings,
    process_findings,
)

# The rank, span and cause rows are shared with `kit analyze` (one JSON shape, docs/schema/).
from kit.logs.rows import CauseRow, RankRow, SpanRow, cause_rows, rank_rows, span_rows
from kit.logs.stacks import IDLE_WORDS, HangExplanation, RankStack, StackSample
from kit.runtime.nvml import GpuInventory
from kit.startup.overrun import DeadlineRow

__all__ = ["CauseRow", "RankRow", "SpanRow", "rank_rows", "span_rows"]
UPSTREAM_PREFIXES = tuple(f"{source}: " for source in UPSTREAM_SOURCES)


@dataclass(frozen=True)
class StackRow:
    rank: str
    pid: int | None
    kind: str
    where: str
    state: str = ""  # waiting, spinning, working, sleeping, unknown, unreadable (kit/logs/stacks.toml)
    what: str = ""  # the place in words: "inductor compile, cc1plus child"
    held: str | None = None  # stopped, tracing-stop, frozen: nothing in it runs


@dataclass(frozen=True)
class SampleRow:
    """One stack sample a HUNG rests on: when (seconds from the start), every rank's stack as a row
    (its dump is the bundle's stacks/RANK.sampleN.txt), or why none could be read."""

    number: int
    t_s: float
    ranks: tuple[StackRow, ...] = ()
    unreadable: str | None = None


@dataclass(frozen=True)
class Seen:
    """What the watch read besides the log, for the evidence record at a verdict (kit up and kit
    watch fill it from the Watcher; `kernel_lines` from the kernel's ring buffer, or `kernel_note`
    saying why it could not be read)."""

    container: str
    t: float = 0.0
    running: bool = True
    paused_for_s: float | None = None
    oom_killed: bool = False
    exit_code: int | None = None
    gone: bool = False
    cgroup_first: CgroupReading | None = None
    cgroup_last: CgroupReading | None = None
    rank_processes: tuple[tuple[str, int, str], ...] | None = None
    pid_ranks: Mapping[int, str] = field(default_factory=dict)
    child_exits: tuple[tuple[float, str], ...] = ()
    kernel_lines: tuple[str, ...] = ()
    kernel_note: str | None = None
    upstream: tuple[UpstreamWord, ...] = ()

    def findings(self) -> tuple[Finding, ...]:
        return (
            *container_findings(
                name=self.container,
                paused=self.paused_for_s is not None,
                paused_for_s=self.paused_for_s,
                oom_killed=self.oom_killed,
                exit_code=self.exit_code,
                gone=self.gone,
                running=self.running,
                t=self.t,
                teardown=next((line for _, line in self.child_exits if "SIGQUIT" in line.upper()), None),
            ),
            *cgroup_findings(self.cgroup_first, self.cgroup_last, self.t),
            *process_findings(self.rank_processes, self.t),
            *child_exit_findings(self.child_exits, self.pid_ranks),
            *kernel_findings(self.kernel_lines, self.pid_ranks),
        )


@dataclass(frozen=True)
class UpResult:
    target: str
    image: str
    container: str
    verdict: str
    """ready | crashed | hung | deadline | interrupted | failed (ready, but the first token failed)"""
    exit_code: int
    phase: str | None = None
    startup_s: float | None = None
    launch_s: float | None = None
    """From the server's start to its first milestone: imports, argument checks, scheduler start."""
    first_token_s: float | None = None
    first_token_endpoint: str | None = None
    first_token_in: str | None = None
    """The delta field the first token arrived in: content, or reasoning_content (a thinking model)."""
    reply: str | None = None
    quiet_for_s: float | None = None
    limit_s: float | None = None
    limit_by: str | None = None
    """Whose limit a DEADLINE passed: "profile" (the catalog's timing) or "--deadline" (the user's)."""
    stuck_ranks: tuple[str, ...] = ()
    missing_ranks: tuple[str, ...] = ()
    waiting_ranks: tuple[str, ...] = ()
    exception: str | None = None
    evidence: tuple[str, ...] = ()
    ranks: tuple[RankRow, ...] = ()
    timeline: tuple[SpanRow, ...] = ()
    stacks: tuple[StackRow, ...] = ()
    likely_causes: tuple[CauseRow, ...] = ()
    diagnostics: str | None = None
    bundle: str | None = None
    """The bundle (.tar.gz) written for a verdict other than READY: kit bundle show / kit repro it."""
    container_removed: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
    gpus: GpuInventory | None = None
    attempt: int = 1
    """The launch attempt judged (a supervisor restarting the server starts another)."""
    attempts: str | None = None
    """With earlier attempts: `attempt 3 of 3; attempts 1-2 CRASHED in load`."""
    earlier_attempts: tuple[str, ...] = ()
    """How each earlier attempt ended, in order: `CRASHED in load`, `READY`, ..."""
    activity: ActivitySummary | None = None
    """What the server's processes did over the last samples before the verdict (CPU per rank,
    reads, GPU memory and utilisation, compile writes) and its shape (quiet, spinning)."""
    survived_errors: tuple[str, ...] = ()
    """Errors the server logged and went on after: evidence, never the verdict."""
    gpu_error: str | None = None
    """Why NVML could not read the GPUs during the watch (a GPU lost): a fact, not a traceback."""
    deadlines_passed: tuple[DeadlineRow, ...] = ()
    """Stages that ran past their deadline while still moving and were followed on (kit up, kit
    watch): news in the result, never the verdict (kit/startup/overrun.py)."""
    serving: dict | None = None
    """With --serve: the watch after READY (its last verdict and why, probes, batches, ranks)."""
    activity_series: tuple[dict, ...] = ()
    """The activity over the whole watch (kit/logs/activity.py series_rows), for the picture."""
    never_seen_ranks: tuple[str, ...] = ()
    """Ranks the launch promised that printed nothing at all."""
    sglang_startup_time: dict | None = None
    """At READY: SGLang's own start-up phases (`/server_info`'s startup_time: load_weight,
    kv_cache_allocation, cuda_graph, scheduler_e2e, tokenizer_e2e seconds), beside the kit's."""
    upstream: tuple[str, ...] = ()
    """The upstream tools' word on a verdict other than READY (kit/runtime/upstream.py): SGLang's
    soft watchdog, NCCL RAS (two snapshots), the flight recorder's fr_trace, or why each was not asked."""
    container_gone: bool = False
    """The container was gone when the watch ended (its --rm, or someone removed it): never "kept"."""
    counters: dict | None = None
    """Which activity counters the watch could read on this host ({"read": [...], "unread": [...]},
    kit/logs/counters.py): a verdict resting on counters says which it had."""
    direct_evidence: tuple[str, ...] = ()
    """What the engine, the cgroup, the kernel, SGLang's child-exit lines and the processes said at
    the verdict (kit/logs/evidence.py), one line each: the record the causes were ranked on."""
    first_failure: str | None = None
    """The process that died first and why, when one did (the headline of a crash)."""
    consequences: tuple[str, ...] = ()
    """Errors of other ranks after the first failure: its consequences, not causes."""
    rests_on: str | None = None
    """For HUNG: 'stacks and counters' (every rank idle at the same place in two samples) or
    'counters only: <why the stacks could not say>'."""
    paused: bool = False
    """The engine reported the container paused at the verdict (docker pause)."""
    kept: str | None = None
    """Why the container was kept although the verdict would remove it, and how to remove it."""
    evidence_complete: bool | None = None
    """For HUNG: the stacks confirm it and the counters were readable, so `kit up` may remove the
    server; False keeps it (what could not be seen is in `rests_on`)."""
    stack_samples: tuple[SampleRow, ...] = ()
    """For HUNG and DEADLINE: the stack samples taken since the last progress (at most two), the ones
    `rests_on` judged; their dumps are in the bundle (stacks/RANK.sampleN.txt)."""


def stack_rows(stacks: dict[str, RankStack]) -> tuple[StackRow, ...]:
    return tuple(
        StackRow(s.rank, s.pid, s.kind.value, s.where, s.word, s.what, s.held) for s in stacks.values()
    )


def sample_rows(samples: Sequence[StackSample], started_at: float) -> tuple[SampleRow, ...]:
    return tuple(
        SampleRow(
            number,
            round(sample.t - started_at, 1),
            stack_rows({r.rank: r for r in sample.ranks}),
            None if sample.readable else sample.why_unreadable(),
        )
        for number, sample in enumerate(samples, start=1)
    )


def sample_texts(samples: Sequence[StackSample]) -> dict[str, str]:
    """Each sample's dumps by bundle name: {"TP0.sample1": text, ...}."""
    return {f"{r.rank}.sample{n}": r.text for n, sample in enumerate(samples, start=1) for r in sample.ranks}


def hardware_evidence(gpus: GpuInventory | None, tp: int = 1) -> list[str]:
    """What the GPUs themselves say about likely causes, as evidence lines (PCIe-only cards: P2P)."""
    if gpus is None or not gpus.devices:
        return []
    names = sorted({d.name for d in gpus.devices})
    lines = [
        f"gpus: {gpus.count} x {', '.join(names)} (compute capability {gpus.devices[0].compute_capability})"
    ]
    if gpus.count > 1 and not any(d.nvlinks for d in gpus.devices):
        lines.append("gpu link: PCIe, no NVLink (NCCL uses PCIe P2P or host shared memory)")
        if tp > 2:
            # SGLang's own rule (0.5.10.post1 and 0.5.23 custom_all_reduce_utils.py): custom
            # all-reduce is off on more than two PCIe-only GPUs, so it cannot be the cause.
            lines.append(
                f"custom all-reduce: off (SGLang disables it on more than two PCIe-only GPUs; tp={tp})"
            )
    return lines


_PROXY_NAMES = ("http_proxy", "https_proxy", "all_proxy")


def run_facts(
    tracker: Tracker,
    device: str | None,
    environment: Mapping[str, str] | None,
    nodes: int | None = None,
) -> Facts:
    """The facts causes need: nodes (the launch line's --nnodes, else what the kit launched), a GPU
    (the launch's device), a proxy (in the server's own environment); None where unknown."""
    said: dict[str, str] = {}
    if tracker.launch is not None:
        nodes = tracker.launch.nnodes
        said["nodes"] = "the launch line"
    elif nodes is not None:
        said["nodes"] = "the launch's arguments"
    gpu = None if device is None else device == "cuda"
    if device is not None:
        said["gpu"] = f"device {device}"
    proxy = None
    if environment is not None:
        set_ = sorted(k for k, v in environment.items() if k.lower() in _PROXY_NAMES and v.strip())
        proxy = bool(set_)
        said["proxy"] = (
            f"the server's environment sets {', '.join(set_)}" if set_ else "none in the server's environment"
        )
    return Facts(nodes=nodes, gpu=gpu, proxy=proxy, said=said)


def evidence_for(
    verdict: Verdict,
    tracker: Tracker,
    stacks: Mapping[str, RankStack],
    facts: Facts,
    seen: Seen | None = None,
    gpus: GpuInventory | None = None,
    environment: tuple[str, ...] = (),
) -> Evidence:
    """The one record a verdict's causes are ranked on: the log's text (kept lines, the exception,
    notes, error kinds), the GPUs' facts, the server's environment, the activity and its shape, the
    stacks, and what the engine, cgroup, kernel and processes said (`seen`)."""
    activity = tracker.activity()
    exception = getattr(verdict, "exception", None) or ""
    raised = "\n".join(
        [
            exception,
            tracker.gpu_error or "",  # NVML's own error: as hard a fact as an exception
            *environment,  # the server's own environment variables: read, not guessed
            *(str(e.fields.get("exception", "")) for e in tracker.recent_errors),
            *(str(e.fields.get("traceback", "")) for e in tracker.recent_errors),
        ]
    )
    haystack = "\n".join(
        [
            raised,
            *tracker.evidence(),
            *hardware_evidence(gpus, tensor_parallel(tracker)),
            activity.describe() if activity is not None else "",
            f"gpu error: {tracker.gpu_error}" if tracker.gpu_error else "",
            *(s.where for s in stacks.values()),
            *(s.kind.value for s in stacks.values()),
            *(f"kind={e.fields['kind']}" for e in tracker.recent_errors if "kind" in e.fields),
            "missing-ranks" if any(tracker.missing()) else "",
        ]
    )
    outcome = "crashed" if isinstance(verdict, Crashed) else "hung"
    phase = getattr(verdict, "phase", None) or tracker.phase
    shape = activity.shape if activity is not None and not isinstance(verdict, Crashed) else None
    return Evidence(
        outcome=outcome,
        phase=phase,
        facts=facts,
        findings=seen.findings() if seen is not None else (),
        upstream=seen.upstream if seen is not None else (),
        stacks=tuple(stacks.values()),
        log_text=haystack,
        raised_text=raised,
        shape=shape,
    )


def hang_basis(verdict: Hung, unread: tuple[str, ...], seen: Seen) -> tuple[str, bool]:
    """What a HUNG rests on, in words, and whether that is complete enough for `kit up` to remove
    the server: the stacks confirm it (every rank idle at the same place in two samples), the
    counters it needs were readable (`unread`: those that were not, kit/logs/counters.py
    `unread_for_hang`) and the container is not paused; or the server's own word decides it
    (`conclusive`: a proxy taking the warm-up), whatever the stacks say."""
    if verdict.conclusive:
        return f"the server's own word ({verdict.conclusive})", seen.paused_for_s is None
    if verdict.stacks_confirm:
        rests_on = f"stacks and counters ({verdict.basis})"
    else:
        rests_on = f"counters only ({verdict.basis})" if verdict.basis else "counters only"
    if unread:
        rests_on += f"; counters not readable here: {', '.join(unread)}"
    return rests_on, verdict.stacks_confirm and not unread and seen.paused_for_s is None


def causes_for(
    verdict: Verdict,
    tracker: Tracker,
    stacks: Mapping[str, RankStack],
    device: str | None,
    gpus: GpuInventory | None = None,
    environment: tuple[str, ...] = (),
    *,
    record: Evidence | None = None,
) -> tuple[CauseRow, ...]:
    """Likely causes ranked over the evidence record (kit/logs/causes.py rank_causes): `record` when
    the watch built one (`evidence_for`), else one from the tracker, the stacks and the device."""
    if isinstance(verdict, Ready):
        return ()
    if record is None:
        facts = run_facts(tracker, device, None)
        record = evidence_for(verdict, tracker, stacks, facts, None, gpus, environment)
    rows = list(cause_rows(rank_causes(record)))
    if any(s.kind.value == "planted-fault" for s in stacks.values()):
        rows.insert(
            0,
            CauseRow(
                id="planted-fault",
                title="a planted test fault (KIT_FAULT)",
                why="a rank's stack sits in the rehearsal image's test-only fault switch",
                what_to_try=("run without --fault",),
                evidence=("planted-fault",),
                generic=False,
                source="kit/rehearsal (the CPU rehearsal image's fault switch)",
            ),
        )
    return tuple(rows)


def failure_story(
    verdict: Verdict, tracker: Tracker, record: Evidence
) -> tuple[FirstFailure | None, tuple[str, ...]]:
    """The process that died first and why, and the other ranks' errors after it (consequences)."""
    first = first_failure(record.findings)
    if first is None or not isinstance(verdict, Crashed | Hung):
        return None, ()
    rank = first.who.split(" ", 1)[0]
    if first.who == "the server's main process" and "OOM killer" not in first.why:
        # The container's exit code alone: its main process ended by a signal, which SGLang sends
        # itself when it shuts down after a rank failed (kill_process_tree): not who failed first.
        return None, ()
    after = []
    for event in tracker.recent_errors:
        if event.rank_label == rank:
            continue
        what = str(event.fields.get("exception") or event.text.strip())
        if "crashed with exit code" in what or "scheduler died" in what:
            continue  # SGLang's report of the death itself, not a consequence
        after.append(f"{event.rank_label}: {what[:160]}")
    return first, tuple(dict.fromkeys(after))


def tensor_parallel(tracker: Tracker) -> int:
    """The TP size: from the launch's own arguments, else the expected ranks (plain TP)."""
    if tracker.launch is not None:
        return tracker.launch.tp
    return tracker.limits.expected_ranks or 1


def _message(text: str) -> str:
    """An exception line's message without its type: 'OSError: Repo id ...' -> 'Repo id ...'."""
    head, sep, rest = text.strip().partition(": ")
    return rest.strip() if sep and " " not in head else text.strip()


def error_lines(
    tracker: Tracker, now: float, *, ended: bool = False, fatal: str | None = None
) -> tuple[str, ...]:
    """The errors the server went on after, one line each: rank, exception (or the line). FATAL: the
    exception a crash ended on; the same error again (a chained traceback's other links:
    'HFValidationError: X' under 'OSError: X') is that crash, never something it went on after."""
    lines = []
    ended_on = _message(fatal) if fatal else None
    for event in tracker.survived_errors(now, ended=ended):
        what = str(event.fields.get("exception") or event.text.strip())
        if ended_on and _message(what) == ended_on:
            continue
        lines.append(f"{event.rank_label}: {what}"[:300])
    return tuple(lines)


def explain_ranks(
    verdict: Verdict, explanation: HangExplanation | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(waiting, missing): from stacks when there are some, else from the log's missing ranks."""
    if explanation and (explanation.waiting or explanation.missing):
        return (tuple(s.rank for s in explanation.waiting), tuple(s.rank for s in explanation.missing))
    if isinstance(verdict, Hung):
        return ((), verdict.missing_ranks)
    return ((), ())


def headline(result: UpResult) -> str:
    phase = f" in {result.phase}" if result.phase else ""
    if result.paused and result.verdict in ("hung", "deadline") and result.serving is None:
        quiet = f" for {result.quiet_for_s:.0f} s" if result.quiet_for_s is not None else ""
        return (
            f"HUNG{phase}: the container is paused (docker pause): nothing in it ran{quiet}; "
            f"`docker unpause {result.container}` resumes it"
        )
    if result.verdict == "crashed" and result.first_failure and result.serving is None:
        return f"CRASHED{phase}: {result.first_failure}"
    if result.serving is not None:
        word = result.serving.get("verdict", "serving").upper()
        return f"{word} (serving {result.serving.get('served_s', 0):.0f} s): {result.serving.get('why')}"
    if result.verdict == "ready":
        ttft = f"; first token {result.first_token_s:.2f} s" if result.first_token_s is not None else ""
        late = sorted({row.phase for row in result.deadlines_passed})
        past = f" ({', '.join(late)} past {'its' if len(late) == 1 else 'their'} deadline)" if late else ""
        return f"READY {result.target} after {result.startup_s:.1f} s{past}{ttft}"
    if result.verdict == "hung":
        return f"HUNG{phase}: no log line and no activity for {result.quiet_for_s:.0f} s"
    if result.verdict == "deadline":
        whose = "your --deadline" if result.limit_by == "--deadline" else "the profile's"
        return f"DEADLINE{phase}: still going after {result.limit_s:.0f} s ({whose} limit)"
    if result.verdict == "crashed":
        return f"CRASHED{phase}: {result.exception or 'the server stopped'}"
    if result.verdict == "failed":
        return f"FAILED: the server said ready but the first token failed: {result.exception}"
    return f"INTERRUPTED{phase}"


def sglang_phases(startup_time: dict | None) -> str | None:
    """`/server_info`'s startup_time as one line: SGLang's own phases, beside the kit's."""
    if not startup_time:
        return None
    parts = []
    for name, value in startup_time.items():
        if isinstance(value, dict):
            parts += [f"{name}.{k} {v:.1f} s" for k, v in value.items() if isinstance(v, int | float) and v]
        elif isinstance(value, int | float):
            parts.append(f"{name} {value:.1f} s")
    return "SGLang's own (/server_info startup_time): " + ", ".join(parts) if parts else None


def verdict_lines(result: UpResult) -> list[str]:
    """The short paragraph under the timeline: what happened, who waits for whom, what to try."""
    lines = [headline(result)]
    if result.attempts:
        lines.append(f"  {result.attempts}")
    for row in result.deadlines_passed:
        took = "" if row.took_s is None else f" (took {row.took_s:.1f} s)"
        lines.append(
            f"  {row.phase} passed its {row.limit_s:.0f} s deadline{took} and was followed on; "
            f"still moving then: {row.moving}"
        )
    stacks = {s.rank: s for s in result.stacks}
    for rank in result.waiting_ranks:
        lines.append(
            f"  waiting: {rank} ({stacks[rank].kind}: {stacks[rank].where})"
            if rank in stacks
            else f"  waiting: {rank}"
        )
    for rank in result.missing_ranks:
        detail = (
            f" (its stack: {stacks[rank].where})"
            if rank in stacks
            else " (never reached the step others did)"
        )
        lines.append(f"  missing: {rank}{detail}")
    # The ranks the log left in the phase, else those whose stacks stood idle; each as its stack says.
    idle = tuple(r.rank for r in result.stacks if r.held or r.state in IDLE_WORDS)
    stuck = result.stuck_ranks or (idle if result.verdict == "hung" else ())
    if stuck and not (result.waiting_ranks or result.missing_ranks):
        said = [f"{r} ({stacks[r].state})" if r in stacks and stacks[r].state else r for r in stuck]
        lines.append(f"  stuck in {result.phase}: {', '.join(said)}")
    if result.first_failure and result.consequences:
        lines.append("  then (consequences of the first failure, not causes):")
        lines.extend(f"    {line}" for line in result.consequences[:4])
    if result.rests_on:
        lines.append(f"  rests on: {result.rests_on}")
    for row in result.stacks:
        if row.state:
            held = f" {row.held}" if row.held else ""
            lines.append(f"  stack {row.rank}{held}: {row.state}: {row.what or row.kind} ({row.where[:100]})")
    # The upstream tools' lines are printed as their own block below.
    seen = [line for line in result.direct_evidence if not line.startswith(UPSTREAM_PREFIXES)]
    for line in seen[:6]:
        lines.append(f"  seen: {line[:200]}")
    if result.verdict in ("hung", "deadline", "crashed") and result.evidence:
        lines.append("  last lines:")
        lines.extend(f"    {line[:160]}" for line in result.evidence[-6:])
    if result.verdict != "ready" and result.activity is not None:
        lines.append(f"  {result.activity.describe()}")
    lines.extend(f"  {line}" for line in result.upstream)
    unread = (result.counters or {}).get("unread") or ()
    if result.verdict != "ready" and unread:
        lines.append(f"  counters not readable here: {', '.join(unread)}")
    if result.gpu_error:
        lines.append(f"  gpu: {result.gpu_error}")
    for error in result.survived_errors[-3:]:
        lines.append(f"  went on after: {error[:160]}")
    for cause in result.likely_causes[:4]:
        lines.append(f"  likely: {cause.title} - try: {'; '.join(cause.what_to_try[:2])}")
        because = [e for e in cause.evidence if e][:3]
        if because or cause.facts:
            lines.append("      rests on: " + "; ".join([*(e[:160] for e in because), *cause.facts]))
    if result.kept:
        lines.append(f"  kept: {result.kept}")
    if result.diagnostics:
        lines.append(f"  diagnostics: {result.diagnostics}")
    if result.bundle:
        lines.append(f"  bundle: {result.bundle}")
    return lines


def verdict_name(verdict: Verdict) -> str:
    if isinstance(verdict, Ready):
        return "ready"
    if isinstance(verdict, Crashed):
        return "crashed"
    if isinstance(verdict, Hung):
        return "hung"
    if isinstance(verdict, Deadline):
        return "deadline"
    raise TypeError(verdict)
