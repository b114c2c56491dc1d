"""`--serve` shows that it watches (issue 35): READY and the first token before the serving watch, a
status line at each step (refreshed in place on a terminal, one JSON line per probe with --json, a
plain line every 15 s in logs), and a rank list that is the result's own (the last sample's ranks)."""

from __future__ import annotations

import io
import json

from rich.console import Console

from kit.logs import ActivitySample
from kit.logs.serving import Call, Probe, Serving, ServingLimits, ServingState
from kit.startup.live import LiveView
from kit.startup.result import UpResult
from kit.startup.serving import ReadyNotice, status_of

LIMITS = ServingLimits(probe_every_s=5, probe_timeout_s=15, probe_budget_s=3)
RANKS = (("TP0", 4240, "sleeping"), ("TP1", 4241, "running"))
READY = UpResult(
    "tiny",
    "sglang-0.5.23-cpu",
    "kit-tiny-1",
    "ready",
    0,
    startup_s=41.2,
    first_token_s=0.25,
    sglang_startup_time={"load_weight": 0.1, "scheduler_e2e": 2.0},
)


def _state() -> ServingState:
    state = ServingState.start(LIMITS, 100.0).observe_sample(ActivitySample(t=101.0, rank_processes=RANKS))
    state = state.probe_sent(101.0).probe_answered(Probe(101.0, 101.21, 200))
    return state.observe_line(
        102.0, "[2026-12-05 01:00:00 TP0] Decode batch, #running-req: 1, gen throughput (token/s): 12.30"
    )


def test_the_status_names_probe_latency_requests_ranks_and_the_last_change():
    state = _state()
    call = state.verdict(104.0)
    status = status_of(state, call, since=100.0, now=104.0, ready_at=100.0)
    assert status.ranks == (("TP0", "sleeping"), ("TP1", "running"))
    assert [r["rank"] for r in state.summary(104.0)["ranks"]] == [
        rank for rank, _ in status.ranks
    ]  # the result's
    line = status.line()
    assert line.startswith("serving 4 s  SERVING  probe 0.21 s (1 sent, 0 failed)")
    assert "ranks TP0 sleeping, TP1 running" in line and "last change 4 s ago" in line
    sent = state.probe_sent(104.0)
    assert "one out for 3 s" in status_of(sent, call, 100.0, 107.0, 100.0).line()


def test_json_gives_ready_then_one_status_line_per_probe(capsys):
    view = LiveView(Console(file=io.StringIO()), title="t", as_json=True)
    view.serving(ReadyNotice(READY))
    state = _state()
    call = Call(Serving.SERVING, "probes answer", 100.0)
    for now in (104.0, 104.5, 105.0):  # one probe answered so far: one line
        view.serving(status_of(state, call, 100.0, now, 100.0))
    state = state.probe_sent(106.0).probe_answered(Probe(106.0, 106.3, 200))
    view.serving(status_of(state, call, 100.0, 107.0, 100.0))
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["type"] for line in lines] == ["ready", "serving-status", "serving-status"]
    assert lines[0] == {
        "type": "ready",
        "verdict": "ready",
        "startup_s": 41.2,
        "first_token_s": 0.25,
        "first_token_endpoint": None,
        "first_token_in": None,
    }
    assert [line["probes"] for line in lines[1:]] == [1, 2] and lines[2]["probe_latency_s"] == 0.3


def test_plain_output_says_ready_and_the_first_token_before_serving():
    out = io.StringIO()
    view = LiveView(Console(file=out, width=200), title="t")
    view.serving(ReadyNotice(READY))
    view.serving(status_of(_state(), Call(Serving.SERVING, "ready", 100.0), 100.0, 104.0, 100.0))
    text = out.getvalue()
    assert "READY tiny after 41.2 s; first token 0.25 s" in text
    assert "SGLang's own (/server_info startup_time): load_weight 0.1 s, scheduler_e2e 2.0 s" in text
    assert "serving 4 s  SERVING  probe 0.21 s" in text


def test_the_new_lines_are_documented(capsys):
    from kit.logs.schema import problems

    view = LiveView(Console(file=io.StringIO()), title="t", as_json=True)
    view.serving(ReadyNotice(READY))
    view.serving(status_of(_state(), Call(Serving.SERVING, "ready", 100.0), 100.0, 104.0, 100.0))
    for line in capsys.readouterr().out.splitlines():
        assert problems(json.loads(line), "up-events") == []
