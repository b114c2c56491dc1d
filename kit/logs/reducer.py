"""The event reducer behind `Tracker` (kit/logs/tracker.py): a batch of events applied to one
tracker's state in place, then frozen into the next tracker.

Split from the tracker because it is the hot path (a million-line log goes through `apply`) and the
tracker is the reading side (phases, missing ranks, verdicts). Closed phase spans and reached
milestones go into append-only logs (`Log`) that successive trackers share; a tracker remembers how
much of each log is its own, and one that is observed again after a newer tracker appended (a
branch, which live and offline use never do) copies its prefix first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Generic, Protocol, TypeVar

from kit.logs.events import (
    MILESTONE_ORDER,
    PHASE_ORDER,
    SCHEDULER_MILESTONES,
    Event,
    Milestone,
    Note,
    Phase,
    Rank,
    phase_after,
)
from kit.logs.launch import LaunchArgs
from kit.logs.verdicts import PhaseSpan, RankState

# Serving notes that say the server is stuck (a failed health check, a watchdog, its dump of the stuck
# batch): never READY of themselves.
STALLS = frozenset({"stall", "stuck_batch"})
# NCCL's own INFO lines while it sets up a communicator (NCCL src/init.cc 'ncclCommInitRank ... Init
# COMPLETE', src/transport/net.cc and net_ib.cc 'NET/IB : Using', 'Connected all rings', the transports'
# 'via P2P/' and 'via SHM/'): a start-up's distributed init. Not the framework's 'is using nccl==' (its
# library loaded, which says nothing of a communicator being built).
NCCL_SETUP = frozenset({Note.NCCL_NET, Note.NCCL_TRANSPORT, Note.NCCL_CONNECTED, Note.NCCL_INIT_COMPLETE})


class FrozenTracker(Protocol):
    """What the reducer reads of the tracker it opens (kit/logs/tracker.py `Tracker`), declared here
    so that the tracker imports the reducer and not the other way round."""

    seq: int
    last_activity_at: float
    last_alive_at: float
    ranks: Mapping[str | None, RankState]
    open_spans: Mapping[str, tuple[int, PhaseSpan]]
    limits: Any
    phase: Any
    progress_seq: int
    ready_seq: int | None
    http_up: bool
    all_ranks_print: bool
    recent_errors: tuple[Event, ...]
    span_count: int
    _closed: Log
    _closed_n: int
    _marks: Log
    _marks_n: int

    def _evolve(self, **fields: Any) -> Any: ...


Tracker = TypeVar("Tracker", bound=FrozenTracker)

RECENT_ERRORS = 4
NOTE_KINDS = 16  # bounded: a log of any length keeps at most this many note lines


class Log:
    """An append-only list shared by successive trackers; each knows how many items are its own."""

    __slots__ = ("items",)

    def __init__(self, items: list[Any] | None = None):
        self.items: list[Any] = [] if items is None else items


def append(log: Log, size: int, item: Any) -> Log:
    if len(log.items) != size:  # an older tracker observed again: fork its own prefix
        log = Log(log.items[:size])
    log.items.append(item)
    return log


class Reducer(Generic[Tracker]):
    """A tracker opened for a batch of events: mutated in place, then frozen into a new Tracker.

    Ranks touched in the batch are mutable records [rank, milestone, effective, phase,
    phase_since, last_t, last_time, evidence]; the others keep their frozen RankState. The
    shared logs (closed spans, marks) are appended to; everything else is a private copy.
    """

    __slots__ = (
        "all_print",
        "base",
        "closed",
        "closed_n",
        "count",
        "fields",
        "http",
        "keep",
        "last",
        "marks",
        "marks_n",
        "moved",
        "open",
        "opened",
        "phase",
        "progress",
        "ranks",
        "ready",
        "recent",
        "records",
        "seq",
        "served",
    )  # fmt: skip

    def __init__(self, tracker: Tracker):
        self.base = tracker
        self.fields: dict[str, Any] = {}
        self.seq = tracker.seq
        self.last = tracker.last_activity_at
        self.moved = False  # a rank's phase changed since the overall phase was last computed
        self.ranks: dict[str | None, RankState] = dict(tracker.ranks)
        self.records: dict[str | None, list[Any]] = {}
        self.open: Mapping[str, tuple[int, PhaseSpan]] = tracker.open_spans
        self.opened = False
        self.closed, self.closed_n = tracker._closed, tracker._closed_n
        self.marks, self.marks_n = tracker._marks, tracker._marks_n
        self.count = tracker.span_count
        self.recent: deque[Event] | None = None
        self.keep = tracker.limits.evidence_lines
        # Read on every milestone: kept as attributes, written back by freeze().
        self.phase = tracker.phase
        self.progress = tracker.progress_seq
        self.ready = tracker.ready_seq
        self.http = tracker.http_up
        self.all_print = tracker.all_ranks_print
        self.served = False  # ready_seq/ready_at/http_up changed in this batch

    def get(self, name: str) -> Any:
        fields = self.fields
        return fields[name] if name in fields else getattr(self.base, name)

    def record(self, key: str | None, rank: Rank | None, t: float) -> list[Any]:
        record = self.records.get(key)
        if record is None:
            state = self.ranks.get(key)
            if state is None:
                record = [rank, None, None, None, t, 0.0, None, deque(maxlen=self.keep)]
            else:
                record = [
                    state.rank, state.milestone, state.effective, state.phase, state.phase_since,
                    state.last_t, state.last_time, deque(state.evidence, self.keep),
                ]  # fmt: skip
            self.records[key] = record
            if key not in self.ranks:
                self.ranks[key] = None  # type: ignore[assignment]  # keeps first-seen order
        return record

    def touch(self, event: Event, t: float) -> list[Any]:
        record = self.record(event.rank_key, event.rank, t)
        record[5] = t
        if event.time is not None:
            record[6] = event.time
        record[7].append(event.text)
        return record

    # -- one event -----------------------------------------------------------------------

    def apply(self, event: Event, t: float) -> None:
        fields = self.fields
        self.seq = seq = self.seq + 1
        if t > self.last:
            self.last = t
        note = event.note
        if note is not None:
            if note in NCCL_SETUP and self.get("nccl_setup_seq") is None:
                fields["nccl_setup_seq"] = seq
            if note is Note.SHUTDOWN:
                fields["shut_down"] = True
            elif note is Note.SERVING:
                self.serving(event, t, seq)
            elif note is Note.LAUNCH and self.get("launch") is None:
                fields["launch"] = LaunchArgs.from_fields(event.fields)
            elif note is Note.PROGRESS:  # not kept as a note: the bar is in the tail when it matters
                fields["progress_phase"] = Phase(event.fields["kind"])
            elif note is Note.DIFFUSION and "kind" in event.fields:  # its load step's bar: a note too
                fields["diffusion_phase"] = Phase(event.fields["kind"])
                self.note(event, note)
            else:
                self.note(event, note)
            if event.rank_key in self.ranks:  # notes are evidence for ranks already seen only
                self.touch(event, t)
            return
        milestone = event.milestone
        if milestone is Milestone.ERROR:
            self.touch(event, t)
            if self.get("first_error_seq") is None:
                fields["first_error_seq"] = seq
            # After a shutdown request errors are the shutdown; after ready only fatal lines matter.
            if not self.get("shut_down") and (self.ready is None or event.fatal):
                fields["last_error"] = (seq, t, event)
                if self.recent is None:
                    self.recent = deque(self.base.recent_errors, RECENT_ERRORS)
                self.recent.append(event)
                if event.fatal:
                    fields["last_fatal_seq"] = seq
                    if self.get("first_fatal") is None:
                        fields["first_fatal"] = (seq, event)
            return
        if milestone is not None:
            self.milestone(event, milestone, t, seq)

    def serving(self, event: Event, t: float, seq: int) -> None:
        """A server at work. In an attempt that printed no start-up milestone (a stretch of a serving
        log: `docker logs --tail`, a rotated file) it is a server past READY, serving; after start-up
        lines it is only evidence (the server's own warm-up request prints batches before READY)."""
        self.note(event, Note.SERVING)
        if not self.get("served"):
            self.fields["served"] = True
        if event.fields.get("kind") == "stuck_batch" and not self.get("stuck_batch"):
            self.fields["stuck_batch"] = True
        # vLLM sends itself no warm-up request: its engine stats and admitted requests (dialect "vllm")
        # are the server at work even after its start-up lines (it prints no ready line of its own).
        after_startup = event.dialect == "vllm" and event.fields.get("kind") in ("engine_stats", "request")
        if (
            self.ready is None
            and (self.marks_n == 0 or after_startup)
            and event.fields.get("kind") not in STALLS
        ):
            self.ready = self.progress = seq
            self.phase = Phase.SERVING
            self.fields.update(ready_at=t, phase_since=t, serving_only=self.marks_n == 0)

    def note(self, event: Event, note: Note) -> None:
        """Keep the first line of each note kind (per transport: P2P and SHM both matter)."""
        kind = str(note)
        transport = event.fields.get("transport") or event.fields.get("net")
        if transport:
            kind = f"{kind}.{transport}"
        notes = self.get("notes")
        if kind not in notes and len(notes) < NOTE_KINDS:
            fields = self.fields
            fields["notes"] = MappingProxyType({**notes, kind: event.text})

    def milestone(self, event: Event, milestone: Milestone, t: float, seq: int) -> None:
        fields = self.fields
        key = event.rank_key
        self.advance(self.touch(event, t), milestone, milestone, t)
        if event.rank0_only and event.rank is not None and event.rank.is_rank0:
            self.carry_to_peers(event.rank, key, milestone, t)
        http_up = milestone is Milestone.HTTP_UP
        ready = milestone is Milestone.READY
        if http_up or ready:
            # The front end only comes up once every scheduler finished its start-up.
            order = MILESTONE_ORDER[milestone]
            for other in list(self.ranks):
                if other == key:
                    continue
                effective = self.effective(other)
                if effective is not None and MILESTONE_ORDER[effective] < order:
                    self.advance(self.record(other, None, t), None, milestone, t)
        self.progress = seq
        if not event.rank0_only and milestone not in self.all_print:
            self.all_print = self.all_print | {milestone}
        self.marks = append(self.marks, self.marks_n, (milestone, key))
        self.marks_n += 1
        if ready:
            self.ready = seq
            fields["ready_at"] = t
        if http_up:
            self.http = True
        if self.moved or ready or http_up:  # otherwise no rank changed phase: neither did the server
            self.moved = False
            phase = self.overall_phase()
            if phase != self.phase:
                self.phase = phase
                fields["phase_since"] = t

    def effective(self, key: str | None) -> Milestone | None:
        record = self.records.get(key)
        return record[2] if record is not None else self.ranks[key].effective

    def advance(self, record: list[Any], own: Milestone | None, effective: Milestone, t: float) -> None:
        """The rank after printing `effective` (itself, or via its rank 0); records phase spans."""
        phase = phase_after(effective)
        if own is not None:
            record[1] = own
        record[2] = effective
        if phase is record[3]:
            return
        if not self.opened:
            self.open = dict(self.open)
            self.opened = True
        rank = record[0]
        label = "main" if rank is None else rank.label
        current = self.open.pop(label, None)  # type: ignore[attr-defined]
        if current is not None:
            order, span = current
            closed = (order, PhaseSpan(span.rank, span.phase, span.start, t))
            self.closed = append(self.closed, self.closed_n, closed)
            self.closed_n += 1
        if phase is not None:
            self.open[label] = (self.count, PhaseSpan(label, phase, t))  # type: ignore[index]
            self.count += 1
        record[3] = phase
        record[4] = t
        self.moved = True

    def carry_to_peers(self, rank0: Rank, rank0_key: str | None, milestone: Milestone, t: float) -> None:
        """A rank-0-only milestone also moves the rank's TP peers that reached the step before it.

        Those peers do the same work (e.g. draft CUDA graph capture) without logging it.
        """
        floor = MILESTONE_ORDER[milestone] - 1
        group = rank0.group
        for key in list(self.ranks):
            if key == rank0_key:
                continue
            record = self.records.get(key)
            peer = record[0] if record is not None else self.ranks[key].rank
            if peer is None or peer.group != group:
                continue
            effective = self.effective(key)
            if (
                effective is not None
                and effective in SCHEDULER_MILESTONES
                and MILESTONE_ORDER[effective] >= floor
            ):
                self.advance(self.record(key, peer, t), None, milestone, t)

    def overall_phase(self) -> Phase | None:
        if self.ready is not None:
            return Phase.SERVING
        if self.http:
            return Phase.WARMUP
        best: Phase | None = None
        records = self.records
        for key, state in self.ranks.items():
            record = records.get(key)
            if record is not None:
                phase, effective = record[3], record[2]
            else:
                phase, effective = state.phase, state.effective
            if (
                phase is not None
                and effective in SCHEDULER_MILESTONES
                and (best is None or PHASE_ORDER[phase] < PHASE_ORDER[best])
            ):
                best = phase
        return best

    # -- the new tracker -----------------------------------------------------------------

    def freeze(self) -> Tracker:
        fields = self.fields
        fields["seq"] = self.seq
        fields["last_activity_at"] = self.last
        if self.last > self.base.last_alive_at:  # a line is a sign of life as well as progress
            fields["last_alive_at"] = self.last
        fields["phase"] = self.phase
        fields["progress_seq"] = self.progress
        fields["ready_seq"] = self.ready
        fields["http_up"] = self.http
        fields["all_ranks_print"] = self.all_print
        if self.records:
            ranks = self.ranks
            for key, r in self.records.items():
                ranks[key] = RankState(r[0], r[1], r[2], r[3], r[4], r[5], r[6], tuple(r[7]))
            fields["ranks"] = MappingProxyType(ranks)
        if self.recent is not None:
            fields["recent_errors"] = tuple(self.recent)
        if self.opened:
            fields["open_spans"] = MappingProxyType(self.open)  # type: ignore[arg-type]
            fields["span_count"] = self.count
            fields["_closed"] = self.closed
            fields["_closed_n"] = self.closed_n
        if self.marks_n != self.base._marks_n:
            fields["_marks"] = self.marks
            fields["_marks_n"] = self.marks_n
        return self.base._evolve(**fields)
