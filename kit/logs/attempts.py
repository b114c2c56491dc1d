"""Split a log into launch attempts and judge the last one.

A log can hold several starts: journald of a unit with `Restart=on-failure`, a file appended to
by each run, `docker logs` of a restarted container. Judging them as one start mixes a finished
attempt's READY with the next one's hang. `Attempts` has the tracker's observe/verdict interface;
it starts a fresh `Tracker` at each launch line (the launcher's `server_args=` line, or its
equivalent per dialect: a `launch` note in patterns.toml) and keeps a summary of every earlier
attempt. Not at `init.begin`: an MTP/EAGLE draft worker prints the start-up cycle again inside
the same launch.

A launch line opens a new attempt when the current attempt already saw a launch line of the same
kind (vLLM prints two different ones per start) or already printed a milestone, or an error after
its own launch line. An error before any launch line belongs to the launch that follows: SGLang
prints its `server_args` line only after configuring itself, and a harmless traceback can come
first (an optional import, `retry()` printing a failed Hub request; kit/logs/tracker.py).
Pure and immutable, like the tracker; time is passed in.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kit.logs.activity import ActivitySample
from kit.logs.events import Event, Milestone, Note, Phase
from kit.logs.stacks import StackSample
from kit.logs.tracker import Tracker
from kit.logs.verdicts import Crashed, PhaseLimits, Ready, Verdict


@dataclass(frozen=True, slots=True)
class AttemptSummary:
    """How an earlier attempt ended. `outcome`: ready, crashed, or hung (it stopped printing
    without either before the next launch: a supervisor or a person restarted it)."""

    number: int
    outcome: str
    phase: Phase | None
    last_milestone: Milestone | None
    started_at: float
    ended_at: float
    exception: str | None = None

    @property
    def verdict(self) -> str:
        return self.outcome

    def describe(self) -> str:
        where = f" in {self.phase.value}" if self.phase is not None and self.outcome != "ready" else ""
        return f"{self.outcome.upper()}{where}"


def outcome_of(verdict: Verdict | None) -> str:
    """The offline outcome word of a verdict taken at the end of input."""
    if isinstance(verdict, Ready):
        return "ready"
    if isinstance(verdict, Crashed):
        return "crashed"
    return "hung"


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class _History:
    """Earlier attempts as a chain, newest first: closing an attempt adds one link, where a tuple
    would be copied whole (a log of 16,000 restarts spent half a second re-copying it)."""

    last: AttemptSummary
    before: _History | None
    size: int

    def as_tuple(self) -> tuple[AttemptSummary, ...]:
        out: list[AttemptSummary] = []
        link: _History | None = self
        while link is not None:
            out.append(link.last)
            link = link.before
        return tuple(reversed(out))

    # Not field by field: that recurses once per link, past Python's limit on a long log.
    def __eq__(self, other: object) -> bool:
        return isinstance(other, _History) and self.as_tuple() == other.as_tuple()

    def __hash__(self) -> int:
        return hash(self.as_tuple())

    def __repr__(self) -> str:
        return f"<{self.size} earlier attempts>"


@dataclass(frozen=True)
class Attempts:
    """Launch attempts of one log; `current` is the last one's tracker, `earlier` the others."""

    limits: PhaseLimits = field(default_factory=PhaseLimits)
    current: Tracker = field(default_factory=Tracker.start)
    history: _History | None = None  # read as `earlier`
    launch_kinds: frozenset[str] = frozenset()  # launch lines the current attempt already saw
    progressed: bool = False  # the current attempt printed a milestone, or an error after its launch line
    first_line: int = 1  # the log line where the current attempt began (its launch line)

    @classmethod
    def start(cls, limits: PhaseLimits | None = None, t: float = 0.0) -> Attempts:
        limits = limits or PhaseLimits()
        return cls(limits=limits, current=Tracker.start(limits, t))

    def _evolve(self, **changes: Any) -> Attempts:
        new = object.__new__(Attempts)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new

    # -- the tracker's interface ------------------------------------------------------------

    def observe_line(self, t: float, text: str | None = None) -> Attempts:
        return self._evolve(current=self.current.observe_line(t, text))

    def observe_events(self, events: Iterable[Event], t: float) -> Attempts:
        attempts = self
        for event in events:
            attempts = attempts.observe_event(event, t)
        return attempts

    def observe_event(self, event: Event, t: float) -> Attempts:
        if event.note is Note.LAUNCH:
            kind = str(event.fields.get("kind", "launch"))
            if self.progressed or kind in self.launch_kinds:
                return self._next(t, event.line_no).observe_event(event, t)
            return self._evolve(
                current=self.current.observe_event(event, t), launch_kinds=self.launch_kinds | {kind}
            )
        current = self.current.observe_event(event, t)
        if not self.progressed and self._progresses(event):
            return self._evolve(current=current, progressed=True)
        return self._evolve(current=current)

    def _progresses(self, event: Event) -> bool:
        if event.milestone is Milestone.ERROR:
            return bool(self.launch_kinds)
        return event.milestone is not None or event.note is Note.SERVING

    def observe_timed(self, timed: Iterable[tuple[Event, float]]) -> Attempts:
        """Many (event, time) pairs at once (an offline log): each attempt's tracker is opened once
        and frozen once, the same result as observing the events one by one."""
        attempts = self
        batch: list[tuple[Event, float]] = []

        def flush() -> Attempts:
            if not batch:
                return attempts
            current = attempts.current.observe_timed(batch)
            progressed = attempts.progressed or any(attempts._progresses(e) for e, _ in batch)
            batch.clear()
            return attempts._evolve(current=current, progressed=progressed)

        for event, t in timed:
            if event.note is Note.LAUNCH:
                attempts = flush()
                attempts = attempts.observe_event(event, t)
            else:
                batch.append((event, t))
        return flush()

    def observe_sample(self, sample: ActivitySample) -> Attempts:
        return self._evolve(current=self.current.observe_sample(sample))

    def observe_stacks(self, sample: StackSample) -> Attempts:
        return self._evolve(current=self.current.observe_stacks(sample))

    def verdict(self, now: float, *, ended: bool = False) -> Verdict | None:
        """The current (last) attempt's verdict; earlier attempts never decide it."""
        return self.current.verdict(now, ended=ended)

    def __getattr__(self, name: str) -> Any:
        # Read attributes (phase, stage, rank_states, timeline, missing(), ...) are the current
        # attempt's, so code written for a Tracker reads an Attempts the same way.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.current, name)

    # -- attempts ---------------------------------------------------------------------------

    @functools.cached_property
    def earlier(self) -> tuple[AttemptSummary, ...]:
        """How each earlier attempt ended, oldest first."""
        return () if self.history is None else self.history.as_tuple()

    @property
    def number(self) -> int:
        """The current attempt's number, from 1."""
        return 1 if self.history is None else self.history.size + 1

    @property
    def count(self) -> int:
        """Attempts seen so far (the current one is the last)."""
        return self.number

    def _next(self, t: float, line_no: int) -> Attempts:
        """Close the current attempt at `t` (the next launch line, at `line_no`); start afresh."""
        tracker = self.current
        ended_at = max(tracker.started_at, tracker.last_activity_at)
        verdict = tracker.verdict(ended_at, ended=True)
        summary = AttemptSummary(
            number=self.number,
            outcome=outcome_of(verdict),
            phase=getattr(verdict, "phase", None) if not isinstance(verdict, Ready) else tracker.phase,
            last_milestone=tracker.last_milestone,
            started_at=tracker.started_at,
            ended_at=ended_at,
            exception=verdict.exception if isinstance(verdict, Crashed) else None,
        )
        return Attempts(
            limits=self.limits,
            current=Tracker.start(self.limits, t),
            history=_History(summary, self.history, self.number),
            first_line=line_no,
        )

    def summary(self) -> str:
        """`attempt 3 of 3; attempts 1-2 CRASHED in load` (runs of equal endings grouped)."""
        head = f"attempt {self.number} of {self.count}"
        if not self.earlier:
            return head
        runs: list[list[Any]] = []  # [first, last, description]
        for attempt in self.earlier:
            description = attempt.describe()
            if runs and runs[-1][2] == description and runs[-1][1] == attempt.number - 1:
                runs[-1][1] = attempt.number
            else:
                runs.append([attempt.number, attempt.number, description])
        if len(runs) <= 3:
            parts = [
                f"attempt {first} {what}" if first == last else f"attempts {first}-{last} {what}"
                for first, last, what in runs
            ]
            return f"{head}; " + ", ".join(parts)
        counts: dict[str, int] = {}
        for attempt in self.earlier:
            counts[attempt.describe()] = counts.get(attempt.describe(), 0) + 1
        ranked = sorted(counts.items(), key=lambda item: -item[1])
        return f"{head}; {len(self.earlier):,} earlier: " + ", ".join(f"{n:,} {what}" for what, n in ranked)


class LaunchCounter:
    """Launches in text the analysis does not read (the middle of a log read as head and tail):
    each launch kind's lines counted (patterns.toml's `launch` notes), the most of any kind being the
    launches (vLLM prints two different launch lines per start, SGLang one). Feed it text; read
    `launches`."""

    def __init__(self, patterns: Any | None = None):
        from kit.logs.patterns import default_patterns

        patterns = patterns or default_patterns()
        kinds: dict[str, list[str]] = {}
        for group in patterns.by_scan.values():
            for pattern in group:
                if pattern.note is Note.LAUNCH:
                    kinds.setdefault(pattern.kind or "launch", []).append(pattern.regex.pattern)
        self._regexes = {kind: re.compile("|".join(sorted(set(r)))) for kind, r in kinds.items()}
        self.counts = dict.fromkeys(self._regexes, 0)

    def __call__(self, text: str) -> None:
        for kind, regex in self._regexes.items():
            self.counts[kind] += sum(1 for _ in regex.finditer(text))

    @property
    def launches(self) -> int:
        return max(self.counts.values(), default=0)


def across_skipped(number: int, count: int, summary: str, skipped_launches: int) -> tuple[int, int, str]:
    """The judged attempt's number, the count and the summary of a log whose middle was skipped with
    SKIPPED_LAUNCHES launches in it: every attempt read after the middle moves up by them (a log of
    5,018 launches read as head and tail is at attempt 5018 of 5018, not at the count of the part
    read); the summary says which attempts were judged."""
    if not skipped_launches:
        return number, count, summary
    _, _, read = summary.partition("; ")
    judged = f"; in the part read, {read}" if read else ""
    return (
        number + skipped_launches,
        count + skipped_launches,
        f"attempt {number + skipped_launches} of {count + skipped_launches} "
        f"({skipped_launches:,} launches in the skipped middle, not judged){judged}",
    )
