"""The watch's proxy verdict over the real 0.5.23 rehearsal log, replayed through a small source.

The log is the rehearsal's own start-up (tests/fixtures/kit-logs): uvicorn logs SGLang's warm-up
request `GET /model_info` one second after `Uvicorn running`. Replayed up to HTTP up and then
silent, with a proxy for loopback in the server's environment, the watch is HUNG in warm-up
20 s later with the proxy cause first; with the warm-up request arriving, or with NO_PROXY set,
it waits as before.
"""

from __future__ import annotations

from pathlib import Path

from kit.logs import PhaseLimits
from kit.runtime.source import Source, SourceState
from kit.startup.result import causes_for
from kit.startup.watch import PROXY_WARMUP_CONCLUSIVE_S, Watcher

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "kit-logs" / "sglang-0.5.23-cpu-tiny-tp2-ready.log"
LINES = LOG.read_text(encoding="utf-8").splitlines()
HTTP_UP = next(i for i, line in enumerate(LINES) if "Uvicorn running" in line) + 1
PROXY = {"HTTP_PROXY": "http://10.0.0.9:3128", "http_proxy": "http://10.0.0.9:3128"}


class ReplayedLog:
    """The log's lines all at t=0..1, then nothing; the clock is the test's."""

    name = "replayed"
    started_at = 0.0
    base_url = None

    def __init__(self, lines: list[str], env: dict[str, str]):
        self.pending = [(0.0, line) for line in lines]
        self.env = env
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def read(self):
        taken, self.pending = self.pending, []
        return taken

    def sample(self, t):
        return None

    def state(self) -> SourceState:
        return SourceState(running=True)

    def drain(self, timeout_s):
        return []

    def stacks(self, want=lambda title: True, *, nonblocking=False):
        return []

    def log_text(self) -> str:
        return "\n".join(LINES)

    def http_transport(self):
        return None

    def environment(self):
        return self.env


def _run(lines: list[str], env: dict[str, str], seconds: float):
    source = ReplayedLog(lines, env)
    assert isinstance(source, Source)
    watcher = Watcher(source, PhaseLimits())
    while source.now < seconds:
        _, verdict = watcher.step()
        if verdict is not None:
            return watcher, verdict, source.now
        source.sleep(1.0)
    return watcher, None, source.now


def test_a_proxy_and_no_warmup_request_is_hung_in_warmup_with_the_proxy_cause_first():
    watcher, verdict, at = _run(LINES[:HTTP_UP], PROXY, 119.0)
    assert verdict is not None and verdict.kind.value == "hung" and verdict.phase.value == "warmup"
    assert PROXY_WARMUP_CONCLUSIVE_S <= at < 30
    assert any("NO_PROXY does not cover 127.0.0.1" in line for line in verdict.evidence)
    causes = causes_for(verdict, watcher.tracker, {}, "cpu", None, watcher.environment_evidence())
    assert causes[0].id == "warmup-proxy"


def test_the_warmup_request_arriving_means_no_proxy_verdict():
    _, verdict, _ = _run(LINES[: HTTP_UP + 1], PROXY, 60.0)  # `GET /model_info ... 200 OK`
    assert verdict is None  # the warm-up went direct: the tracker's own windows decide, later


def test_no_proxy_for_loopback_means_no_proxy_verdict():
    env = {**PROXY, "NO_PROXY": "127.0.0.1,localhost,0.0.0.0"}
    _, verdict, _ = _run(LINES[:HTTP_UP], env, 60.0)
    assert verdict is None
