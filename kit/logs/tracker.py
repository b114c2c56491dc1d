"""Follow a server's start-up from its events and activity counters, and name what happened.

`Tracker` is an immutable value: `observe_*` return a new tracker, `verdict(now)` reads one.
Time is always passed in (monotonic seconds for live use, log timestamps offline); nothing here
reads a clock, a file or a container.

Verdicts:
  READY     the server said "fired up and ready to roll".
  CRASHED   a fatal error line, or an error after which nothing progressed.
  HUNG      no new log line and no activity growth (CPU, disk reads, GPU memory) for the current
            phase's stall window; names the ranks stuck in the phase and those missing from a
            milestone others reached.
  DEADLINE  the current phase has lasted longer than its deadline, although something moved.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType

from kit.errors import ExitCode
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

# -- inputs and configuration ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StageSeconds:
    """One number of seconds per start-up stage.

    `launch` is before the first milestone (imports, argument checks); `first_token` bounds a
    client's first token after READY; the others are the phases of the same name.
    """

    launch: float
    init: float
    load: float
    memory: float
    capture: float
    warmup: float
    first_token: float

    def of(self, stage: str) -> float:
        return float(getattr(self, stage))


@dataclass(frozen=True, slots=True)
class PhaseLimits:
    """How long each stage may take, and how long it may stay quiet.

    Stall windows are short in init (NCCL set-up takes seconds; a quiet minute means a peer is
    missing or a collective hangs) and long in load (a large checkpoint on slow storage).
    Log lines, disk reads, network bytes received and GPU memory growth reset the window in every
    stage; CPU time only in `cpu_counts_in` (kit/logs/activity.py says why).
    """

    deadline_s: StageSeconds = StageSeconds(
        launch=900, init=600, load=3600, memory=600, capture=1800, warmup=600, first_token=600
    )
    stall_window_s: StageSeconds = StageSeconds(
        launch=180, init=120, load=600, memory=180, capture=300, warmup=180, first_token=300
    )
    expected_ranks: int | None = None
    cpu_busy_cores: float = 0.25  # CPU seconds per second that count as "computing"
    min_read_bytes: int = 1 << 20  # per sample
    min_net_bytes: int = 1 << 20  # per sample
    min_gpu_mem_bytes: int = 16 << 20  # per sample
    cpu_counts_in: frozenset[str] = frozenset({"launch"})
    crash_grace_s: float = 10.0  # a non-fatal error with no progress for this long is a crash
    evidence_lines: int = 6  # last lines kept per rank and overall


# -- verdicts --------------------------------------------------------------------------------


class VerdictKind(StrEnum):
    READY = "ready"
    CRASHED = "crashed"
    HUNG = "hung"
    DEADLINE = "deadline"


@dataclass(frozen=True, slots=True)
class Ready:
    at: float
    kind: VerdictKind = VerdictKind.READY
    exit_code: int = ExitCode.OK


@dataclass(frozen=True, slots=True)
class Crashed:
    phase: Phase | None
    evidence: tuple[str, ...]
    exception: str | None
    rank: str | None = None
    kind: VerdictKind = VerdictKind.CRASHED
    exit_code: int = ExitCode.FAILED


@dataclass(frozen=True, slots=True)
class Hung:
    phase: Phase | None
    stuck_ranks: tuple[str, ...]
    missing_ranks: tuple[str, ...]
    evidence: tuple[str, ...]
    quiet_for_s: float
    kind: VerdictKind = VerdictKind.HUNG
    exit_code: int = ExitCode.HUNG


@dataclass(frozen=True, slots=True)
class Deadline:
    phase: Phase | None
    limit_s: float
    elapsed_s: float
    kind: VerdictKind = VerdictKind.DEADLINE
    exit_code: int = ExitCode.DEADLINE


Verdict = Ready | Crashed | Hung | Deadline


# -- state -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RankState:
    """Where one process is. `effective` also counts rank-0-only lines its TP rank 0 printed."""

    rank: Rank | None
    milestone: Milestone | None = None
    effective: Milestone | None = None
    phase: Phase | None = None
    phase_since: float = 0.0
    last_t: float = 0.0
    last_time: datetime | None = None
    evidence: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return "main" if self.rank is None else self.rank.label


@dataclass(frozen=True, slots=True)
class PhaseSpan:
    """One stretch of one rank in one phase; `end` is None while it lasts."""

    rank: str
    phase: Phase
    start: float
    end: float | None = None

    def elapsed(self, now: float) -> float:
        return (self.end if self.end is not None else now) - self.start


@dataclass(frozen=True, slots=True)
class MissingRanks:
    milestone: Milestone
    ranks: tuple[str, ...]


def _sort_key(state: RankState) -> tuple[int, ...]:
    return (-2, 0, 0, 0) if state.rank is None else state.rank.sort_key()  # main process first


@dataclass(frozen=True)
class Tracker:
    """Immutable start-up state; build with `Tracker.start(limits, t)` and the observe_* methods."""

    limits: PhaseLimits = field(default_factory=PhaseLimits)
    started_at: float = 0.0
    ranks: Mapping[str | None, RankState] = field(default_factory=lambda: MappingProxyType({}))
    timeline: tuple[PhaseSpan, ...] = ()
    phase: Phase | None = None
    phase_since: float = 0.0
    last_activity_at: float = 0.0
    last_sample: ActivitySample | None = None
    seq: int = 0  # events observed; orders errors against progress
    progress_seq: int = 0
    reached: Mapping[Milestone, frozenset[str | None]] = field(default_factory=lambda: MappingProxyType({}))
    all_ranks_print: frozenset[Milestone] = frozenset()  # seen from a line every rank prints
    errors: tuple[tuple[int, float, Event], ...] = ()  # (seq, t, event) of errors that count
    ready_seq: int | None = None
    ready_at: float | None = None
    http_up: bool = False
    shut_down: bool = False
    tail: tuple[str, ...] = ()

    @classmethod
    def start(cls, limits: PhaseLimits | None = None, t: float = 0.0) -> Tracker:
        return cls(limits=limits or PhaseLimits(), started_at=t, phase_since=t, last_activity_at=t)

    # -- inputs ------------------------------------------------------------------------------

    def observe_line(self, t: float, text: str | None = None) -> Tracker:
        """Any log line, interesting or not: the log moved (and its text joins the tail).

        Live use: call this for every line, then `observe_event` for each event the parser
        returned for it. Offline, events alone are enough.
        """
        tail = self.tail if text is None else (*self.tail, text)[-self.limits.evidence_lines :]
        return dataclasses.replace(self, last_activity_at=max(self.last_activity_at, t), tail=tail)

    def observe_events(self, events: Iterable[Event], t: float) -> Tracker:
        tracker = self
        for event in events:
            tracker = tracker.observe_event(event, t)
        return tracker

    def observe_event(self, event: Event, t: float) -> Tracker:
        """One parsed event seen at time `t` (its line also counts as log activity)."""
        moved = dataclasses.replace(self, seq=self.seq + 1, last_activity_at=max(self.last_activity_at, t))
        if event.note is not None:
            return moved._with_note(event, t)
        if event.milestone is Milestone.ERROR:
            return moved._with_error(event, t)
        if event.milestone is not None:
            return moved._with_milestone(event, event.milestone, t)
        return moved

    def _touched(self, event: Event, t: float) -> RankState:
        """The event's rank (new if unseen) with this line as its latest evidence."""
        state = self.ranks.get(event.rank_key) or RankState(rank=event.rank, phase_since=t)
        return dataclasses.replace(
            state,
            last_t=t,
            last_time=event.time or state.last_time,
            evidence=(*state.evidence, event.text)[-self.limits.evidence_lines :],
        )

    def _with_note(self, event: Event, t: float) -> Tracker:
        changes: dict[str, object] = {}
        if event.note is Note.SHUTDOWN:
            changes["shut_down"] = True
        if event.rank_key in self.ranks:  # notes are evidence for ranks already seen, not new ranks
            changes["ranks"] = MappingProxyType({**self.ranks, event.rank_key: self._touched(event, t)})
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def _with_error(self, event: Event, t: float) -> Tracker:
        ranks = MappingProxyType({**self.ranks, event.rank_key: self._touched(event, t)})
        # After a shutdown request errors are the shutdown; after ready only fatal lines matter.
        counts = not self.shut_down and (self.ready_seq is None or event.fatal)
        errors = (*self.errors, (self.seq, t, event)) if counts else self.errors
        return dataclasses.replace(self, ranks=ranks, errors=errors)

    def _with_milestone(self, event: Event, milestone: Milestone, t: float) -> Tracker:
        key = event.rank_key
        ranks = dict(self.ranks)
        timeline = list(self.timeline)
        ranks[key] = _advance(self._touched(event, t), milestone, milestone, t, timeline)
        if event.rank0_only and event.rank is not None and event.rank.is_rank0:
            _carry_to_peers(ranks, event.rank, key, milestone, t, timeline)
        if milestone in (Milestone.HTTP_UP, Milestone.READY):
            # The front end only comes up once every scheduler finished its start-up.
            order = MILESTONE_ORDER[milestone]
            for other, peer in list(ranks.items()):
                if other != key and peer.effective is not None and MILESTONE_ORDER[peer.effective] < order:
                    ranks[other] = _advance(peer, None, milestone, t, timeline)
        ready = milestone is Milestone.READY
        updated = dataclasses.replace(
            self,
            ranks=MappingProxyType(ranks),
            timeline=tuple(timeline),
            progress_seq=self.seq,
            reached=MappingProxyType(
                {**self.reached, milestone: self.reached.get(milestone, frozenset()) | {key}}
            ),
            all_ranks_print=self.all_ranks_print if event.rank0_only else self.all_ranks_print | {milestone},
            ready_seq=self.seq if ready else self.ready_seq,
            ready_at=t if ready else self.ready_at,
            http_up=self.http_up or milestone is Milestone.HTTP_UP,
        )
        phase = updated._overall_phase()
        if phase != self.phase:
            updated = dataclasses.replace(updated, phase=phase, phase_since=t)
        return updated

    def observe_sample(self, sample: ActivitySample) -> Tracker:
        """Activity counters; growth since the previous sample resets the stall window."""
        previous = self.last_sample
        active = previous is not None and self._grew(previous, sample)
        last = max(self.last_activity_at, sample.t) if active else self.last_activity_at
        return dataclasses.replace(self, last_sample=sample, last_activity_at=last)

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
    def last_milestone(self) -> Milestone | None:
        """The furthest milestone any process printed last (errors are not milestones)."""
        own = [s.milestone for s in self.ranks.values() if s.milestone is not None]
        return max(own, key=MILESTONE_ORDER.__getitem__, default=None)

    def _scheduler_states(self) -> list[RankState]:
        return [s for s in self.ranks.values() if s.effective in SCHEDULER_MILESTONES]

    def _overall_phase(self) -> Phase | None:
        if self.ready_seq is not None:
            return Phase.SERVING
        if self.http_up:
            return Phase.WARMUP
        phases = [s.phase for s in self._scheduler_states() if s.phase is not None]
        return min(phases, key=PHASE_ORDER.__getitem__, default=None)

    def stuck_ranks(self) -> tuple[str, ...]:
        """Ranks that began the current phase and have not ended it (the ones holding it up)."""
        if self.phase in (None, Phase.SERVING):
            return ()
        return tuple(
            s.label for s in self.rank_states if s.effective in SCHEDULER_MILESTONES and s.phase is self.phase
        )

    def missing(self) -> tuple[MissingRanks, ...]:
        """Per milestone, the ranks that never printed it although other ranks did.

        Rank-0-only lines are expected from each TP group's rank 0 only. With `expected_ranks`
        set (plain TP numbering), ranks never seen at all are missing from every milestone.
        """
        known: dict[str, Rank] = {
            key: s.rank for key, s in self.ranks.items() if key is not None and s.rank is not None
        }
        expected = self.limits.expected_ranks
        if expected and all(r.dp is None and r.pp is None for r in known.values()):
            for tp in range(expected):
                known.setdefault(f"TP{tp}", Rank(tp=tp))
        result = []
        for milestone in sorted(self.reached, key=MILESTONE_ORDER.__getitem__):
            got = self.reached[milestone]
            if milestone not in SCHEDULER_MILESTONES or not got - {None}:
                continue
            if milestone in self.all_ranks_print:
                owed = set(known)
            else:  # only rank-0-only lines reached it
                owed = {key for key, rank in known.items() if rank.is_rank0}
            absent = sorted(owed - got, key=lambda key: known[key].sort_key())
            if absent:
                result.append(MissingRanks(milestone, tuple(known[key].label for key in absent)))
        return tuple(result)

    def crash(self, now: float, *, ended: bool = False) -> tuple[int, Event] | None:
        """The error that ended the server, if one did, with the sequence number that dates it.

        A fatal line ends it at once; the first fatal line is shown (later ones, such as
        "Received sigquit", are its consequences). A non-fatal error ends it only when nothing
        progressed after it, once `crash_grace_s` passed or the input ended.
        """
        fatal = [(seq, event) for seq, _, event in self.errors if event.fatal]
        if fatal:
            return fatal[-1][0], fatal[0][1]
        if not self.errors:
            return None
        seq, t, event = self.errors[-1]
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
            missing = []
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
        """Last lines of the stuck ranks (or all ranks), then the last lines overall."""
        stuck = set(self.stuck_ranks())
        lines: list[str] = []
        for state in self.rank_states:
            if not stuck or state.label in stuck:
                lines.extend(line for line in state.evidence[-2:] if line not in lines)
        lines.extend(line for line in self.tail if line not in lines)
        return tuple(lines)

    def _crashed(self, event: Event) -> Crashed:
        evidence = [event.text]
        if "traceback" in event.fields:
            evidence = str(event.fields["traceback"]).splitlines()[-8:]
        evidence.extend(t for _, _, e in self.errors[-4:] if (t := e.text) not in evidence)
        exception = event.fields.get("exception") or next(
            (e.fields["exception"] for _, _, e in reversed(self.errors) if e.fields.get("exception")), None
        )
        return Crashed(
            phase=self.phase,
            evidence=tuple(evidence),
            exception=exception,
            rank=event.rank_label,
        )


def _advance(
    state: RankState, own: Milestone | None, effective: Milestone, t: float, timeline: list[PhaseSpan]
) -> RankState:
    """The rank after printing `effective` (itself, or via its rank 0); records phase spans."""
    phase = phase_after(effective)
    changes: dict[str, object] = {"effective": effective}
    if own is not None:
        changes["milestone"] = own
    if phase is not state.phase:
        label = state.label
        for i in range(len(timeline) - 1, -1, -1):
            span = timeline[i]
            if span.rank == label and span.end is None:
                timeline[i] = dataclasses.replace(span, end=t)
                break
        if phase is not None:
            timeline.append(PhaseSpan(rank=label, phase=phase, start=t))
        changes["phase"] = phase
        changes["phase_since"] = t
    return dataclasses.replace(state, **changes)  # type: ignore[arg-type]


def _carry_to_peers(
    ranks: dict[str | None, RankState],
    rank0: Rank,
    rank0_key: str | None,
    milestone: Milestone,
    t: float,
    timeline: list[PhaseSpan],
) -> None:
    """A rank-0-only milestone also moves the rank's TP peers that reached the step before it.

    Those peers do the same work (e.g. draft CUDA graph capture) without logging it.
    """
    floor = MILESTONE_ORDER[milestone] - 1
    for key, peer in list(ranks.items()):
        if key == rank0_key or peer.rank is None or peer.rank.group != rank0.group:
            continue
        if (
            peer.effective is not None
            and peer.effective in SCHEDULER_MILESTONES
            and MILESTONE_ORDER[peer.effective] >= floor
        ):
            ranks[key] = _advance(peer, None, milestone, t, timeline)
