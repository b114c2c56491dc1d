"""Follow one launch attempt's start-up from its events and activity counters, and name the verdict.

`Tracker` is an immutable value: `observe_*` return a new tracker, `verdict(now)` reads one. Time
is always passed in (monotonic seconds live, log timestamps offline); nothing here reads a clock,
a file or a container. The verdict types are in kit/logs/verdicts.py; a log holding several
launches is split into attempts by kit/logs/attempts.py, each attempt with its own tracker.

It is a reducer in linear time: each event costs O(ranks), never O(events so far); the event side
lives in kit/logs/reducer.py. Errors are kept as the few summaries verdicts need, not as a growing
list.

Two clocks of quiet: `last_activity_at` moves with progress (lines, reads, GPU memory growth,
compile writes, CPU where it counts) and decides HUNG; `last_alive_at` moves with any sign of life
at all (CPU included) and decides whether a fatal line was the end. The kit removes a container on
CRASHED, so CRASHED rests on the server's processes having exited (`ended`) or on a fatal line
followed by no sign of life for `crash_grace_s`; a non-fatal error the server went on after is
evidence in the result, never a verdict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from kit.logs.activity import ActivitySample, ActivitySummary, signs_of_life, summarize, what_moved
from kit.logs.events import (
    MILESTONE_ORDER,
    SCHEDULER_MILESTONES,
    Event,
    Milestone,
    Phase,
    Rank,
)
from kit.logs.launch import ExpectedRank, LaunchArgs
from kit.logs.reducer import Log, Reducer
from kit.logs.stacks import StackSample, moved, stack_basis
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
_KEEP_SAMPLES = 16  # the last ~30 s of samples: the activity a verdict reports


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
    last_activity_at: float = 0.0  # the last progress (decides HUNG)
    last_alive_at: float = 0.0  # the last sign of life of any kind (decides whether a fatal line ended it)
    last_sample: ActivitySample | None = None
    samples: tuple[ActivitySample, ...] = ()  # the last few, oldest first (the verdict's activity)
    gpu_error: str | None = None  # the first reason the GPUs could not be read (a GPU lost)
    # The last stack samples taken while quiet (kit/logs/stacks.py), oldest first.
    stack_samples: tuple[StackSample, ...] = ()
    seq: int = 0  # events observed; orders errors against progress
    progress_seq: int = 0
    all_ranks_print: frozenset[Milestone] = frozenset()  # seen from a line every rank prints
    ready_seq: int | None = None
    ready_at: float | None = None
    http_up: bool = False
    serving_only: bool = False  # READY read off serving lines: the attempt printed no start-up line
    progress_phase: Phase | None = None  # the phase of the latest progress bar read (Note.PROGRESS)
    # The diffusion server's load bar ('Loading required modules'): a crash's phase; a hang that stops
    # there is labelled with no phase (no language-model step applies to that server).
    diffusion_phase: Phase | None = None
    # For an attempt that printed no milestone (unmarked_phase): a serving note was read, one of them
    # the scheduler watchdog's dump of its stuck batch; the first NCCL set-up line and the first error.
    served: bool = False
    stuck_batch: bool = False
    nccl_setup_seq: int | None = None
    first_error_seq: int | None = None
    shut_down: bool = False
    tail: tuple[str, ...] = ()
    launch: LaunchArgs | None = None  # the attempt's own arguments, when its launch line said
    # The first line of each kind of note (NCCL version, transport, network, Gloo): facts about the
    # set-up that stay evidence after the last lines have scrolled past them.
    notes: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    # Errors that count, as summaries: the first fatal one (the cause), the last fatal one's seq
    # (dates the crash), the last one (at the end of input, a non-fatal error is the cause if no
    # milestone followed it).
    first_fatal: tuple[int, Event] | None = None
    last_fatal_seq: int | None = None
    last_error: tuple[int, float, Event] | None = None
    recent_errors: tuple[Event, ...] = ()
    # Open spans per rank label, with their creation order; closed ones are in the shared log.
    open_spans: Mapping[str, tuple[int, PhaseSpan]] = field(default_factory=lambda: _EMPTY)
    span_count: int = 0
    _closed: Log = field(default_factory=Log, compare=False, repr=False)
    _closed_n: int = field(default=0, compare=False, repr=False)
    _marks: Log = field(default_factory=Log, compare=False, repr=False)  # (milestone, rank key)
    _marks_n: int = field(default=0, compare=False, repr=False)

    @classmethod
    def start(cls, limits: PhaseLimits | None = None, t: float = 0.0) -> Tracker:
        return cls(
            limits=limits or PhaseLimits(), started_at=t, phase_since=t, last_activity_at=t, last_alive_at=t
        )

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
        return self._evolve(
            last_activity_at=max(self.last_activity_at, t),
            last_alive_at=max(self.last_alive_at, t),
            tail=tail,
        )

    def observe_events(self, events: Iterable[Event], t: float) -> Tracker:
        return self.observe_timed((event, t) for event in events)

    def observe_event(self, event: Event, t: float) -> Tracker:
        """One parsed event seen at time `t` (its line also counts as log activity)."""
        reducer = Reducer(self)
        reducer.apply(event, t)
        return reducer.freeze()

    def observe_timed(self, timed: Iterable[tuple[Event, float]]) -> Tracker:
        """Many (event, time) pairs at once: the same tracker as observing them one by one, but
        the state is opened once and frozen once (an offline log of a million lines)."""
        reducer = Reducer(self)
        for event, t in timed:
            reducer.apply(event, t)
        return reducer.freeze()

    def observe_sample(self, sample: ActivitySample) -> Tracker:
        """Activity counters: progress since the previous sample resets the stall window, any
        movement at all (CPU included) counts as a sign of life."""
        previous = self.last_sample
        active = previous is not None and self._grew(previous, sample)
        alive = active or (previous is not None and self._lives(previous, sample))
        return self._evolve(
            last_sample=sample,
            samples=(*self.samples, sample)[-_KEEP_SAMPLES:],
            last_activity_at=max(self.last_activity_at, sample.t) if active else self.last_activity_at,
            last_alive_at=max(self.last_alive_at, sample.t) if alive else self.last_alive_at,
            gpu_error=self.gpu_error or sample.gpu_error,
        )

    def observe_stacks(self, sample: StackSample) -> Tracker:
        """Every rank's stack while the stage is quiet. A rank working (a compile, a load) or one
        that got past a wait since the previous sample is progress; idle ranks are not. A stack
        that could not be read changes nothing: it is neither progress nor a hang."""
        previous = self.stack_samples[-1] if self.stack_samples else StackSample(t=sample.t)
        # A place of work is progress only while some counter shows life (since the previous sample
        # in this quiet stretch, else since the stretch began); with none it stands (RankStack.still).
        since = (
            previous.t
            if self.stack_samples and previous.t >= self.last_activity_at
            else self.last_activity_at
        )
        if not self._alive_since(since):
            sample = replace(sample, ranks=tuple(replace(r, still=True) for r in sample.ranks))
        said = moved(previous, sample)
        changes: dict[str, Any] = {"stack_samples": (*self.stack_samples, sample)[-2:]}
        if said:
            changes["last_activity_at"] = max(self.last_activity_at, sample.t)
            changes["last_alive_at"] = max(self.last_alive_at, sample.t)
        return self._evolve(**changes)

    def _alive_since(self, since: float) -> bool:
        """Did any counter move (CPU above the alive rate, reads, network, GPU memory, a compiler)
        between two activity samples, the later one after `since`?"""
        pairs = zip(self.samples, self.samples[1:], strict=False)
        return any(b.t > since and self._lives(a, b) for a, b in pairs)

    def stacks_while_quiet(self) -> tuple[StackSample, ...]:
        """The stack samples taken since the last progress: the ones a HUNG verdict can rest on."""
        return tuple(s for s in self.stack_samples if s.t >= self.last_activity_at)

    def _lives(self, before: ActivitySample, after: ActivitySample) -> bool:
        limits = self.limits
        return (
            signs_of_life(
                before,
                after,
                cpu_alive_cores=limits.cpu_alive_cores,
                min_read_bytes=limits.min_read_bytes,
                min_net_bytes=limits.min_net_bytes,
                min_gpu_mem_bytes=limits.min_gpu_mem_bytes,
            )
            is not None
        )

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
                compile_counts=self.stage in limits.compile_counts_in,
                min_compile_bytes=limits.min_compile_bytes,
            )
            is not None
        )

    # -- reading -----------------------------------------------------------------------------

    @property
    def stage(self) -> str:
        """The limits key in force: launch, init, load, memory, autotune, capture, warmup, serving.

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

        `ended`: the server's processes exited (live) or the input is over (offline). Then a fatal
        line is the crash, and so is a non-fatal error no milestone and no longer life (past the
        grace) followed. While the server
        runs, only a fatal line followed by no sign of life for `crash_grace_s` is a crash: a
        server that logs an error and goes on (lines, reads, GPU memory, CPU) is not removed for
        it. The first fatal line is shown (later ones, such as "Received sigquit", are its
        consequences).
        """
        if self.first_fatal is not None:
            assert self.last_fatal_seq is not None
            if ended or now - self.last_alive_at >= self.limits.crash_grace_s:
                return self.last_fatal_seq, self.first_fatal[1]
            return None
        if self.last_error is None or not ended:
            return None
        seq, t, event = self.last_error
        # The end came with the error: nothing progressed and nothing lived on long after it. A
        # server that worked on for minutes after a harmless traceback and then died (killed for
        # memory, say) ended for another reason, which the exit says (kit/startup/watch.py).
        if seq > self.progress_seq and self.last_alive_at - t < self.limits.crash_grace_s:
            return seq, event
        return None

    def survived_errors(self, now: float, *, ended: bool = False) -> tuple[Event, ...]:
        """Non-fatal errors that did not end the server (it logged them and went on): evidence in
        the result, not the verdict. The last few only (kit/logs/reducer.py keeps RECENT_ERRORS)."""
        crash = self.crash(now, ended=ended)
        cause = None if crash is None else crash[1]
        return tuple(e for e in self.recent_errors if not e.fatal and e is not cause)

    def activity(self) -> ActivitySummary | None:
        """What the server's processes did since the last progress (at least the last two samples):
        the activity a verdict is reached on, with its shape (quiet, spinning) for the causes."""
        quiet = [s for s in self.samples if s.t >= self.last_activity_at]
        chosen = quiet if len(quiet) >= 2 else list(self.samples[-2:])
        ranks = self.limits.expected_ranks or len(self._seen_ranks()) or 1
        return summarize(chosen, ranks)

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
            ranks = [e.key for e in self.expected()] or [s.label for s in self.rank_states if s.rank]
            basis = stack_basis(self.stacks_while_quiet(), ranks)
            phase, phase_from = self.phase, "milestones" if self.phase is not None else None
            if phase is None and self.last_milestone is None:
                phase, phase_from = self.unmarked_phase(hung=True)
            return Hung(
                phase=phase,
                phase_from=phase_from,
                stuck_ranks=self.stuck_ranks(),
                missing_ranks=tuple(missing),
                evidence=self.evidence(),
                quiet_for_s=quiet_for,
                stacks_confirm=basis.complete,
                basis=basis.said,
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

    def unmarked_phase(self, *, hung: bool) -> tuple[Phase | None, str | None]:
        """Where an attempt that printed no milestone, and whose errors name no phase, was: (phase,
        phase_from), from its other lines. Live and offline alike (kit analyze reads the verdict).

        - The scheduler watchdog's dump of its stuck batch (0.5.23 `scheduler.cur_batch_for_debug...`,
          0.4.7-0.5.x `self.cur_batch.batch_size()=`, written only while a batch runs): a hang while
          serving (patterns.toml).
        - A hang whose last step's sign is its progress bar (the weight loader's shards): that step, as
          a crash's phase is read (`_crashed`).
        - NCCL's own set-up lines (reducer.NCCL_SETUP) with no serving line, in a hang or before every
          error of a crash: distributed init.

        (A stretch of 0.3-0.4.6's retraction lines is a serving note, so READY, as the newer wording.)
        """
        if hung and self.stuck_batch:
            return Phase.SERVING, "serving"
        if hung and self.progress_phase is not None:
            return self.progress_phase, "progress"
        setup = self.nccl_setup_seq
        if (
            setup is not None
            and not self.served
            and (self.first_error_seq is None or self.first_error_seq > setup)
        ):
            return Phase.INIT, "nccl"
        return None, None

    def _crashed(self, event: Event) -> Crashed:
        evidence = [event.text]
        if "traceback" in event.fields:
            evidence = str(event.fields["traceback"]).splitlines()[-8:]
        evidence.extend(t for e in self.recent_errors if (t := e.text) not in evidence)
        exception = event.fields.get("exception") or next(
            (e.fields["exception"] for e in reversed(self.recent_errors) if e.fields.get("exception")), None
        )
        phase, phase_from = self.phase, "milestones"
        # With no milestone, the traceback says where it was; so it does when READY was only read
        # off serving lines (the server's own warm-up request prints batches too, and its failure,
        # `Initialization failed. warmup error`, names the warm-up).
        hint = self.exception_phase(event) if phase is None or self.serving_only else None
        if hint is not None or phase is None:
            phase, phase_from = hint, None if hint is None else "exception"
        # No milestone and no phase in the traceback: a step's progress bar (the weight loader's
        # shards) was the last word on where start-up was.
        bar = self.progress_phase or self.diffusion_phase
        if phase is None and bar is not None:
            phase, phase_from = bar, "progress"
        # A message that names the step which raised it, after a milestone of a later phase (the
        # parser marks such an error with the patterns it read the log with: `phase_over`).
        if phase is not None and phase_from == "milestones":
            errors = (event, *self.recent_errors)
            over = next((e.fields["phase_over"] for e in errors if "phase_over" in e.fields), None)
            if over is not None:
                phase, phase_from = Phase(over), "exception"
        if phase is None and self.last_milestone is None:
            phase, phase_from = self.unmarked_phase(hung=False)
        return Crashed(
            phase=phase,
            evidence=tuple(evidence),
            exception=exception,
            rank=event.rank_label,
            phase_from=phase_from,
        )


def _rank_of(key: str) -> Rank | None:
    """A Rank from its key (`TP3`, `DP1 TP0`, `PP1 TP2`, `DP1`)."""
    values: dict[str, int] = {}
    for part in key.split():
        name, number = part[:2], part[2:]
        if name in ("TP", "DP", "PP") and number.isdigit():
            values[name.lower()] = int(number)
    return Rank(**values) if values else None
