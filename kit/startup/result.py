"""What `kit up` / `kit watch` return, and the verdict paragraph people read. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from kit.logs import Crashed, Deadline, Hung, Ready, Tracker, Verdict
from kit.logs.activity import ActivitySummary
from kit.logs.causes import match_causes

# The rank, span and cause rows are shared with `kit analyze` (one JSON shape, docs/schema/).
from kit.logs.rows import CauseRow, RankRow, SpanRow, cause_rows, rank_rows, span_rows
from kit.logs.stacks import HangExplanation, RankStack
from kit.runtime.nvml import GpuInventory
from kit.startup.overrun import DeadlineRow

__all__ = ["CauseRow", "RankRow", "SpanRow", "rank_rows", "span_rows"]


@dataclass(frozen=True)
class StackRow:
    rank: str
    pid: int | None
    kind: str
    where: str


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


def stack_rows(stacks: dict[str, RankStack]) -> tuple[StackRow, ...]:
    return tuple(StackRow(s.rank, s.pid, s.kind.value, s.where) for s in stacks.values())


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


def causes_for(
    verdict: Verdict,
    tracker: Tracker,
    stacks: dict[str, RankStack],
    device: str,
    gpus: GpuInventory | None = None,
    environment: tuple[str, ...] = (),
) -> tuple[CauseRow, ...]:
    """Likely causes ranked by the live evidence: the log's last lines, the exception, where each
    rank's stack waits, the GPUs' facts, the server's environment (a proxy for loopback) and the
    activity the verdict was reached on (its shape: quiet ranks point at a rendezvous, spinning
    ones at a hung collective)."""
    if isinstance(verdict, Ready):
        return ()
    activity = tracker.activity()
    outcome = "crashed" if isinstance(verdict, Crashed) else "hung"
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
            f"device={device}",
            "missing-ranks" if any(tracker.missing()) else "",
        ]
    )
    phase = getattr(verdict, "phase", None) or tracker.phase
    shape = activity.shape if activity is not None and not isinstance(verdict, Crashed) else None
    matches = match_causes(outcome, phase, haystack, device=device, exception=raised, activity=shape)
    rows = list(cause_rows(matches))
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
    if result.stuck_ranks and not (result.waiting_ranks or result.missing_ranks):
        lines.append(f"  stuck in {result.phase}: {', '.join(result.stuck_ranks)}")
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
