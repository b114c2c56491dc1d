"""After READY: follow the serving server until it hangs or crashes (or until Ctrl-C / SIGTERM).

The start-up Watcher hands over at READY and keeps reading the source (log lines, activity samples,
the server's state) one step at a time; this loop adds a probe on a schedule with its own deadline
(kit.runtime.http.probe_health: SGLang's /health_generate) and feeds both into the pure reducer of
kit/logs/serving.py. Each change of verdict is handed to `on_change` (a live line); HUNG and
CRASHED end the loop, and the caller writes the bundle (kit/startup/up.py, kit/startup/host.py).
Nothing here stops, signals or removes the server.

    call, state = watch_serving(watcher, limits, base_url=..., on_change=...)
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from kit.logs import Crashed, Hung, Verdict
from kit.logs.activity import ActivitySample
from kit.logs.events import Phase
from kit.logs.serving import Call, Probe, Serving, ServingLimits, ServingState
from kit.runtime.http import probe_health
from kit.runtime.source import SourceState
from kit.spec import LaunchSpec
from kit.startup.watch import Watcher


@dataclass(frozen=True)
class Change:
    """A new serving verdict, for live renderers: the call, the state it rests on, seconds since READY."""

    call: Call
    state: ServingState
    since_ready_s: float
    container: str


@dataclass(frozen=True)
class ServingStatus:
    """Where the serving watch stands at each step (a live status line; a JSON line per probe)."""

    since_ready_s: float
    verdict: str
    why: str
    probes: int
    failed: int
    latency_s: float | None  # the last answered probe's
    in_flight_s: float | None  # how long the probe now out has waited
    batches: int
    tokens_per_s: float | None
    ranks: tuple[tuple[str, str], ...]  # (rank, process state) from the last sample
    changed_s_ago: float  # since the current verdict began

    def line(self) -> str:
        probe = "-" if self.latency_s is None else f"{self.latency_s:.2f} s"
        if self.in_flight_s is not None and self.in_flight_s >= 1:
            probe += f", one out for {self.in_flight_s:.0f} s"
        tokens = "" if self.tokens_per_s is None else f", {self.tokens_per_s:.1f} tok/s"
        ranks = ", ".join(f"{rank} {state}" for rank, state in self.ranks) or "unknown"
        return (
            f"serving {self.since_ready_s:.0f} s  {self.verdict.upper()}  probe {probe} "
            f"({self.probes} sent, {self.failed} failed)  requests: {self.batches} batches{tokens}  "
            f"ranks {ranks}  last change {self.changed_s_ago:.0f} s ago ({self.why})"
        )

    def as_json(self) -> dict:
        return {
            "type": "serving-status",
            "t": round(self.since_ready_s, 3),
            "verdict": self.verdict,
            "why": self.why,
            "probes": self.probes,
            "probes_failed": self.failed,
            "probe_latency_s": self.latency_s,
            "batches": self.batches,
            "tokens_per_s": self.tokens_per_s,
            "ranks": [{"rank": rank, "state": state} for rank, state in self.ranks],
            "changed_s_ago": round(self.changed_s_ago, 1),
        }


@dataclass(frozen=True)
class ReadyNotice:
    """READY and its first token, said before the serving watch begins (the UpResult so far)."""

    result: object


ServingEvent = Change | ServingStatus | ReadyNotice
OnChange = Callable[[ServingEvent], None]


def status_of(state: ServingState, call: Call, since: float, now: float, ready_at: float) -> ServingStatus:
    """The status at NOW of a watch whose current verdict (CALL) began at SINCE."""
    answered = [p for p in state.probes if p.ok]
    return ServingStatus(
        since_ready_s=now - ready_at,
        verdict=call.verdict.value,
        why=call.why,
        probes=len(state.probes),
        failed=sum(not p.ok for p in state.probes),
        latency_s=round(answered[-1].latency_s, 3) if answered else None,
        in_flight_s=None if state.in_flight_since is None else now - state.in_flight_since,
        batches=state.batches,
        tokens_per_s=state.tokens_per_s,
        ranks=tuple((rank, process) for rank, _pid, process in state.ranks),
        changed_s_ago=max(0.0, now - since),
    )


class Prober:
    """One probe at a time in a daemon thread (a hung server must not hang the watch): `send`,
    then `answered()` until it returns the Probe."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float,
        api_key: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ):
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.api_key = api_key
        self.transport = transport
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._answer: Probe | None = None

    @property
    def busy(self) -> bool:
        return self._thread is not None

    def send(self, sent_at: float) -> None:
        def run() -> None:
            status, error = probe_health(
                self.base_url, timeout_s=self.timeout_s, api_key=self.api_key, transport=self.transport
            )
            with self._lock:
                self._answer = Probe(sent_at, sent_at + (time.monotonic() - started), status, error)

        started = time.monotonic()
        self._thread = threading.Thread(target=run, name="kit-probe", daemon=True)
        self._thread.start()

    def answered(self) -> Probe | None:
        with self._lock:
            answer, self._answer = self._answer, None
        if answer is not None:
            self._thread = None
        return answer


def describe_end(state: SourceState | None) -> str:
    """How the server stopped, in words: the exit code and, for a signal, its name."""
    if state is None:
        return "the server stopped"
    if state.oom_killed:
        return "the server was killed for memory (OOM)"
    if state.gone:
        return "the server was removed"
    code = state.exit_code
    if code is None:
        return "the server stopped (only its parent knows its exit code)"
    if code > 128:
        try:
            return f"the server exited with code {code} ({signal.Signals(code - 128).name})"
        except ValueError:
            pass
    return f"the server exited with code {code}"


def watch_serving(
    watcher: Watcher,
    limits: ServingLimits,
    *,
    base_url: str | None,
    api_key: str | None = None,
    transport: httpx.BaseTransport | None = None,
    on_change: OnChange | None = None,
    poll_s: float = 0.5,
    for_s: float | None = None,
    on_sample: Callable[[ActivitySample], None] | None = None,
) -> tuple[Call, ServingState, bool]:
    """Follow a READY server until HUNG or CRASHED, or until Ctrl-C / SIGTERM (a KeyboardInterrupt),
    or for `for_s` seconds (the smoke suite's serving window): the last call, the state it rests
    on, and whether the watch was interrupted."""
    run = _Run(watcher, limits, base_url, api_key, transport, on_change)
    run.on_sample = on_sample
    try:
        return run.follow(poll_s, for_s)
    except KeyboardInterrupt:
        return run.current, run.state, True


class _Run:
    """The loop's state, kept where an interrupt can still read it."""

    def __init__(self, watcher, limits, base_url, api_key, transport, on_change):
        self.watcher = watcher
        self.limits = limits
        self.on_change = on_change
        self.ready_at = watcher.source.clock()
        self.state = ServingState.start(limits, self.ready_at)
        self.current = Call(Serving.SERVING, "ready", self.ready_at)
        self.prober = (
            Prober(base_url, timeout_s=limits.probe_timeout_s, api_key=api_key, transport=transport)
            if base_url
            else None
        )
        self.seen_lines = watcher.line_count
        self.last_sample = None
        self.next_probe = self.ready_at
        self.on_sample: Callable[[ActivitySample], None] | None = None

    def follow(self, poll_s: float, for_s: float | None = None) -> tuple[Call, ServingState, bool]:
        first = True
        since = self.ready_at
        while True:
            call = self.step()
            if first or call.verdict is not self.current.verdict:
                first = False
                since = call.at
                if self.on_change is not None:
                    self.on_change(
                        Change(call, self.state, call.at - self.ready_at, self.watcher.source.name)
                    )
            if self.on_change is not None:
                self.on_change(status_of(self.state, call, since, call.at, self.ready_at))
            self.current = call
            if call.verdict in (Serving.HUNG, Serving.CRASHED):
                return call, self.state, False
            if for_s is not None and call.at - self.ready_at >= for_s:
                return call, self.state, False
            self.watcher.source.sleep(poll_s)

    def step(self) -> Call:
        watcher, state = self.watcher, self.state
        progress, _ = watcher.step()
        now = progress.now
        new = watcher.line_count - self.seen_lines
        self.seen_lines = watcher.line_count
        for line in list(watcher.lines)[-new:] if new > 0 else []:
            state = state.observe_line(now, line)
        for event in progress.events:
            state = state.observe_event(event, now)
        if progress.sample is not None and progress.sample is not self.last_sample:
            self.last_sample = progress.sample
            state = state.observe_sample(progress.sample)
            if self.on_sample is not None:
                self.on_sample(progress.sample)
        if watcher.final_state is not None and state.ended is None:
            state = state.observe_end(now, describe_end(watcher.final_state))
        prober = self.prober
        if prober is not None:
            answer = prober.answered()
            if answer is not None:
                state = state.probe_answered(answer)
            if not prober.busy and now >= self.next_probe and state.ended is None:
                prober.send(now)
                state = state.probe_sent(now)
                self.next_probe = now + self.limits.probe_every_s
        self.state = state
        return state.verdict(now)


def watch_container(
    container, spec: LaunchSpec, limits: ServingLimits, *, for_s: float | None = None
) -> tuple[Call, ServingState, bool]:
    """watch_serving over a READY container the caller holds (the smoke suite's serving window)."""
    from kit.launch import api_key_from_env
    from kit.logs.limits import limits_from_spec
    from kit.runtime.docker_source import DockerSource

    source = DockerSource(container, port=spec.port)
    try:
        watcher = Watcher(source, limits_from_spec(spec))
        return watch_serving(
            watcher, limits, base_url=source.base_url, api_key=api_key_from_env(spec), for_s=for_s
        )
    finally:
        source.close()


def as_verdict(call: Call, state: ServingState, watcher: Watcher, now: float) -> Verdict:
    """The start-up verdict type a serving HUNG / CRASHED is reported as (rows, causes, bundle)."""
    tracker = watcher.tracker
    if call.verdict is Serving.HUNG:
        return Hung(
            phase=Phase.SERVING,
            stuck_ranks=call.ranks,
            missing_ranks=(),
            evidence=tracker.evidence(),
            quiet_for_s=max(0.0, now - state.last_progress_at),
            # The server's own answers decided it (probes unanswered past their budget, no batch
            # logged), not a quiet stretch the stacks must confirm.
            conclusive=f"the serving watch's probes: {call.why}",
        )
    return Crashed(
        phase=Phase.SERVING,
        evidence=tuple(tracker.tail)[-8:],
        exception=call.why,
        rank=call.ranks[0] if call.ranks else None,
    )


__all__ = [
    "Change",
    "Prober",
    "ReadyNotice",
    "ServingEvent",
    "ServingStatus",
    "as_verdict",
    "describe_end",
    "status_of",
    "watch_container",
    "watch_serving",
]
