"""What `kit up` / `kit watch` return, and the verdict paragraph people read. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from kit.diagnose.stacks import HangExplanation, RankStack
from kit.logs import Crashed, Deadline, Hung, Ready, Tracker, Verdict
from kit.logs.causes import match_causes
from kit.runtime.nvml import GpuInventory


@dataclass(frozen=True)
class RankRow:
    rank: str
    phase: str | None
    last_milestone: str | None
    in_phase_s: float


@dataclass(frozen=True)
class SpanRow:
    rank: str
    phase: str
    start_s: float
    elapsed_s: float
    open: bool


@dataclass(frozen=True)
class StackRow:
    rank: str
    pid: int | None
    kind: str
    where: str


@dataclass(frozen=True)
class CauseRow:
    id: str
    title: str
    why: str
    what_to_try: tuple[str, ...]


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
    first_token_s: float | None = None
    first_token_endpoint: str | None = None
    first_token_in: str | None = None
    """The delta field the first token arrived in: content, or reasoning_content (a thinking model)."""
    reply: str | None = None
    quiet_for_s: float | None = None
    limit_s: float | None = None
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
    """The host's GPUs as NVML saw them at the start (or why it could not look)."""


def rank_rows(tracker: Tracker, now: float) -> tuple[RankRow, ...]:
    return tuple(
        RankRow(
            s.label,
            s.phase.value if s.phase else None,
            s.milestone.value if s.milestone else None,
            round(max(0.0, now - s.phase_since), 2),
        )
        for s in tracker.rank_states
    )


def span_rows(tracker: Tracker, now: float) -> tuple[SpanRow, ...]:
    start = tracker.started_at
    return tuple(
        SpanRow(
            span.rank,
            span.phase.value,
            round(span.start - start, 2),
            round(span.elapsed(now), 2),
            span.end is None,
        )
        for span in tracker.timeline
    )


def stack_rows(stacks: dict[str, RankStack]) -> tuple[StackRow, ...]:
    return tuple(StackRow(s.rank, s.pid, s.kind.value, s.where) for s in stacks.values())


def causes_for(
    verdict: Verdict, tracker: Tracker, stacks: dict[str, RankStack], device: str
) -> tuple[CauseRow, ...]:
    """Likely causes from the causes book, with the live evidence (and where ranks wait) as hints."""
    if isinstance(verdict, Ready):
        return ()
    outcome = "crashed" if isinstance(verdict, Crashed) else "stalled"
    haystack = "\n".join(
        [
            *tracker.evidence(),
            *(s.where for s in stacks.values()),
            *(s.kind.value for s in stacks.values()),
            f"device={device}",
            getattr(verdict, "exception", None) or "",
            "missing-ranks" if any(tracker.missing()) else "",
        ]
    )
    rows = [
        CauseRow(m.cause.id, m.cause.title, m.cause.why, m.cause.what_to_try)
        for m in match_causes(outcome, tracker.phase, haystack, device=device)
    ]
    if any(s.kind.value == "planted-fault" for s in stacks.values()):
        rows.insert(
            0,
            CauseRow(
                "planted-fault",
                "a planted test fault (KIT_FAULT)",
                "a rank's stack sits in the rehearsal image's test-only fault switch",
                ("run without --fault",),
            ),
        )
    return tuple(rows)


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
    if result.verdict == "ready":
        ttft = f"; first token {result.first_token_s:.2f} s" if result.first_token_s is not None else ""
        return f"READY {result.target} after {result.startup_s:.1f} s{ttft}"
    if result.verdict == "hung":
        return f"HUNG{phase}: no log line and no activity for {result.quiet_for_s:.0f} s"
    if result.verdict == "deadline":
        return f"DEADLINE{phase}: still going after {result.limit_s:.0f} s (the profile's limit)"
    if result.verdict == "crashed":
        return f"CRASHED{phase}: {result.exception or 'the server stopped'}"
    if result.verdict == "failed":
        return f"FAILED: the server said ready but the first token failed: {result.exception}"
    return f"INTERRUPTED{phase}"


def verdict_lines(result: UpResult) -> list[str]:
    """The short paragraph under the timeline: what happened, who waits for whom, what to try."""
    lines = [headline(result)]
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
