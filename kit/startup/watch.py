"""Follow one server container: its log through the parser into the tracker, plus activity samples.

This is the imperative shell around the pure tracker: it reads the clock, the log stream and the
engine's stats, and hands plain values to `Tracker`. `kit up`, `kit watch` and the pytest plugin's
wait strategy all drive this same class.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from docker.models.containers import Container

from kit.logs import ActivitySample, Crashed, Event, LogParser, PhaseLimits, Tracker, Verdict
from kit.runtime import server as runtime


@dataclass(frozen=True)
class Progress:
    """One step's view, for live renderers."""

    tracker: Tracker
    now: float
    events: tuple[Event, ...]
    sample: ActivitySample | None
    container: str

    @property
    def elapsed(self) -> float:
        return self.now - self.tracker.started_at

    @property
    def quiet_for(self) -> float:
        return max(0.0, self.now - self.tracker.last_activity_at)

    @property
    def stall_window(self) -> float | None:
        """The current stage's stall window; None once serving (no start-up limit applies)."""
        stage = self.tracker.stage
        return None if stage == "serving" else self.tracker.limits.stall_window_s.of(stage)


class Watcher:
    def __init__(
        self,
        container: Container,
        limits: PhaseLimits,
        *,
        sample_every_s: float = 2.0,
        gpu_memory: Callable[[], int | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        keep_lines: int = 5000,
    ):
        self.container = container
        self.clock = clock
        self.parser = LogParser()
        self.tracker = Tracker.start(limits, clock())
        self.lines: deque[str] = deque(maxlen=keep_lines)
        self.sample_every_s = sample_every_s
        self.gpu_memory = gpu_memory or (lambda: None)
        self.follower = runtime.LogFollower(container)
        self.exit_code: int | None = None
        self.oom_killed = False
        self._next_sample = 0.0
        self._last_sample: ActivitySample | None = None

    def _ingest(self) -> list[Event]:
        events: list[Event] = []
        for t, line in self.follower.drain():
            self.lines.append(line)
            found = self.parser.feed(line)
            self.tracker = self.tracker.observe_line(t, line).observe_events(found, t)
            events.extend(found)
        return events

    def step(self) -> tuple[Progress, Verdict | None]:
        """Read what arrived, sample if due, and return the progress and a verdict if there is one."""
        events = self._ingest()
        now = self.clock()
        sample = None
        ended = False
        if now >= self._next_sample:
            self._next_sample = now + self.sample_every_s
            state = runtime.container_state(self.container)  # EnvironmentProblem if the engine is gone
            running = state.running
            sample = runtime.sample_activity(self.container, now, self.gpu_memory()) if running else None
            if sample is not None:
                self.tracker = self.tracker.observe_sample(sample)
                self._last_sample = sample
            if not state.running:
                ended = True
                self.exit_code, self.oom_killed = state.exit_code, state.oom_killed
                self.follower.done.wait(timeout=5)
                events.extend(self._ingest())
                tail = self.parser.flush()
                self.tracker = self.tracker.observe_events(tail, now)
                events.extend(tail)
        verdict = self.tracker.verdict(now, ended=ended)
        if ended and not isinstance(verdict, Crashed) and verdict is not None and verdict.kind != "ready":
            verdict = self._exited(verdict)
        progress = Progress(
            self.tracker, now, tuple(events), sample or self._last_sample, self.container.name
        )
        return progress, verdict

    def _exited(self, verdict: Verdict) -> Crashed:
        """The container stopped without a fatal line the parser knows: a crash named by its exit code."""
        why = "killed for memory (OOM)" if self.oom_killed else f"exited with code {self.exit_code}"
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
            time.sleep(poll_s)
