"""Follow one launch attempt's start-up from its events and activity counters, and name the verdict.

`Tracker` is an immutable value: `observe_*` return a new tracker, `verdict(now)` reads one. Time
is always passed in (monotonic seconds live, log timestamps offline); nothing here reads a clock,
a file or a container. The verdict types are in kit/logs/verdicts.py; a log holding several
launches is split into attempts by kit/logs/attempts.py, each attempt with its own tracker.

It is a reducer in linear time: each event costs O(ranks), never O(events so far). Closed phase
spans and reached milestones go into append-only logs that successive trackers share; a tracker
remembers how much of each log is its own, and one that is observed again after a newer tracker
appended (a branch, which live and offline use never do) copies its prefix first. Errors are
kept as the few summaries verdicts need, not as a growing list.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kit.logs.activity import ActivitySample, what_moved
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
from kit.logs.launch import ExpectedRank, LaunchArgs
from kit.logs.verdicts import (
    Crashed,
    Deadline,
    Hung,
    MissingRanks,
    PhaseLimits,
    PhaseSpan,
    RankState,
    Ready,
    Verdict,
)

_EMPTY: Mapping[Any, Any] = MappingProxyType({})
_RECENT_ERRORS = 4
_NOTE_KINDS = 16  # bounded: a log of any length keeps at most this many note lines


class _Log:
    """An append-only list shared by successive trackers; each knows how many items are its own."""

    __slots__ = ("items",)

    def __init__(self, items: list[Any] | None = None):
        self.items: list[Any] = [] if items is None else items


def _append(log: _Log, size: int, item: Any) -> _Log:
    if len(log.items) != size:  # an older tracker observed again: fork its own prefix
        log = _Log(log.items[:size])
    log.items.append(item)
    return log


def _sort_key(state: RankState) -> tuple[int, ...]:
    return (-2, 0, 0, 0) if state.rank is None else state.rank.sort_key()  # main process first


@dataclass(frozen=True)
class Tracker:
    """Immutable start-up state; build with `Tracker.start(limits, t)` and the observe_* methods."""

    limits: PhaseLimits = field(default_factory=PhaseLimits)
    started_at: float = 0.0
    ranks: Mapping[str | None, RankState] = field(default_factory=lambda: _EMPTY)
    phase: Phase | None = None
    phase_since: float = 0.0
    last_activity_at: float = 0.0
    last_sample: ActivitySample | None = None
    seq: int = 0  # events observed; orders errors against progress
    progress_seq: int = 0
    all_ranks_print: frozenset[Milestone] = frozenset()  # seen from a line every rank prints
    ready_seq: int | None = None
    ready_at: float | None = None
    http_up: bool = False
    shut_down: bool = False
    tail: tuple[str, ...] = ()
    launch: LaunchArgs | None = None  # the attempt's own arguments, when its launch line said
    # The first line of each kind of note (NCCL version, transport, network, Gloo): facts about the
    # set-up that stay evidence after the last lines have scrolled past them.
    notes: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    # Errors that count, as summaries: the first fatal one (the cause), the last fatal one's seq
    # (dates the crash), the last one (a non-fatal error is final if nothing progressed after it).
    first_fatal: tuple[int, Event] | None = None
    last_fatal_seq: int | None = None
    last_error: tuple[int, float, Event] | None = None
    recent_errors: tuple[Event, ...] = ()
    # Open spans per rank label, with their creation order; closed ones are in the shared log.
    open_spans: Mapping[str, tuple[int, PhaseSpan]] = field(default_factory=lambda: _EMPTY)
    span_count: int = 0
    _closed: _Log = field(default_factory=_Log, compare=False, repr=False)
    _closed_n: int = field(default=0, compare=False, repr=False)
    _marks: _Log = field(default_factory=_Log, compare=False, repr=False)  # (milestone, rank key)
    _marks_n: int = field(default=0, compare=False, repr=False)

    @classmethod
    def start(cls, limits: PhaseLimits | None = None, t: float = 0.0) -> Tracker:
        return cls(limits=limits or PhaseLimits(), started_at=t, phase_since=t, last_activity_at=t)

    def _evolve(self, **changes: Any) -> Tracker:
        """A copy with some fields changed: dataclasses.replace without re-running __init__."""
        new = object.__new__(Tracker)
        state = new.__dict__
        state.update(self.__dict__)
        state.update(changes)
        return new

    # -- inputs ------------------------------------------------------------------------------

    def observe_line(self, t: float, text: str | None = None) -> Tracker:
        """Any log line, interesting or not: the log moved (and its text joins the tail).

        Live use: call this for every line, then `observe_event` for each event the parser
        returned for it. Offline, events alone are enough.
        """
        tail = self.tail if text is None else (*self.tail, text)[-self.limits.evidence_lines :]
        return self._evolve(last_activity_at=max(self.last_activity_at, t), tail=tail)

    def observe_events(self, events: Iterable[Event], t: float) -> Tracker:
        return self.observe_timed((event, t) for event in events)

    def observe_event(self, event: Event, t: float) -> Tracker:
        """One parsed event seen at time `t` (its line also counts as log activity)."""
        reducer = _Reducer(self)
        reducer.apply(event, t)
        return reducer.freeze()

    def observe_timed(self, timed: Iterable[tuple[Event, float]]) -> Tracker:
        """Many (event, time) pairs at once: the same tracker as observing them one by one, but
        the state is opened once and frozen once (an offline log of a million lines)."""
        reducer = _Reducer(self)
        for event, t in timed:
            reducer.apply(event, t)
        return reducer.freeze()

    def observe_sample(self, sample: ActivitySample) -> Tracker:
        """Activity counters; growth since the previous sample resets the stall window."""
        previous = self.last_sample
        active = previous is not None and self._grew(previous, sample)
        last = max(self.last_activity_at, sample.t) if active else self.last_activity_at
        return self._evolve(last_sample=sample, last_activity_at=last)

    def _grew(self, before: ActivitySample, after: ActivitySample) -> bool:
        limits = self.limits
        return (
            what_moved(
                before,
                after,
                cpu_counts=self.stage in limits.cpu_counts_in,
                cpu_busy_cores=limits.cpu_busy_cores,
                min_read_bytes=limits.min_read_bytes,
                min_net_bytes=limits.min_net_bytes,
                min_gpu_mem_bytes=limits.min_gpu_mem_bytes,
            )
            is not None
        )

    # -- reading -----------------------------------------------------------------------------

    @property
    def stage(self) -> str:
        """The limits key in force: launch, init, load, memory, capture, warmup, serving.

        The server's own warm-up request after the HTTP server is up stays `warmup`: its first
        forward pass compiles kernels and can take far longer than a client's first token, which
        `first_token` bounds (the kit's request after READY).
        """
        if self.phase is None:
            return "launch"
        return self.phase.value

    @property
    def rank_states(self) -> tuple[RankState, ...]:
        return tuple(sorted(self.ranks.values(), key=_sort_key))

    @property
    def timeline(self) -> tuple[PhaseSpan, ...]:
        """Every phase span of every rank, in the order they began (open ones have end None)."""
        spans = [*self._closed.items[: self._closed_n], *self.open_spans.values()]
        spans.sort(key=lambda item: item[0])
        return tuple(span for _, span in spans)

    @property
    def reached(self) -> Mapping[Milestone, frozenset[str | None]]:
        """Per milestone, the rank keys that printed it (or were carried to it)."""
        reached: dict[Milestone, set[str | None]] = {}
        for milestone, key in self._marks.items[: self._marks_n]:
            reached.setdefault(milestone, set()).add(key)
        return MappingProxyType({m: frozenset(keys) for m, keys in reached.items()})

    @property
    def errors(self) -> tuple[Event, ...]:
        """The last few errors that count (oldest first)."""
        return self.recent_errors

    @property
    def last_milestone(self) -> Milestone | None:
        """The furthest milestone any process printed last (errors are not milestones)."""
        own = [s.milestone for s in self.ranks.values() if s.milestone is not None]
        return max(own, key=MILESTONE_ORDER.__getitem__, default=None)

    def expected(self) -> tuple[ExpectedRank, ...]:
        """The scheduler ranks that should exist: `limits.expected_ranks` (plain TP numbering,
        one node), else the launch's own arguments, else none known."""
        count = self.limits.expected_ranks
        if count:
            if count == 1 or any(r.dp is not None or r.pp is not None for r in self._seen_ranks().values()):
                return ()
            return tuple(ExpectedRank(f"TP{tp}", 0) for tp in range(count))
        if self.launch is not None:
            return self.launch.expected()
        return ()

    def _seen_ranks(self) -> dict[str, Rank]:
        return {key: s.rank for key, s in self.ranks.items() if key is not None and s.rank is not None}

    def stuck_ranks(self) -> tuple[str, ...]:
        """Ranks that began the current phase and have not ended it (the ones holding it up)."""
        if self.phase in (None, Phase.SERVING):
            return ()
        return tuple(
            s.label for s in self.rank_states if s.effective in SCHEDULER_MILESTONES and s.phase is self.phase
        )

    def never_seen(self) -> tuple[ExpectedRank, ...]:
        """Expected ranks that printed nothing at all in this attempt."""
        seen = set(self.ranks)
        return tuple(rank for rank in self.expected() if rank.key not in seen)

    def missing(self) -> tuple[MissingRanks, ...]:
        """Per milestone, the ranks that never printed it although other ranks did.

        Rank-0-only lines are expected from each TP group's rank 0 only. Expected ranks (from
        `expected_ranks` or the launch's arguments) that never printed anything are missing from
        every milestone others reached, and listed in `never_seen`. Once ready, nothing is missing.
        """
        if self.ready_seq is not None:
            return ()
        known: dict[str, Rank] = self._seen_ranks()
        unseen: set[str] = set()
        for expected in self.expected():
            if expected.key not in known:
                rank = _rank_of(expected.key)
                if rank is not None:
                    known[expected.key] = rank
                    unseen.add(expected.key)
        reached = self.reached
        result = []
        for milestone in sorted(reached, key=MILESTONE_ORDER.__getitem__):
            got = reached[milestone]
            if milestone not in SCHEDULER_MILESTONES or not got - {None}:
                continue
            if milestone in self.all_ranks_print:
                owed = set(known)
            else:  # only rank-0-only lines reached it
                owed = {key for key, rank in known.items() if rank.is_rank0}
            absent = sorted(owed - got, key=lambda key: known[key].sort_key())
            if absent:
                result.append(
                    MissingRanks(
                        milestone,
                        tuple(known[key].label for key in absent),
                        tuple(known[key].label for key in absent if key in unseen),
                    )
                )
        return tuple(result)

    def crash(self, now: float, *, ended: bool = False) -> tuple[int, Event] | None:
        """The error that ended the server, if one did, with the sequence number that dates it.

        A fatal line ends it at once; the first fatal line is shown (later ones, such as
        "Received sigquit", are its consequences). A non-fatal error ends it only when nothing
        progressed after it, once `crash_grace_s` passed or the input ended.
        """
        if self.first_fatal is not None:
            assert self.last_fatal_seq is not None
            return self.last_fatal_seq, self.first_fatal[1]
        if self.last_error is None:
            return None
        seq, t, event = self.last_error
        if seq > self.progress_seq and (ended or now - t >= self.limits.crash_grace_s):
            return seq, event
        return None

    def verdict(self, now: float, *, ended: bool = False) -> Verdict | None:
        """The verdict at `now`, or None while start-up is still moving within its limits.

        `ended=True` says no more input will come (an offline log): a non-fatal error is then
        final at once, and a start-up that is neither ready nor crashed is HUNG.
        """
        crash = self.crash(now, ended=ended)
        if crash is not None and (self.ready_seq is None or crash[0] > self.ready_seq):
            return self._crashed(crash[1])
        if self.ready_seq is not None:
            return Ready(at=now if self.ready_at is None else self.ready_at)
        quiet_for = max(0.0, now - self.last_activity_at)
        stage = self.stage
        if ended or quiet_for >= self.limits.stall_window_s.of(stage):
            missing: list[str] = []
            for entry in self.missing():
                missing.extend(r for r in entry.ranks if r not in missing)
            return Hung(
                phase=self.phase,
                stuck_ranks=self.stuck_ranks(),
                missing_ranks=tuple(missing),
                evidence=self.evidence(),
                quiet_for_s=quiet_for,
            )
        elapsed = now - self.phase_since
        limit = self.limits.deadline_s.of(stage)
        if elapsed > limit:
            return Deadline(phase=self.phase, limit_s=limit, elapsed_s=elapsed)
        return None

    def evidence(self) -> tuple[str, ...]:
        """Last lines of the stuck ranks (or all ranks), the last lines overall, then the first
        line of each note kind (NCCL transport, version, network)."""
        stuck = set(self.stuck_ranks())
        lines: list[str] = []
        for state in self.rank_states:
            if not stuck or state.label in stuck:
                lines.extend(line for line in state.evidence[-2:] if line not in lines)
        lines.extend(line for line in self.tail if line not in lines)
        lines.extend(line for line in self.notes.values() if line not in lines)
        return tuple(lines)

    def exception_phase(self, event: Event | None = None) -> Phase | None:
        """The phase the errors' tracebacks point at (frames, messages): `event`'s, else the
        latest error's that has one. For logs without milestones (pasted tails)."""
        candidates = ([event] if event is not None else []) + list(reversed(self.recent_errors))
        for candidate in candidates:
            hint = candidate.fields.get("phase_hint")
            if hint:
                return Phase(hint)
        return None

    def _crashed(self, event: Event) -> Crashed:
        evidence = [event.text]
        if "traceback" in event.fields:
            evidence = str(event.fields["traceback"]).splitlines()[-8:]
        evidence.extend(t for e in self.recent_errors if (t := e.text) not in evidence)
        exception = event.fields.get("exception") or next(
            (e.fields["exception"] for e in reversed(self.recent_errors) if e.fields.get("exception")), None
        )
        phase, phase_from = self.phase, "milestones"
        if phase is None:
            phase = self.exception_phase(event)
            phase_from = None if phase is None else "exception"
        return Crashed(
            phase=phase,
            evidence=tuple(evidence),
            exception=exception,
            rank=event.rank_label,
            phase_from=phase_from,
        )


class _Reducer:
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
            if note is Note.SHUTDOWN:
                fields["shut_down"] = True
            elif note is Note.LAUNCH and self.get("launch") is None:
                fields["launch"] = LaunchArgs.from_fields(event.fields)
            else:
                self.note(event, note)
            if event.rank_key in self.ranks:  # notes are evidence for ranks already seen only
                self.touch(event, t)
            return
        milestone = event.milestone
        if milestone is Milestone.ERROR:
            self.touch(event, t)
            # After a shutdown request errors are the shutdown; after ready only fatal lines matter.
            if not self.get("shut_down") and (self.ready is None or event.fatal):
                fields["last_error"] = (seq, t, event)
                if self.recent is None:
                    self.recent = deque(self.base.recent_errors, _RECENT_ERRORS)
                self.recent.append(event)
                if event.fatal:
                    fields["last_fatal_seq"] = seq
                    if self.get("first_fatal") is None:
                        fields["first_fatal"] = (seq, event)
            return
        if milestone is not None:
            self.milestone(event, milestone, t, seq)

    def note(self, event: Event, note: Note) -> None:
        """Keep the first line of each note kind (per transport: P2P and SHM both matter)."""
        kind = str(note)
        transport = event.fields.get("transport") or event.fields.get("net")
        if transport:
            kind = f"{kind}.{transport}"
        notes = self.get("notes")
        if kind not in notes and len(notes) < _NOTE_KINDS:
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
        self.marks = _append(self.marks, self.marks_n, (milestone, key))
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
            self.closed = _append(self.closed, self.closed_n, closed)
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


def _rank_of(key: str) -> Rank | None:
    """A Rank from its key (`TP3`, `DP1 TP0`, `PP1 TP2`, `DP1`)."""
    values: dict[str, int] = {}
    for part in key.split():
        name, number = part[:2], part[2:]
        if name in ("TP", "DP", "PP") and number.isdigit():
            values[name.lower()] = int(number)
    return Rank(**values) if values else None
