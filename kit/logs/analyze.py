"""Offline analysis of a whole log: which launch attempt, where start-up got to, who is behind, why.

The parser finds the events; the attempt splitter replays them on the log's own timestamps (no
activity samples: a log file has none), one tracker per launch attempt, and judges the last
attempt; causes.toml ranks likely causes by the evidence found. `outcome` is the live verdict's
word: "ready", "crashed", or "hung" when the log ends with neither (offline nobody can measure
how long it was quiet; "hung" says start-up stopped where the log stops).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from kit.errors import ExitCode
from kit.files import SKIPPED_MARK
from kit.logs.attempts import Attempts, LaunchCounter, across_skipped
from kit.logs.causes import match_causes
from kit.logs.digest import digest_text
from kit.logs.events import Event, Milestone, Note, Phase
from kit.logs.parser import parse_text
from kit.logs.patterns import PatternSet
from kit.logs.prefix import first_time
from kit.logs.reducer import STALLS
from kit.logs.rows import CauseRow, RankRow, SpanRow, cause_rows, rank_rows, span_rows
from kit.logs.tracker import Tracker
from kit.logs.verdicts import Crashed, Hung, PhaseLimits, Ready, Verdict
from kit.logs.wrappers import unwrap

Outcome = Literal["ready", "crashed", "hung"]
EXIT_CODES: dict[str, int] = {"ready": ExitCode.OK, "crashed": ExitCode.FAILED, "hung": ExitCode.HUNG}
_EVIDENCE_LIMIT = 20
_TAIL_LINES = 8
_LINE_CHARS = 500  # server_args and tqdm lines run to thousands of characters


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class MissingRow(_Frozen):
    milestone: Milestone
    ranks: list[str]
    never_seen: list[str]  # of those, the ranks that printed nothing at all


class EvidenceLine(_Frozen):
    line_no: int
    rank: str
    text: str


class AttemptRow(_Frozen):
    number: int
    outcome: Outcome
    phase: Phase | None
    last_milestone: Milestone | None
    started_at: datetime | None
    ended_at: datetime | None
    exception: str | None


class AttemptBlock(_Frozen):
    number: int  # the attempt judged: the last one
    count: int
    first_line: int  # where it begins in the log (1 when the log holds one attempt)
    summary: str  # "attempt 3 of 3; attempts 1-2 CRASHED in load"
    earlier: list[AttemptRow]


class ExpectedBlock(_Frozen):
    """The ranks the judged attempt's launch line promises (`server_args=`), or `--expected`."""

    source: Literal["launch", "limits"]
    ranks: list[str]
    nodes: int
    node_rank: int  # the node whose log this is
    never_seen: list[str]


class WrapperRow(_Frozen):
    """What a log collector put around the lines (kit/logs/wrappers.toml), stripped before parsing."""

    kind: str
    title: str
    count: int  # lines it was on (ansi: codes removed; crlf: line ends)
    example: str


class SkippedBlock(_Frozen):
    """The middle of a log too large to read whole (kit.files.read_log keeps its head and tail)."""

    bytes: int
    lines: int


class ServingStat(_Frozen):
    min: float
    median: float
    max: float
    count: int


class ServingBlock(_Frozen):
    """What the serving stretch of the log shows (kit/logs/digest.py): its batch lines' figures over
    the log and per slice of it over time, retractions and out-of-memory lines."""

    decode_batches: int | None  # None: a large log read as stretches (`sampled`), its lines not counted
    prefill_batches: int | None
    requests: int | None  # request-stats lines (ReqTimeStats)
    retractions: int
    retraction_lines: list[str]
    oom_lines: int
    oom_evidence: list[str]
    sampled: bool
    lines_read: int
    over_log: dict[
        str, ServingStat
    ]  # accept_len, accept_rate, gen_throughput, running, queued, kv_usage, mamba_usage
    over_time: list[dict[str, float | int | str | None]]  # per slice: from (stamp), lines, medians
    accept_floor: float | None  # the target's smoke floor for the acceptance length, when given
    accept_below_floor: bool | None


class AnalysisReport(_Frozen):
    source: str | None
    outcome: Outcome
    exit_code: int
    last_milestone: Milestone | None
    phase: Phase | None
    # how the phase is known
    phase_from: Literal["milestones", "exception", "serving", "progress", "nccl"] | None
    dialect: str | None  # newest SGLang wording seen ("0.4", "0.5", "0.5.16", "0.5.21"), if any
    lines: int
    started_at: datetime | None
    ended_at: datetime | None
    startup_s: float | None  # the judged attempt's start to "ready"
    attempt: AttemptBlock
    expected: ExpectedBlock | None
    ranks: list[RankRow]
    missing: list[MissingRow]
    stuck: list[str]
    timeline: list[SpanRow]
    evidence: list[EvidenceLine]
    exception: str | None
    tail: list[str]
    likely_causes: list[CauseRow]
    wrappers: list[WrapperRow] = []  # what was stripped from a pasted log (Compose, journalctl, ...)
    # READY read off the server at work: the excerpt holds no start-up line (a stretch of a serving log).
    mid_life: bool = False
    server: Literal["language", "diffusion"] = "language"  # diffusion: SGLang's multimodal_gen server
    serving: ServingBlock | None = None
    # A log read as head and tail: the attempts, lines and counts cover what was read, not the middle.
    skipped: SkippedBlock | None = None


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a log is read: a million-line log allocates some
    hundred thousand events and spans, none of them in cycles, and the collector's passes over
    them cost ~15 % of the time. Restored afterwards, also on errors."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def replay(events: list[Event], base: datetime | None, limits: PhaseLimits | None = None):
    """Events on the log's own clock through the attempt splitter.

    Returns (attempts, t): t is the last time seen (seconds since `base`).
    """
    timed: list[tuple[Event, float]] = []
    t = 0.0
    clock: dict[datetime, float] = {}  # ranks print the same second many times
    for event in events:
        stamp = event.time
        if stamp is not None and base is not None:
            seconds = clock.get(stamp)
            if seconds is None:
                seconds = clock[stamp] = (stamp - base).total_seconds()
            if seconds > t:  # log order wins over clock jitter
                t = seconds
        timed.append((event, t))
    return Attempts.start(limits, 0.0).observe_timed(timed), t


def analyze_text(
    text: str,
    *,
    source: str | None = None,
    limits: PhaseLimits | None = None,
    accept_floor: float | None = None,
) -> AnalysisReport:
    """`accept_floor`: the speculative acceptance length a target's profile holds the server to (its
    smoke floor), to say whether the serving stretch is above it."""
    unwrapped = unwrap(text)  # a log pasted from Compose, kubectl, journalctl, a colour terminal
    text = unwrapped.text
    with _collector_paused():
        events = parse_text(text, unwrap=False)  # unwrapped above, by the same Unwrapper
        # Time zero is the launcher's first stamped line, so start-up time includes imports and
        # args.
        base = first_time(text) or next((e.time for e in events if e.time is not None), None)
        attempts, t = replay(events, base, limits)
    tracker = attempts.current
    own = [e for e in events if e.line_no >= attempts.first_line] if attempts.number > 1 else events
    verdict = tracker.verdict(t, ended=True)
    outcome: Outcome = (
        "ready" if isinstance(verdict, Ready) else "crashed" if isinstance(verdict, Crashed) else "hung"
    )

    def when(seconds: float | None) -> datetime | None:
        return None if base is None or seconds is None else base + timedelta(seconds=seconds)

    # Where no milestone says the phase, the tracker read it off the attempt's other lines (a watchdog's
    # stuck-batch dump, a step's bar, NCCL's set-up lines: Tracker.unmarked_phase), as the live watch does.
    phase = verdict.phase if isinstance(verdict, Crashed | Hung) else tracker.phase
    if isinstance(verdict, Crashed | Hung):
        phase_from = verdict.phase_from
    else:
        phase_from = "milestones" if phase else None
    if tracker.serving_only and phase_from == "milestones":  # no milestone in it: its serving lines
        phase_from = "serving"
    stalled = _stalled(text, own) if outcome == "ready" else None
    if stalled is not None:
        # The server said it is stuck (no answer to its own health check, a soft watchdog) and no
        # batch line came after: a serving log that stopped mid-stream.
        outcome, phase = "hung", Phase.SERVING
    missing = tracker.missing()
    exception = verdict.exception if isinstance(verdict, Crashed) else None
    evidence = _evidence(own, tracker, outcome)
    if stalled is not None:
        evidence = [*evidence, stalled]
    tail = _tail(text)
    causes = () if outcome == "ready" else _causes(outcome, phase, tracker, verdict, own, evidence, tail)
    versioned = {e.dialect for e in events if e.dialect and e.dialect[:1].isdigit()}
    return AnalysisReport(
        source=source,
        outcome=outcome,
        exit_code=int(EXIT_CODES[outcome]),
        last_milestone=tracker.last_milestone,
        phase=phase,
        phase_from=phase_from,  # type: ignore[arg-type]
        dialect=max(versioned, key=PatternSet.dialect_rank, default=None),
        lines=text.count("\n") + (0 if not text or text.endswith("\n") else 1),
        started_at=base,
        ended_at=when(t),
        startup_s=(
            None
            if tracker.ready_at is None or tracker.serving_only  # no start-up in the log to time
            else round(tracker.ready_at - tracker.started_at, 3)
        ),
        attempt=AttemptBlock(
            number=attempts.number,
            count=attempts.count,
            first_line=attempts.first_line,
            summary=attempts.summary(),
            earlier=[
                AttemptRow(
                    number=a.number,
                    outcome=a.outcome,  # type: ignore[arg-type]
                    phase=a.phase,
                    last_milestone=a.last_milestone,
                    started_at=when(a.started_at),
                    ended_at=when(a.ended_at),
                    exception=a.exception,
                )
                for a in attempts.earlier[-50:]  # a log of thousands of restarts: the last ones
            ],
        ),
        expected=_expected(tracker, limits),
        ranks=list(rank_rows(tracker, t)),
        missing=[
            MissingRow(milestone=m.milestone, ranks=list(m.ranks), never_seen=list(m.never_seen))
            for m in missing
        ],
        stuck=list(tracker.stuck_ranks()),
        timeline=list(span_rows(tracker, t, base)),
        evidence=[EvidenceLine(line_no=e.line_no, rank=e.rank_label, text=_clip(e.text)) for e in evidence],
        exception=exception,
        tail=tail,
        likely_causes=list(causes),
        wrappers=[
            WrapperRow(kind=w.kind, title=w.title, count=w.count, example=w.example) for w in unwrapped.seen
        ],
        mid_life=tracker.serving_only,
        server="diffusion" if any(e.note is Note.DIFFUSION for e in own) else "language",
        serving=_serving(text, own, accept_floor),
    )


def _serving(text: str, events: list[Event], accept_floor: float | None) -> ServingBlock | None:
    summary = digest_text(text, events, accept_floor)
    return None if summary is None else ServingBlock.model_validate(summary)


def _stalled(text: str, events: list[Event]) -> Event | None:
    """The last serving-stall line (kind "stall": a failed health check, a soft watchdog) when no
    batch line came after it; None otherwise. Where the last batch line is: two searches from the
    end of the text and one count of its lines, not a read of every line."""
    stall = next(
        (e for e in reversed(events) if e.note is Note.SERVING and e.fields.get("kind") in STALLS), None
    )
    if stall is None:
        return None
    last_batch = max(text.rfind("Decode batch"), text.rfind("Prefill batch"))
    batch_line = 0 if last_batch < 0 else text.count("\n", 0, last_batch) + 1
    return stall if batch_line < stall.line_no else None


def analyze_path(
    path: str | Path, *, limits: PhaseLimits | None = None, accept_floor: float | None = None
) -> AnalysisReport:
    """Read a log file with a bounded memory (kit.files.read_log: its head and tail past 32 MiB;
    empty or binary is an InputError) and analyse it."""
    from kit.files import read_log

    middle = LaunchCounter()
    log = read_log(path, on_skipped=middle)
    report = analyze_text(log.text, source=str(path), limits=limits, accept_floor=accept_floor)
    return with_skipped(report, log, middle.launches)


def with_skipped(report: AnalysisReport, log, skipped_launches: int = 0) -> AnalysisReport:
    """The report of a log read as head and tail says so, and numbers the attempts read after the
    middle past the SKIPPED_LAUNCHES launches counted there (read_log's on_skipped, LaunchCounter):
    attempt 5018 of 5018, not the count of the part read."""
    if not log.skipped_bytes:
        return report
    skipped = SkippedBlock(bytes=log.skipped_bytes, lines=log.skipped_lines)
    attempt = report.attempt
    number, count, summary = across_skipped(attempt.number, attempt.count, attempt.summary, skipped_launches)
    tail = LaunchCounter()
    tail(log.text.partition(SKIPPED_MARK)[2])
    after = attempt.count - tail.launches  # the attempts read in the head; the rest follow the middle
    earlier = [
        row.model_copy(update={"number": row.number + skipped_launches}) if row.number > after else row
        for row in attempt.earlier
    ]
    # A line read after the mark is line + skipped_lines - 2 of the file: the mark's own newline ends
    # the head's last line (the skipped bytes end it in the file) and the mark is a line of its own.
    mark_line = log.text.partition(SKIPPED_MARK)[0].count("\n") + 1
    first = attempt.first_line + (log.skipped_lines - 2 if attempt.first_line > mark_line else 0)
    moved = attempt.model_copy(
        update={"number": number, "count": count, "summary": summary, "earlier": earlier, "first_line": first}
    )
    return report.model_copy(update={"skipped": skipped, "attempt": moved})


def _expected(tracker: Tracker, limits: PhaseLimits | None) -> ExpectedBlock | None:
    expected = tracker.expected()
    if not expected:
        return None
    launch = tracker.launch
    from_limits = bool(limits and limits.expected_ranks) or launch is None
    return ExpectedBlock(
        source="limits" if from_limits else "launch",
        ranks=[r.key for r in expected],
        nodes=1 if from_limits or launch is None else launch.nnodes,
        node_rank=0 if from_limits or launch is None else launch.node_rank,
        never_seen=[r.key for r in tracker.never_seen()],
    )


def _causes(
    outcome: Outcome,
    phase: Phase | None,
    tracker: Tracker,
    verdict: Verdict | None,
    events: list[Event],
    evidence: list[Event],
    tail: list[str],
) -> tuple[CauseRow, ...]:
    """Likely causes from the attempt's evidence: its kept lines, tail, notes, and the errors up to
    the crash (the lines after it, "Killed", "Received sigquit", are its consequences)."""
    crash = tracker.crash(0.0, ended=True) if isinstance(verdict, Crashed) else None
    last_line = crash[1].line_no if crash is not None else None
    errors = [e for e in events if e.is_error and (last_line is None or e.line_no <= last_line)]
    raised = "\n".join(
        [
            getattr(verdict, "exception", None) or "",
            *(str(e.fields.get("exception", "")) for e in errors),
            *(str(e.fields.get("traceback", "")) for e in errors),
            *(e.text for e in errors),
        ]
    )
    haystack = "\n".join(
        [
            raised,
            *(e.text for e in evidence),
            *tail,
            *(f"kind={e.fields['kind']}" for e in errors if "kind" in e.fields),
            "missing-ranks" if tracker.missing() else "",
            *_memory_facts(events),
            *dict.fromkeys(e.text for e in events if e.note is not None),  # each distinct note once
        ]
    )
    # Before the first milestone: the launcher's own stage when its launch line is in the log,
    # else unknown (a pasted tail): then evidence may point at any phase.
    phase_known = (
        phase is not None or tracker.launch is not None or any(e.note is Note.LAUNCH for e in events)
    )
    return cause_rows(match_causes(outcome, phase, haystack, exception=raised, phase_known=phase_known))


def _memory_facts(events: list[Event]) -> list[str]:
    """`avail-mem-low` when under a fifth of the GPU was left after the weights loaded (the last
    `Load weight end` with both numbers): the KV pool is then likely not to fit."""
    for event in reversed(events):
        if event.milestone is Milestone.LOAD_END:
            avail, used = event.fields.get("avail_mem_gb"), event.fields.get("mem_gb")
            if isinstance(avail, float) and isinstance(used, float) and avail + used > 0:
                return ["avail-mem-low"] if avail / (avail + used) < 0.2 else []
            return []
    return []


def _evidence(events: list[Event], tracker: Tracker, outcome: Outcome) -> list[Event]:
    """The lines that tell how it ended: first and last errors, the laggards' last steps, NCCL notes."""
    chosen: dict[int, Event] = {}

    def keep(selected: list[Event]) -> None:
        for event in selected:
            chosen.setdefault(event.line_no, event)

    if outcome == "ready":
        keep([e for e in events if e.milestone in (Milestone.HTTP_UP, Milestone.READY)])
    else:
        errors = [e for e in events if e.is_error]
        keep(errors[:2] + errors[-3:])  # the first failure is the cause; the last ones the end
        last_of_rank: dict[str | None, Event] = {}
        for event in events:
            if event.milestone is not None and not event.is_error:
                last_of_rank[event.rank_key] = event
        stuck = set(tracker.stuck_ranks())
        laggards = [e for e in last_of_rank.values() if e.rank_label in stuck]
        # When every rank is stuck at the same step, two lines say it; otherwise name each laggard.
        keep(laggards[-2:] if len(laggards) == len(last_of_rank) else laggards[:8])
        notes = [e for e in events if e.note is not None and e.note not in (Note.SHUTDOWN, Note.LAUNCH)]
        keep(notes[-4:])
    return sorted(chosen.values(), key=lambda e: e.line_no)[-_EVIDENCE_LIMIT:]


def _tail(text: str) -> list[str]:
    """The last non-blank lines of the log, whatever they are (cheap: only the end is split)."""
    lines = [line.rstrip("\r") for line in text[-16_384:].split("\n")]
    return [_clip(line) for line in lines if line.strip()][-_TAIL_LINES:]


def _clip(line: str) -> str:
    return line if len(line) <= _LINE_CHARS else line[: _LINE_CHARS - 1] + "…"
