"""After READY: is the server still serving? A reducer of what the serving watcher sees. Pure.

Inputs, each with its time (monotonic seconds; nothing here reads a clock):
- probes: a small generation request on a schedule with its own deadline (SGLang's
  `/health_generate` sends one token through the scheduler and waits up to
  SGLANG_HEALTH_CHECK_TIMEOUT, srt/entrypoints/http_server.py at 0.5.23): started, then answered;
- log lines: the request log's decode batches (tokens made, throughput) are progress, its prefill
  batches only activity (printed before the forward pass that may hang); watchdog and
  failed-health lines are errors (kit/logs/serving.toml); parsed error events (patterns.toml) are
  errors, a fatal one the start of a crash;
- activity samples: each rank's process and state, CPU per rank, GPU memory (kit/logs/activity.py);
- the end: the server (container, process, unit) stopped, and how.

Verdicts (docs/serving.md):
  SERVING   the probes answer within budget and no errors are rising;
  DEGRADED  still answering, but a probe was slower than its budget, or failed while requests were
            still served, or errors were logged in the last `error_window_s`: never a reason to
            remove anything, and it goes back to SERVING when that passes;
  HUNG      a probe got no answer within its deadline and nothing progressed since it was sent
            (no batch line, no other probe answered): no rank serves;
  CRASHED   the server stopped, a rank's process exited, or a fatal line was followed by no
            progress for `crash_grace_s`.
A GPU fault the samples report (a fatal Xid from NVML's events or the kernel log, a GPU fallen off
the bus: the sample's gpu_error) is evidence, never a verdict alone: it makes a serving server
DEGRADED and is named in a HUNG or CRASHED verdict (the GSP watchdog hangs of RTX PRO 6000 hosts,
Xid 8 / 119: https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1159).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cache
from pathlib import Path

from kit.logs.activity import ActivitySample
from kit.logs.events import Event

KEEP = 32  # probes and errors kept: the last few minutes


class Serving(StrEnum):
    SERVING = "serving"
    DEGRADED = "degraded"
    HUNG = "hung"
    CRASHED = "crashed"


@dataclass(frozen=True)
class ServingLimits:
    """The probe's schedule, deadline and budget, and how long errors count."""

    probe_every_s: float = 10.0
    # SGLang's /health_generate gives up after SGLANG_HEALTH_CHECK_TIMEOUT (20 s by default) with a
    # 503; the kit waits a little longer so the server's own answer is the one seen.
    probe_timeout_s: float = 25.0
    # /health_generate polls once a second (asyncio.sleep(1)), so a healthy answer takes ~1 s.
    probe_budget_s: float = 5.0
    error_window_s: float = 60.0
    crash_grace_s: float = 10.0
    settle_s: float = 6.0  # a rank gone: how long to wait for the server's own end and lines

    def __post_init__(self) -> None:
        for name in ("probe_every_s", "probe_timeout_s", "probe_budget_s", "error_window_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be above 0")
        if self.probe_budget_s >= self.probe_timeout_s:
            raise ValueError("probe_budget_s must be below probe_timeout_s")


@dataclass(frozen=True)
class Probe:
    """One probe: sent at `sent_at`, answered at `answered_at` with an HTTP status (0: none)."""

    sent_at: float
    answered_at: float
    status: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def latency_s(self) -> float:
        return max(0.0, self.answered_at - self.sent_at)

    def describe(self) -> str:
        if self.ok:
            return f"probe answered in {self.latency_s:.1f} s"
        what = f"HTTP {self.status}" if self.status else (self.error or "no answer")
        return f"probe failed after {self.latency_s:.1f} s ({what})"


@dataclass(frozen=True)
class Call:
    """A serving verdict and why, at a time; `ranks` names the ranks it is about."""

    verdict: Serving
    why: str
    at: float
    ranks: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServingState:
    """Immutable; start with `ServingState.start(limits, t)` at READY and the observe_* methods."""

    limits: ServingLimits = field(default_factory=ServingLimits)
    started_at: float = 0.0
    in_flight_since: float | None = None
    probes: tuple[Probe, ...] = ()
    last_progress_at: float = 0.0
    batches: int = 0
    tokens_per_s: float | None = None
    errors: tuple[tuple[float, str], ...] = ()
    fatal: tuple[float, str] | None = None
    exit_lines: tuple[str, ...] = ()
    ranks: tuple[tuple[str, int, str], ...] = ()  # the last sample's rank processes
    # Ranks seen, then missing (or a zombie) while the server ran: (rank, pid, since, how it ended).
    gone: tuple[tuple[str, int, float, str], ...] = ()
    rank_cpu: tuple[tuple[str, float], ...] = ()
    samples: tuple[ActivitySample, ...] = ()
    ended: str | None = None
    ended_at: float | None = None
    gpu_fault: tuple[float, str] | None = None  # the first GPU fault a sample reported, and when

    @classmethod
    def start(cls, limits: ServingLimits, t: float) -> ServingState:
        return cls(limits=limits, started_at=t, last_progress_at=t)

    # -- inputs ------------------------------------------------------------------------------

    def probe_sent(self, t: float) -> ServingState:
        return replace(self, in_flight_since=t)

    def probe_answered(self, probe: Probe) -> ServingState:
        progress = max(self.last_progress_at, probe.answered_at) if probe.ok else self.last_progress_at
        return replace(
            self, in_flight_since=None, probes=(*self.probes, probe)[-KEEP:], last_progress_at=progress
        )

    def observe_line(self, t: float, text: str) -> ServingState:
        """A raw log line: the request log is progress; watchdog and failed health lines errors."""
        found = classify_line(text)
        if found is None:
            return self
        kind, values = found
        if kind == "prefill":
            # Printed when the scheduler takes a batch, before its forward pass: the probe's own
            # request shows one while the ranks are stuck in the pass (seen with TP1 stopped on
            # the CPU rehearsal). Activity, not progress.
            return replace(self, batches=self.batches + 1)
        if kind == "decode":
            tokens = values.get("tokens_per_s", self.tokens_per_s)
            return replace(
                self,
                batches=self.batches + 1,
                tokens_per_s=tokens,
                last_progress_at=max(self.last_progress_at, t),
            )
        return self._error(t, text.strip())

    def observe_event(self, event: Event, t: float) -> ServingState:
        """A parsed event: errors count (a fatal one starts a crash); milestones do not matter now."""
        if not event.is_error:
            return self
        what = str(event.fields.get("exception") or event.text.strip())
        line = f"{event.rank_label}: {what}"[:300]
        state = self._error(t, line)
        if event.fatal:
            state = replace(
                state,
                fatal=state.fatal or (t, line),
                exit_lines=(*state.exit_lines, line)[-4:]
                if "exit_code" in event.fields
                else state.exit_lines,
            )
        return state

    def _error(self, t: float, line: str) -> ServingState:
        return replace(self, errors=(*self.errors, (t, line))[-KEEP:])

    def observe_sample(self, sample: ActivitySample) -> ServingState:
        """Rank processes and CPU: a rank seen before and missing now has exited."""
        samples = (*self.samples, sample)[-16:]
        fault = self.gpu_fault or ((sample.t, sample.gpu_error) if sample.gpu_error else None)
        if sample.rank_processes is None:
            return replace(
                self, samples=samples, rank_cpu=sample.rank_cpu_seconds or self.rank_cpu, gpu_fault=fault
            )
        alive = {rank for rank, _, state in sample.rank_processes if not state.startswith("zombie")}
        zombies = {rank: state for rank, _, state in sample.rank_processes if state.startswith("zombie")}
        gone = list(self.gone)
        for rank, pid, _ in self.ranks:
            if rank not in alive and all(rank != g[0] for g in gone):
                # A zombie not yet reaped tells how it ended ("zombie: killed by SIGKILL").
                how = zombies.get(rank, "").partition(": ")[2] or "exited"
                gone.append((rank, pid, sample.t, how))
        return replace(
            self,
            samples=samples,
            ranks=sample.rank_processes or self.ranks,
            gone=tuple(gone),
            rank_cpu=sample.rank_cpu_seconds or self.rank_cpu,
            gpu_fault=fault,
        )

    def observe_end(self, t: float, why: str) -> ServingState:
        return replace(self, ended=why, ended_at=t)

    # -- reading -----------------------------------------------------------------------------

    @property
    def last_probe(self) -> Probe | None:
        return self.probes[-1] if self.probes else None

    def stopped_ranks(self) -> tuple[str, ...]:
        return tuple(f"{rank} (pid {pid})" for rank, pid, state in self.ranks if state == "stopped")

    def verdict(self, now: float) -> Call:
        limits = self.limits
        if self.ended is not None:
            first = ", ".join(f"{rank} {how}" for rank, _, _, how in self.gone)
            ended = f"{self.ended}; ranks gone first: {first}" if first else self.ended
            return Call(Serving.CRASHED, self._crash_why(ended), now, tuple(g[0] for g in self.gone))
        if self.gone:
            names = ", ".join(f"{rank} (pid {pid}) {how}" for rank, pid, _, how in self.gone)
            ranks = tuple(g[0] for g in self.gone)
            # `now < gone + settle`, not `now - gone < settle`: the difference of two clock readings
            # rounds, and a verdict asked for at exactly gone + settle must be the settled one.
            if now < self.gone[0][2] + limits.settle_s:
                # The server usually follows its rank within a second or two (SGLang kills the
                # tree): wait that long for its exit and its own lines, which name it better.
                return Call(Serving.DEGRADED, f"rank {names}; waiting for the server's account", now, ranks)
            return Call(Serving.CRASHED, self._crash_why(f"rank {names}"), now, ranks)
        fatal = self.fatal
        if fatal is not None and self.last_progress_at <= fatal[0] and now - fatal[0] >= limits.crash_grace_s:
            return Call(Serving.CRASHED, f"{fatal[1]}; nothing served since", now)
        probe = self.last_probe
        timed_out = self.in_flight_since is not None and now - self.in_flight_since >= limits.probe_timeout_s
        # The last answered probe failed: the next one, already sent, does not undo that until it
        # answers (the watch sends it at once).
        failed_probe = timed_out or (probe is not None and not probe.ok)
        if failed_probe:
            if probe is not None and not probe.ok:
                sent = probe.sent_at
                timed_out = False
                refused = self._refused_since()
                if refused is not None:
                    # Nothing listening (connection refused or dropped) is no hang by itself: the
                    # server is going or gone, and its end decides; only after a whole deadline of
                    # it is the server taken as not answering.
                    if now - refused < limits.probe_timeout_s:
                        return Call(Serving.DEGRADED, f"{probe.describe()}: not answering", now)
                    sent = refused
            else:
                sent = self.in_flight_since
            assert sent is not None
            what = (
                f"probe sent {now - sent:.0f} s ago got no answer (deadline {limits.probe_timeout_s:.0f} s)"
                if timed_out
                else probe.describe()  # type: ignore[union-attr]
            )
            if self.last_progress_at <= sent:
                stopped = self.stopped_ranks()
                detail = f"; stopped: {', '.join(stopped)}" if stopped else ""
                detail += f"; {self._gpu_said()}" if self.gpu_fault else ""
                return Call(
                    Serving.HUNG,
                    f"{what}; nothing served since{detail}",
                    now,
                    tuple(s.split()[0] for s in stopped),
                )
            return Call(Serving.DEGRADED, f"{what}, but requests are still served", now)
        if probe is not None and probe.ok and probe.latency_s > limits.probe_budget_s:
            return Call(
                Serving.DEGRADED, f"{probe.describe()}, over its budget of {limits.probe_budget_s:g} s", now
            )
        if self.gpu_fault is not None:
            return Call(Serving.DEGRADED, f"{self._gpu_said()}; the probes still answer", now)
        recent = [line for t, line in self.errors if now - t < limits.error_window_s]
        if recent:
            return Call(
                Serving.DEGRADED,
                f"{len(recent)} error(s) in the last {limits.error_window_s:.0f} s, last: {recent[-1][:160]}",
                now,
            )
        return Call(Serving.SERVING, probe.describe() if probe is not None else "ready", now)

    def _refused_since(self) -> float | None:
        """When the probes began failing without a word from the server (no HTTP status, no
        timeout: refused or dropped connections), if the latest ones all did."""
        since = None
        for probe in reversed(self.probes):
            if probe.ok or probe.status or (probe.error or "").startswith("no answer"):
                break
            since = probe.sent_at
        return since

    def _crash_why(self, what: str) -> str:
        said = self.exit_lines[-1] if self.exit_lines else (self.fatal[1] if self.fatal else None)
        why = f"{what}; the log: {said}" if said else what
        return f"{why}; {self._gpu_said()}" if self.gpu_fault else why

    def _gpu_said(self) -> str:
        assert self.gpu_fault is not None
        text = self.gpu_fault[1]
        return text if text.startswith("gpu error") else f"gpu error: {text}"

    def summary(self, now: float, *, since: float | None = None) -> dict:
        """The serving counters for the result and the bundle; `probe_points` are [seconds since
        `since` (default: READY), latency, answered] for the picture."""
        latencies = [round(p.latency_s, 3) for p in self.probes if p.ok]
        zero = self.started_at if since is None else since
        return {
            "probe_points": [[round(p.sent_at - zero, 2), round(p.latency_s, 3), p.ok] for p in self.probes],
            "served_s": round(now - self.started_at, 1),
            "probes": len(self.probes),
            "probes_failed": sum(not p.ok for p in self.probes),
            "probe_latency_s": latencies[-10:],
            "batches": self.batches,
            "tokens_per_s": self.tokens_per_s,
            "errors": [line for _, line in self.errors[-5:]],
            "ranks": [{"rank": r, "pid": pid, "state": s} for r, pid, s in self.ranks],
            "gone": [{"rank": r, "pid": pid, "how": how} for r, pid, _, how in self.gone],
            "gpu_fault": self.gpu_fault[1] if self.gpu_fault else None,
        }


# -- the serving lines -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _LinePattern:
    kind: str
    scan: str
    regex: re.Pattern[str]


@cache
def _patterns() -> tuple[_LinePattern, ...]:
    data = tomllib.loads((Path(__file__).with_name("serving.toml")).read_text(encoding="utf-8"))
    return tuple(_LinePattern(p["kind"], p["scan"], re.compile(p["regex"])) for p in data["line"])


def classify_line(text: str) -> tuple[str, dict[str, float]] | None:
    """(kind, numbers read off the line) for a serving line of kit/logs/serving.toml, else None."""
    for pattern in _patterns():
        if pattern.scan in text:
            match = pattern.regex.search(text)
            values: dict[str, float] = {}
            if match:
                for key, value in match.groupdict().items():
                    try:
                        values[key] = float(value)
                    except (TypeError, ValueError):
                        continue
            return pattern.kind, values
    return None
