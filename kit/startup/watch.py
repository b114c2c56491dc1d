"""Follow one server through a `Source`: its output through the parser into the tracker, plus
activity samples, on the source's clock.

This is the imperative shell around the pure tracker: it reads the source and hands plain values to
`Attempts` (one `Tracker` per launch attempt). `kit up`, `kit watch`, the pytest plugin and replayed
scenarios all drive this class; only the source differs (kit/runtime/source.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kit.logs import (
    ActivitySample,
    Attempts,
    Crashed,
    Deadline,
    Event,
    Hung,
    LogParser,
    Milestone,
    Phase,
    PhaseLimits,
    Tracker,
    Verdict,
)
from kit.logs.activity import CgroupReading
from kit.logs.soft_watchdog import SoftWatchdogReader
from kit.logs.stacks import STACK_EVERY_S, StackSample, classify_stack, rank_of_process
from kit.proxyenv import ProxyGap, loopback_gap
from kit.runtime.source import Source, SourceState
from kit.startup.overrun import (
    DeadlinePolicy,
    LoadProgress,
    Overrun,
    ShardBar,
    load_progress,
    shard_bar,
    still_moving,
)


@dataclass(frozen=True)
class Progress:
    """One step's view, for live renderers."""

    tracker: Tracker  # the current launch attempt's
    now: float
    events: tuple[Event, ...]
    sample: ActivitySample | None
    container: str
    lines: int = 0  # output lines (and `\r` progress segments) seen so far
    last_line: str | None = None  # the newest of them: what the server is doing right now
    attempt: int = 1  # launch attempts seen (a supervisor restarting the server starts another)
    overruns: tuple[Overrun, ...] = ()  # stages that passed their deadline and went on, in order
    read_at_stage_start: int | None = None  # the read counter when the current stage began
    shards: ShardBar | None = None  # SGLang's shard bar, its newest drawing in this attempt
    paused_since: float | None = None  # the engine reports the container paused since then
    stacks: StackSample | None = None  # the stack sample taken in this step, if one was

    @property
    def overrun(self) -> Overrun | None:
        """The current stage's passed deadline, if it passed one."""
        for overrun in reversed(self.overruns):
            if overrun.attempt == self.attempt and overrun.stage == self.tracker.stage:
                return overrun
        return None

    def load(self, total_bytes: int | None) -> LoadProgress | None:
        """Bytes read in the load stage against `total_bytes` (the checkpoint's size), rate, ETA."""
        if self.tracker.stage != "load":
            return None
        return load_progress(self.tracker.samples, self.read_at_stage_start, total_bytes, self.shards)

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


# A restart in place (the engine's restart policy) or a replacement (systemd, Compose) takes a few
# seconds; a server that stays down longer than this is judged as it ended.
RESTART_GRACE_S = 60.0
# SGLang's warm-up asks its own /model_info once a second from HTTP up on (uvicorn logs each
# request it serves: `"GET /model_info HTTP/1.1" 200`). With a proxy for loopback in the server's
# environment and none of those requests arriving this long after HTTP up, the warm-up is going to
# the proxy: SGLang would retry for 120 s and stop (http_server.py `_execute_server_warmup`, 0.5.23).
PROXY_WARMUP_CONCLUSIVE_S = 20.0
_WARMUP_REQUEST = "/model_info"
# Stacks are sampled while a stage is quiet: the first this long before its stall window ends (and
# not before STACK_MIN_QUIET_S of quiet), then every STACK_EVERY_S (a dump per rank at most that
# often), so two samples are in by the end of a window of 14 s or more. A HUNG reached with one
# sample waits for the second at most STACK_HOLD_S: a window of 10 s or more gets both (the first
# dump may come a step after 2 s of quiet), and the verdict stays within the window + 5 s; a shorter
# one (an override) rests on the counters and the kit keeps the server. Stacks are read on the
# watch's own step, not the counters' cadence: a second sample due between two counter samples is
# never missed.
STACK_LEAD_S = 12.0
STACK_MIN_QUIET_S = 2.0
STACK_HOLD_S = 4.0
# SGLang's own word that a child died (sglang 0.5.23 srt/utils/watchdog.py, srt/entrypoints/engine.py),
# and that it is ending its process tree for it (its SIGQUIT handlers: engine.py, tokenizer_manager.py).
_CHILD_EXIT = (
    "crashed with exit code",
    "scheduler died during initialization",
    "Received sigquit from a child process",
    "SIGQUIT received.",
)


def _wants_rank(title: str) -> bool:
    return rank_of_process(title) is not None


class Watcher:
    """`max_attempts`: how many launch attempts a supervisor may make before the watch judges the
    last one anyway (a crash loop is reported as such, not followed for ever).

    `deadline_policy`: REPORT (kit up, kit watch) notes a stage that runs past its deadline while it
    still moves (`overruns`, said live) and goes on to READY, HUNG or CRASHED; VERDICT (the smoke
    tests, where the deadline is the assertion) ends the watch with DEADLINE (kit/startup/overrun.py).
    """

    def __init__(
        self,
        source: Source,
        limits: PhaseLimits,
        *,
        sample_every_s: float = 2.0,
        keep_lines: int = 5000,
        max_attempts: int = 3,
        restart_grace_s: float = RESTART_GRACE_S,
        deadline_policy: DeadlinePolicy = DeadlinePolicy.REPORT,
    ):
        self.source = source
        self.deadline_policy = deadline_policy
        self.overruns: list[Overrun] = []
        self._stage_key: tuple[int, str] | None = None  # (attempt, stage) the read baseline is for
        self._read_at_stage_start: int | None = None
        # SGLang's shard bar as last drawn (the load's progress), with the attempt that drew it.
        self._shards: tuple[int, ShardBar] | None = None
        self.parser = LogParser()
        self.attempts = Attempts.start(limits, source.started_at)
        self.max_attempts = max_attempts
        self.restart_grace_s = restart_grace_s
        self._restart_policy: str | None = None
        self._down_since: float | None = None
        self._crash_held_since: float | None = None
        # Restarts seen so far, and the attempt whose run a restart ended: the processes that
        # printed its lines are gone, even if the next run's processes are already busy.
        self._restarts_seen: int | None = None
        self._attempt_at_state = 1  # the attempt current when the state was last read
        self._run_ended_for: int | None = None
        self.lines: deque[str] = deque(maxlen=keep_lines)
        self.line_count = 0
        self.sample_every_s = sample_every_s
        self.final_state: SourceState | None = None
        self._next_sample = source.clock()
        self.last_sample: ActivitySample | None = None
        # The server's own proxies decide where its warm-up goes (kit/proxyenv.py).
        self.proxy_gap: ProxyGap | None = loopback_gap(source.environment() or {})
        self._http_up_at: float | None = None
        self._warmup_request_seen = False
        # SGLang's soft watchdog (every render arms it): its dumps are evidence, never progress.
        self.soft_watchdog = SoftWatchdogReader()
        # Evidence for the verdict (kit/logs/evidence.py): the engine's state, the cgroup's first
        # and last readings, which pid was which rank, SGLang's child-exit lines, the stacks.
        self.last_state: SourceState | None = None
        self.paused_since: float | None = None
        self.cgroup_first: CgroupReading | None = None
        self.cgroup_last: CgroupReading | None = None
        self.pid_ranks: dict[int, str] = {}
        self.child_exits: list[tuple[float, str]] = []
        self.stacks_at: float | None = None
        # What happened before the watch began is known only from the log: activity cannot be
        # judged before the first sample, so quiet time counts from the watch's start at the earliest.
        self._ingest(source.read())
        self.attempts = self.attempts.observe_line(source.clock())

    @property
    def tracker(self) -> Tracker:
        """The current launch attempt's tracker: what every verdict and row is about."""
        return self.attempts.current

    def _may_restart(self) -> bool:
        """Would a supervisor start the server again after a crash, and may the watch wait for it?"""
        return (
            self._restart_policy in ("on-failure", "always", "unless-stopped")
            and self.attempts.number < self.max_attempts
        )

    def _ingest(self, timed_lines: list[tuple[float, str]]) -> list[Event]:
        events: list[Event] = []
        for t, line in timed_lines:
            self.lines.append(line)
            self.line_count += 1
            bar = shard_bar(line)
            if bar is not None:
                self._shards = (self.attempts.number, bar)
            found = self.parser.feed(line)
            if self.soft_watchdog.feed(line):
                continue  # kept in `lines` and by the reader; a stalled start must not look alive
            self.attempts = self.attempts.observe_line(t, line).observe_events(found, t)
            events.extend(found)
            if _WARMUP_REQUEST in line:
                self._warmup_request_seen = True
            if any(words in line for words in _CHILD_EXIT):
                self.child_exits.append((t, line))
            for event in found:
                if event.milestone is Milestone.HTTP_UP:
                    self._http_up_at, self._warmup_request_seen = t, False
        return events

    def environment_evidence(self) -> tuple[str, ...]:
        """What the server's environment says about where its own requests go (for the causes)."""
        return (self.proxy_gap.describe(),) if self.proxy_gap is not None else ()

    def _proxy_verdict(self, now: float) -> Hung | None:
        """HUNG in warm-up as soon as it is certain: a proxy for loopback in the server's environment
        and no warm-up request reaching the server well after HTTP up (not at the warm-up deadline)."""
        up = self._http_up_at
        if (
            self.proxy_gap is None
            or up is None
            or self._warmup_request_seen
            or self.tracker.phase is not Phase.WARMUP
            or now - up < PROXY_WARMUP_CONCLUSIVE_S
        ):
            return None
        return Hung(
            phase=Phase.WARMUP,
            stuck_ranks=(),
            missing_ranks=(),
            evidence=(
                *self.environment_evidence(),
                f"no warm-up request ({_WARMUP_REQUEST}) reached the server in {now - up:.0f} s after "
                "its HTTP server came up",
                *tuple(self.lines)[-4:],
            ),
            quiet_for_s=max(0.0, now - self.tracker.last_activity_at),
            conclusive=(
                "a proxy for loopback in its environment and no warm-up request in its log "
                f"{now - up:.0f} s after HTTP up"
            ),
        )

    def step(self) -> tuple[Progress, Verdict | None]:
        """Read what arrived, sample if due, and return the progress and a verdict if there is one."""
        source = self.source
        events = self._ingest(source.read())
        now = source.clock()
        sample = None
        stacks = None
        dead: tuple[str, ...] = ()
        ended = False
        if now >= self._next_sample:
            self._next_sample = now + self.sample_every_s
            state = source.state()  # EnvironmentProblem if the engine is gone
            self._restart_policy = state.restart_policy
            if self._restarts_seen is not None and state.restarts > self._restarts_seen:
                # The run that was going at the last look ended; a new launch line already read
                # belongs to the new run and opened its own attempt.
                self._run_ended_for = self._attempt_at_state
            self._restarts_seen = state.restarts
            self._attempt_at_state = self.attempts.number
            self.last_state = state
            self.paused_since = (self.paused_since or now) if state.paused else None
            if state.running:
                self._down_since = None
                sample = source.sample(now)
            if sample is not None:
                self.attempts = self.attempts.observe_sample(sample)
                dead = self._ranks_gone(sample)
                self.last_sample = sample
                self._keep_evidence(sample)
            if not state.running and not self._waiting_for_restart(state, now):
                ended = True
                self.final_state = state
                events.extend(self._ingest(source.drain(timeout_s=5)))
                tail = self.parser.flush()
                self.attempts = self.attempts.observe_events(tail, now)
                events.extend(tail)
        if not ended and self.last_state is not None and self.last_state.running:
            # The clock read now: reading the counters took time, and the dumps' spacing is measured.
            stacks = self._sample_stacks(source.clock(), self.last_state)
        # A restart ended the current attempt's run although the container runs again: judge that
        # attempt as ended (its next run's activity is not its life), until the next launch line.
        run_ended = ended or self._run_ended_for == self.attempts.number
        verdict = self.attempts.verdict(now, ended=run_ended)
        self._mark_stage()
        if isinstance(verdict, Deadline) and self.deadline_policy is DeadlinePolicy.REPORT:
            # The tracker says DEADLINE only while the stage still moves (HUNG comes first): news,
            # never a reason to stop or remove what is loading.
            self._note_overrun(verdict, now)
            verdict = None
        # A rank gone between two samples is a crash like a fatal line: under a restart policy it is
        # held for the next attempt as well (judged at once, it raced the supervisor's restart).
        if dead and not ended and (verdict is None or isinstance(verdict, Hung)):
            verdict = self._rank_died(dead, now)
        if isinstance(verdict, Crashed) and not ended and self._may_restart():
            # Its supervisor may start it again: the next attempt decides, not this one's crash
            # (the watch ends once the server stays down, or at the last allowed attempt). A server
            # that reports a fatal error but never exits is judged after the grace all the same.
            if self._crash_held_since is None:
                self._crash_held_since = now
            if now - self._crash_held_since < self.restart_grace_s:
                verdict = None
        elif not isinstance(verdict, Crashed):
            self._crash_held_since = None
        if ended and not isinstance(verdict, Crashed) and verdict is not None and verdict.kind != "ready":
            verdict = self._exited(verdict)
        paused = self.paused_since is not None  # frozen stacks cannot confirm anything more
        if isinstance(verdict, Hung) and not ended and not paused and self._second_stack_due(now):
            verdict = None  # the stacks' second look is a few seconds away: it decides what HUNG rests on
        if verdict is None and not ended:
            verdict = self._proxy_verdict(now)
        progress = Progress(
            self.tracker,
            now,
            tuple(events),
            sample or self.last_sample,
            source.name,
            self.line_count,
            self.lines[-1] if self.lines else None,
            self.attempts.number,
            tuple(self.overruns),
            self._read_at_stage_start,
            self._load_shards(),
            self.paused_since,
            stacks,
        )
        return progress, verdict

    def _load_shards(self) -> ShardBar | None:
        """The shard bar of this attempt's load, while it loads."""
        if self._shards is None or self.tracker.stage != "load" or self._shards[0] != self.attempts.number:
            return None
        return self._shards[1]

    def _ranks_gone(self, sample: ActivitySample) -> tuple[str, ...]:
        """Scheduler ranks alive in the previous sample that have exited since (gone, or a zombie)."""
        before, after = self.last_sample, sample.rank_processes
        if before is None or before.rank_processes is None or after is None:
            return ()
        alive = {rank for rank, _pid, state in before.rank_processes if not state.startswith("zombie")}
        now = {rank: state for rank, _pid, state in after}
        return tuple(sorted(r for r in alive if r not in now or now[r].startswith("zombie")))

    def _rank_died(self, dead: tuple[str, ...], now: float) -> Crashed:
        """A scheduler process exited during start-up: the server cannot go on without it (SGLang's
        own watchdog then ends the rest: srt/utils/watchdog.py, 0.5.23), so the crash is final now,
        not after its peers' errors and the crash grace."""
        judged = self.attempts.verdict(now, ended=True)
        if isinstance(judged, Crashed):
            return judged
        states = {rank: state for rank, _pid, state in (self.last_sample.rank_processes or ())}
        how = "; ".join(f"{rank} {states.get(rank, 'exited').removeprefix('zombie: ')}" for rank in dead)
        return Crashed(
            phase=self.tracker.phase,
            evidence=tuple(self.lines)[-8:],
            exception=f"a scheduler process exited: {how}",
            rank=dead[0],
        )

    def _keep_evidence(self, sample: ActivitySample) -> None:
        if sample.cgroup is not None:
            self.cgroup_first = self.cgroup_first or sample.cgroup
            self.cgroup_last = sample.cgroup
        for rank, pid, _state in sample.rank_processes or ():
            self.pid_ranks[pid] = rank

    def _stack_window(self) -> tuple[float, float] | None:
        """(when the first sample is due, when the window ends), as quiet seconds; None when no
        stall window applies (serving)."""
        stage = self.tracker.stage
        if stage == "serving":
            return None
        window = self.tracker.limits.stall_window_s.of(stage)
        return max(STACK_MIN_QUIET_S, window - STACK_LEAD_S), window

    def _sample_stacks(self, now: float, state: SourceState) -> StackSample | None:
        """Every rank's stack, without suspending them, while the stage is quiet: at most once every
        STACK_EVERY_S (kit/logs/stacks.py); progress read off them moves the tracker's quiet clock."""
        window = self._stack_window()
        quiet = now - self.tracker.last_activity_at
        if window is None or quiet < window[0]:
            return None
        if self.stacks_at is not None and now - self.stacks_at < STACK_EVERY_S:
            return None
        self.stacks_at = now
        sample = self.read_stacks(now, state)
        self.attempts = self.attempts.observe_stacks(sample)
        return sample

    def read_stacks(self, now: float, state: SourceState | None = None) -> StackSample:
        try:
            found = self.source.stacks(_wants_rank, nonblocking=True)
        except Exception as exc:  # an adapter's failure is evidence missing, never the end of a watch
            return StackSample(now, unreadable=f"reading the stacks failed: {exc or type(exc).__name__}")
        ranks = []
        for proc in found:
            rank = rank_of_process(proc.title)
            if rank is not None:
                ranks.append(
                    classify_stack(rank, proc.text, proc.pid, compilers=proc.compilers, held=proc.state)
                )
        if ranks:
            return StackSample(now, tuple(sorted(ranks, key=lambda r: r.rank)))
        paused = (
            " (the container is paused: docker exec is refused)" if state is not None and state.paused else ""
        )
        return StackSample(now, unreadable=f"no scheduler process could be read{paused}")

    def _second_stack_due(self, now: float) -> bool:
        """One readable stack sample in this quiet stretch and the second due within STACK_HOLD_S."""
        quiet = self.tracker.stacks_while_quiet()
        if len(quiet) != 1 or not quiet[0].readable or self.stacks_at is None:
            return False
        window = self._stack_window()
        if window is None:
            return False
        window_end = self.tracker.last_activity_at + window[1]
        due = self.stacks_at + STACK_EVERY_S
        return now < due and due <= window_end + STACK_HOLD_S

    def _mark_stage(self) -> None:
        """Keep the read counter as it stood when the current stage began (the load's bytes read)."""
        key = (self.attempts.number, self.tracker.stage)
        if key != self._stage_key:
            self._stage_key = key
            sample = self.last_sample
            self._read_at_stage_start = None if sample is None else sample.read_bytes

    def _note_overrun(self, deadline: Deadline, now: float) -> None:
        tracker = self.tracker
        stage = tracker.stage
        if any(o.attempt == self.attempts.number and o.stage == stage for o in self.overruns):
            return
        moving = still_moving(
            tracker.samples,
            quiet_for_s=max(0.0, now - tracker.last_activity_at),
            read_at_stage_start=self._read_at_stage_start,
        )
        self.overruns.append(
            Overrun(stage, deadline.limit_s, deadline.elapsed_s, self.attempts.number, moving)
        )

    def _waiting_for_restart(self, state: SourceState, now: float) -> bool:
        """A stopped server its supervisor will start again: wait for the next attempt, up to
        `restart_grace_s` and `max_attempts`."""
        if not (state.restarting and self.attempts.number < self.max_attempts):
            return False
        if self._down_since is None:
            self._down_since = now
        return now - self._down_since < self.restart_grace_s

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
