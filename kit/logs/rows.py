"""The rows every command's JSON shares: ranks, phase spans and likely causes.

`kit up`, `kit watch` (their final result line), `kit analyze` and `kit smoke` print the same
shapes, documented with a JSON Schema in docs/schema/common.json. Plain frozen dataclasses, built
from a tracker by the functions below; `kit.output.jsonable` renders them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from kit.logs.causes import CauseMatch
from kit.logs.tracker import Tracker


@dataclass(frozen=True)
class RankRow:
    """One scheduler process (or `main`). `seen` is False for a rank the launch's arguments promise
    that printed nothing; `node` is the node that holds it, when the launch said (`--nnodes`)."""

    rank: str
    phase: str | None
    last_milestone: str | None
    in_phase_s: float | None  # in its current phase, up to the verdict's time
    last_time: str | None = None  # the rank's last log timestamp (ISO 8601), if the log has one
    seen: bool = True
    node: int | None = None


@dataclass(frozen=True)
class SpanRow:
    """One stretch of one rank in one phase; `open` while it lasts (then `end_s` is null)."""

    rank: str
    phase: str
    start_s: float  # seconds since the attempt started
    end_s: float | None
    elapsed_s: float
    open: bool
    start: str | None = None  # wall-clock times (ISO 8601) when the log's own clock is known
    end: str | None = None


@dataclass(frozen=True)
class CauseRow:
    """A likely cause: `evidence` is what raised it (direct evidence lines: the engine's state, the
    cgroup's, the kernel's, SGLang's child-exit lines, stacks; then exception names and words);
    `generic` marks a cause that only fits the outcome and phase, with no evidence at all."""

    id: str
    title: str
    why: str
    what_to_try: tuple[str, ...]
    evidence: tuple[str, ...] = ()
    generic: bool = True
    source: str = ""
    facts: tuple[str, ...] = ()
    """The facts of the run it needs and what they were here ("needs gpu: gpu yes (device cuda)";
    "unknown" where a log cannot tell)."""
    basis: str = ""
    """What a generic cause rests on when logs of this shape often had it (kit/logs/base_rates.toml):
    "the phase alone: in 7 of 16 labelled logs of this shape (crashed in serving) the cause was ..."."""


def _iso(base: datetime | None, seconds: float | None) -> str | None:
    if base is None or seconds is None:
        return None
    return (base + timedelta(seconds=seconds)).isoformat()


def rank_rows(tracker: Tracker, now: float) -> tuple[RankRow, ...]:
    """Every rank seen, then every rank the launch promises that printed nothing."""
    nodes = {rank.key: rank.node for rank in tracker.expected()}
    multi_node = len(set(nodes.values())) > 1
    rows = [
        RankRow(
            rank=s.label,
            phase=s.phase.value if s.phase else None,
            last_milestone=s.milestone.value if s.milestone else None,
            in_phase_s=None if s.phase is None else round(max(0.0, now - s.phase_since), 2),
            last_time=s.last_time.isoformat() if s.last_time else None,
            node=nodes.get(s.rank.key) if (multi_node and s.rank is not None) else None,
        )
        for s in tracker.rank_states
    ]
    rows.extend(
        RankRow(
            rank=rank.key,
            phase=None,
            last_milestone=None,
            in_phase_s=None,
            seen=False,
            node=rank.node if multi_node else None,
        )
        for rank in tracker.never_seen()
    )
    return tuple(rows)


def span_rows(tracker: Tracker, now: float, base: datetime | None = None) -> tuple[SpanRow, ...]:
    """The attempt's timeline; `base` is the wall-clock time of t=0 (offline logs), if known."""
    start = tracker.started_at
    return tuple(
        SpanRow(
            rank=span.rank,
            phase=span.phase.value,
            start_s=round(span.start - start, 3),
            end_s=None if span.end is None else round(span.end - start, 3),
            elapsed_s=round(span.elapsed(now), 3),
            open=span.end is None,
            start=_iso(base, span.start),
            end=_iso(base, span.end),
        )
        for span in tracker.timeline
    )


def cause_rows(matches: Iterable[CauseMatch]) -> tuple[CauseRow, ...]:
    return tuple(
        CauseRow(
            id=m.cause.id,
            title=m.cause.title,
            why=m.cause.why,
            what_to_try=m.cause.what_to_try,
            evidence=m.evidence,
            generic=m.generic,
            source=m.cause.source,
            facts=m.facts,
            basis=m.basis,
        )
        for m in matches
    )
