"""Follow one server through a `Source`: its output through the parser into the tracker, plus
activity samples, on the source's clock.

This is the imperative shell around the pure tracker: it reads the source and hands plain values to
`Tracker`. `kit up`, `kit watch`, the pytest plugin and replayed scenarios all drive this class; only
the source differs (kit/runtime/source.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kit.logs import ActivitySample, Crashed, Event, LogParser, PhaseLimits, Tracker, Verdict
from kit.runtime.source import Source, SourceState


@dataclass(frozen=True)
class Progress:
    """One step's view, for live renderers."""

    tracker: Tracker
    now: float
    events: tuple[Event, ...]
    sample: ActivitySample | None
    container: str
    lines: int = 0  # output lines (and `\r` progress segments) seen so far
    last_line: str | None = None  # the newest of them: what the server is doing right now

    @property
    def elapsed(self) -> float:
        return self.now - self.tracker.started_at

    @property
    def quiet_for(self) -> float:
        return max(0.0, self.now - self.tracker.last_activity_at)

    @property
    def in_stage(self) -> float:
        """How long the current stage has lasted (launch counts from the server's start)."""
        tracker = self.tracker
        since = tracker.started_at if tracker.phase is None else tracker.phase_since
        return max(0.0, self.now - since)

    @property
    def stall_window(self) -> float | None:
        """The current stage's stall window; None once serving (no start-up limit applies)."""
        stage = self.tracker.stage
        return None if stage == "serving" else self.tracker.limits.stall_window_s.of(stage)


class Watcher:
    def __init__(
        self,
        source: Source,
        limits: PhaseLimits,
        *,
        sample_every_s: float = 2.0,
        keep_lines: int = 5000,
    ):
        self.source = source
        self.parser = LogParser()
        self.tracker = Tracker.start(limits, source.started_at)
        self.lines: deque[str] = deque(maxlen=keep_lines)
        self.line_count = 0
        self.sample_every_s = sample_every_s
        self.final_state: SourceState | None = None
        self._next_sample = source.clock()
        self._last_sample: ActivitySample | None = None
        # What happened before the watch began is known only from the log: activity cannot be
        # judged before the first sample, so quiet time counts from the watch's start at the earliest.
        self._ingest(source.read())
        self.tracker = self.tracker.observe_line(source.clock())

    def _ingest(self, timed_lines: list[tuple[float, str]]) -> list[Event]:
        events: list[Event] = []
        for t, line in timed_lines:
            self.lines.append(line)
            self.line_count += 1
            found = self.parser.feed(line)
            self.tracker = self.tracker.observe_line(t, line).observe_events(found, t)
            events.extend(found)
        return events

    def step(self) -> tuple[Progress, Verdict | None]:
        """Read what arrived, sample if due, and return the progress and a verdict if there is one."""
        source = self.source
        events = self._ingest(source.read())
        now = source.clock()
        sample = None
        ended = False
        if now >= self._next_sample:
            self._next_sample = now + self.sample_every_s
            state = source.state()  # EnvironmentProblem if the engine is gone
            if state.running:
                sample = source.sample(now)
            if sample is not None:
                self.tracker = self.tracker.observe_sample(sample)
                self._last_sample = sample
            if not state.running:
                ended = True
                self.final_state = state
                events.extend(self._ingest(source.drain(timeout_s=5)))
                tail = self.parser.flush()
                self.tracker = self.tracker.observe_events(tail, now)
                events.extend(tail)
        verdict = self.tracker.verdict(now, ended=ended)
        if ended and not isinstance(verdict, Crashed) and verdict is not None and verdict.kind != "ready":
            verdict = self._exited(verdict)
        progress = Progress(
            self.tracker,
            now,
            tuple(events),
            sample or self._last_sample,
            source.name,
            self.line_count,
            self.lines[-1] if self.lines else None,
        )
        return progress, verdict

    def _exited(self, verdict: Verdict) -> Crashed:
        """The server stopped without a fatal line the parser knows: a crash named by its exit code."""
        state = self.final_state
        if state is not None and state.oom_killed:
            why = "killed for memory (OOM)"
        elif state is not None and state.gone:
            why = "was removed"
        else:
            why = f"exited with code {None if state is None else state.exit_code}"
        return Crashed(
            phase=self.tracker.phase,
            evidence=tuple(self.lines)[-8:],
            exception=f"the server container {why}",
            rank=None,
        )

    def run(self, on_progress: Callable[[Progress], None] | None = None, poll_s: float = 0.25) -> Verdict:
        while True:
            progress, verdict = self.step()
            if on_progress:
                on_progress(progress)
            if verdict is not None:
                return verdict
            self.source.sleep(poll_s)
