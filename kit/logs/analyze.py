"""Offline analysis of a whole SGLang log: where start-up got to, who is behind, and why.

The parser finds the events, the tracker replays them on the log's own timestamps (no activity
samples: a log file has none), and causes.toml turns outcome, phase and evidence into likely
causes. `outcome` is "ready", "crashed", or "stalled" when the log ends with neither.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from kit.errors import InputError
from kit.logs.causes import match_causes
from kit.logs.events import Event, Milestone, Note, Phase
from kit.logs.parser import parse_text
from kit.logs.patterns import PatternSet
from kit.logs.prefix import first_time
from kit.logs.tracker import Crashed, PhaseLimits, Ready, Tracker

Outcome = Literal["ready", "crashed", "stalled"]
_EVIDENCE_LIMIT = 20
_TAIL_LINES = 8
_LINE_CHARS = 500  # server_args and tqdm lines run to thousands of characters


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class RankRow(_Frozen):
    rank: str  # "TP1", "DP0 TP1", or "main" for the process without a rank prefix
    last_milestone: Milestone | None
    phase: Phase | None
    last_time: datetime | None
    phase_elapsed_s: float | None  # in its current phase, up to the log's last timestamp


class MissingRow(_Frozen):
    milestone: Milestone
    ranks: list[str]


class SpanRow(_Frozen):
    rank: str
    phase: Phase
    start: datetime | None
    end: datetime | None
    elapsed_s: float | None


class EvidenceLine(_Frozen):
    line_no: int
    rank: str
    text: str


class LikelyCause(_Frozen):
    id: str
    title: str
    why: str
    what_to_try: list[str]
    hints_found: list[str]  # words in the evidence that point at this cause


class AnalysisReport(_Frozen):
    source: str | None
    outcome: Outcome
    last_milestone: Milestone | None
    phase: Phase | None
    dialect: str | None  # newest SGLang wording seen ("0.4", "0.5", "0.5.16", "0.5.21"), if any
    lines: int
    started_at: datetime | None
    ended_at: datetime | None
    startup_s: float | None  # first stamped line to "ready"
    ranks: list[RankRow]
    missing: list[MissingRow]
    stuck: list[str]
    timeline: list[SpanRow]
    evidence: list[EvidenceLine]
    exception: str | None
    tail: list[str]
    likely_causes: list[LikelyCause]


def analyze_text(
    text: str, *, source: str | None = None, limits: PhaseLimits | None = None
) -> AnalysisReport:
    events = parse_text(text)
    # Time zero is the launcher's first stamped line, so start-up time includes imports and args.
    base = first_time(text) or next((e.time for e in events if e.time is not None), None)
    tracker = Tracker.start(limits)
    t = 0.0
    for event in events:
        if event.time is not None and base is not None:
            t = max(t, (event.time - base).total_seconds())  # log order wins over clock jitter
        tracker = tracker.observe_event(event, t)
    verdict = tracker.verdict(t, ended=True)
    outcome: Outcome = (
        "ready" if isinstance(verdict, Ready) else "crashed" if isinstance(verdict, Crashed) else "stalled"
    )

    def when(seconds: float | None) -> datetime | None:
        return None if base is None or seconds is None else base + timedelta(seconds=seconds)

    missing = tracker.missing()
    exception = verdict.exception if isinstance(verdict, Crashed) else None
    evidence = _evidence(events, tracker, outcome)
    tail = _tail(text)
    haystack = "\n".join(
        [
            *(e.text for e in evidence),
            *tail,
            exception or "",
            *(str(e.fields.get("traceback", "")) for e in events if e.is_error),
            *(f"kind={e.fields['kind']}" for e in events if e.is_error and "kind" in e.fields),
            "missing-ranks" if missing else "",
            *dict.fromkeys(e.text for e in events if e.note is not None),  # each distinct note once
        ]
    )
    causes = match_causes(outcome, tracker.phase, haystack)
    versioned = [e.dialect for e in events if e.dialect and e.dialect[:1].isdigit()]
    return AnalysisReport(
        source=source,
        outcome=outcome,
        last_milestone=tracker.last_milestone,
        phase=tracker.phase,
        dialect=max(versioned, key=PatternSet.dialect_rank, default=None),
        lines=text.count("\n") + (0 if not text or text.endswith("\n") else 1),
        started_at=base,
        ended_at=when(t),
        startup_s=None if base is None else tracker.ready_at,
        ranks=[
            RankRow(
                rank=s.label,
                last_milestone=s.milestone,
                phase=s.phase,
                last_time=s.last_time,
                phase_elapsed_s=None if base is None or s.phase is None else round(t - s.phase_since, 3),
            )
            for s in tracker.rank_states
        ],
        missing=[MissingRow(milestone=m.milestone, ranks=list(m.ranks)) for m in missing],
        stuck=list(tracker.stuck_ranks()),
        timeline=[
            SpanRow(
                rank=span.rank,
                phase=span.phase,
                start=when(span.start),
                end=when(span.end),
                elapsed_s=None if base is None else round(span.elapsed(t), 3),
            )
            for span in tracker.timeline
        ],
        evidence=[EvidenceLine(line_no=e.line_no, rank=e.rank_label, text=_clip(e.text)) for e in evidence],
        exception=exception,
        tail=tail,
        likely_causes=[
            LikelyCause(
                id=m.cause.id,
                title=m.cause.title,
                why=m.cause.why,
                what_to_try=list(m.cause.what_to_try),
                hints_found=list(m.hints_found),
            )
            for m in causes
        ],
    )


def analyze_path(path: str | Path, *, limits: PhaseLimits | None = None) -> AnalysisReport:
    """Read a log file (undecodable bytes replaced) and analyse it; unreadable files are InputError."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(
            "LOGFILE",
            f"cannot read {path}: {exc.strerror or exc}",
            "give the path of a log file, or - for stdin",
        ) from exc
    return analyze_text(data.decode("utf-8", errors="replace"), source=str(path), limits=limits)


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
        keep([e for e in events if e.note is not None and e.note is not Note.SHUTDOWN][-4:])
    return sorted(chosen.values(), key=lambda e: e.line_no)[-_EVIDENCE_LIMIT:]


def _tail(text: str) -> list[str]:
    """The last non-blank lines of the log, whatever they are (cheap: only the end is split)."""
    lines = [line.rstrip("\r") for line in text[-16_384:].split("\n")]
    return [_clip(line) for line in lines if line.strip()][-_TAIL_LINES:]


def _clip(line: str) -> str:
    return line if len(line) <= _LINE_CHARS else line[: _LINE_CHARS - 1] + "…"
