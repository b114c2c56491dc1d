"""The serving reducer (kit/logs/serving.py): SERVING, DEGRADED, HUNG, CRASHED from probes, SGLang's
own lines, rank processes and the end. Pure: values in, verdicts out."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kit.logs import ActivitySample, parse_text
from kit.logs.serving import Probe, Serving, ServingLimits, ServingState, classify_line

LIMITS = ServingLimits(
    probe_every_s=5, probe_timeout_s=15, probe_budget_s=3, error_window_s=30, crash_grace_s=10
)
# SGLang 0.5.23's own lines (scheduler_components/metrics_reporter.py, utils/watchdog.py)
DECODE = (
    "[2026-12-04 22:00:01 TP0] Decode batch, #running-req: 1, #token: 40, token usage: 0.01, "
    "cpu graph: False, gen throughput (token/s): 12.50, #queue-req: 0"
)
PREFILL = (
    "[2026-12-04 22:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 8, #cached-token: 0, #running-req: 0"
)
RANK_KILLED = (
    "[2026-12-04 22:00:09] Subprocess scheduler_1 (pid=4242) crashed with exit code -9. "
    "Triggering SIGQUIT for cleanup..."
)
RANKS = (("TP0", 100, "sleeping"), ("TP1", 101, "sleeping"))


def ready(t: float = 0.0) -> ServingState:
    state = ServingState.start(LIMITS, t)
    return state.observe_sample(ActivitySample(t=t, rank_processes=RANKS))


def probe(state: ServingState, sent: float, latency: float, status: int = 200) -> ServingState:
    return state.probe_sent(sent).probe_answered(Probe(sent, sent + latency, status))


def test_serving_lines_are_read_off_sglang_wording():
    assert classify_line(DECODE) == ("decode", {"tokens_per_s": 12.5})
    assert classify_line(PREFILL) == ("prefill", {"new_seq": 1.0})
    assert (
        classify_line("Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)")[0]
        == "watchdog"
    )
    assert classify_line("[2026-12-04] Load weight end.") is None


def test_ready_then_fast_probes_is_serving():
    state = probe(ready(), 0, 1.0)
    state = state.observe_line(2.0, PREFILL).observe_line(2.5, DECODE)
    call = state.verdict(3.0)
    assert call.verdict is Serving.SERVING
    assert "1.0 s" in call.why
    assert state.summary(3.0)["batches"] == 2 and state.tokens_per_s == 12.5


def test_slow_probe_is_degraded_then_serving_again():
    state = probe(ready(), 0, 4.5)
    call = state.verdict(5)
    assert call.verdict is Serving.DEGRADED and "budget of 3 s" in call.why
    assert probe(state, 10, 1.0).verdict(12).verdict is Serving.SERVING


def test_probe_without_answer_and_nothing_served_is_hung_naming_the_stopped_rank():
    state = probe(ready(), 0, 1.0).probe_sent(5.0)
    state = state.observe_sample(ActivitySample(t=6, rank_processes=(RANKS[0], ("TP1", 101, "stopped"))))
    assert state.verdict(19.0).verdict is Serving.SERVING  # in flight, within its deadline
    call = state.verdict(20.0)
    assert call.verdict is Serving.HUNG
    assert call.ranks == ("TP1",) and "TP1 (pid 101)" in call.why


def test_a_prefill_line_after_the_probe_is_not_progress():
    # SGLang prints "Prefill batch" for the probe's own request before the forward pass in which
    # the ranks wait for a stopped TP1 (seen on the CPU rehearsal): it must not hide the hang.
    state = probe(ready(), 0, 1.0).probe_sent(5.0).observe_line(6.0, PREFILL)
    assert state.verdict(20.0).verdict is Serving.HUNG


def test_the_next_probe_in_flight_does_not_hide_a_failed_one():
    state = probe(ready(), 0, 1.0)
    state = (
        state.probe_sent(5.0).probe_answered(Probe(5.0, 17.0, 0, "no answer within 12 s")).probe_sent(17.5)
    )
    call = state.verdict(18.0)
    assert call.verdict is Serving.HUNG and "no answer within 12 s" in call.why
    assert state.probe_answered(Probe(17.5, 18.5, 200)).verdict(19.0).verdict is Serving.SERVING


def test_a_refused_probe_waits_for_the_servers_end_then_is_hung_after_a_deadline():
    refused = "ConnectError: [Errno 111] Connection refused"
    state = probe(ready(), 0, 1.0).probe_sent(5.0).probe_answered(Probe(5.0, 5.1, 0, refused))
    assert state.verdict(6.0).verdict is Serving.DEGRADED  # the server's end decides (CRASHED)
    assert (
        state.observe_end(6.5, "the server exited with code 137 (SIGKILL)").verdict(7).verdict
        is Serving.CRASHED
    )
    later = state.probe_sent(8.0).probe_answered(Probe(8.0, 8.1, 0, refused))
    assert later.verdict(19.0).verdict is Serving.DEGRADED
    assert later.verdict(20.5).verdict is Serving.HUNG  # a whole deadline of nothing listening


def test_failed_probe_while_requests_are_served_is_degraded_not_hung():
    state = ready().probe_sent(0.0).observe_line(4.0, DECODE)
    call = state.verdict(16.0)
    assert call.verdict is Serving.DEGRADED and "still served" in call.why


def test_a_503_from_sglangs_own_health_timeout_is_a_failed_probe():
    state = probe(ready(), 0, 20.0, status=503)
    assert state.verdict(21).verdict is Serving.HUNG
    assert "HTTP 503" in state.verdict(21).why


def test_rank_gone_is_crashed_with_the_exit_sglang_logged():
    state = probe(ready(), 0, 1.0)
    for event in parse_text(RANK_KILLED):
        state = state.observe_event(event, 9.0)
    state = state.observe_sample(ActivitySample(t=10, rank_processes=(RANKS[0],)))
    waiting = state.verdict(10.0)  # the server's own end usually follows within a second or two
    assert waiting.verdict is Serving.DEGRADED and waiting.ranks == ("TP1",)
    call = state.verdict(10.0 + LIMITS.settle_s)
    assert call.verdict is Serving.CRASHED
    assert call.ranks == ("TP1",)
    assert "TP1 (pid 101) exited" in call.why and "exit code -9" in call.why
    ended = state.observe_end(12.0, "the server exited with code 137 (SIGKILL)").verdict(12.0)
    assert ended.verdict is Serving.CRASHED and ended.ranks == ("TP1",)
    assert "137 (SIGKILL); ranks gone first: TP1 exited" in ended.why


def test_a_zombie_rank_is_gone_with_how_it_ended():
    zombie = ("TP1", 101, "zombie: killed by SIGKILL")
    state = ready().observe_sample(ActivitySample(t=3, rank_processes=(RANKS[0], zombie)))
    call = state.verdict(3 + LIMITS.settle_s)
    assert call.verdict is Serving.CRASHED and "TP1 (pid 101) killed by SIGKILL" in call.why


def test_unknown_rank_processes_are_not_all_gone():
    state = ready().observe_sample(ActivitySample(t=3, rank_processes=None))
    assert state.verdict(3).verdict is Serving.SERVING


def test_server_end_is_crashed():
    state = ready().observe_end(4.0, "the server exited with code 137 (SIGKILL)")
    call = state.verdict(4.0)
    assert call.verdict is Serving.CRASHED and "SIGKILL" in call.why


def test_fatal_line_then_nothing_is_crashed_after_the_grace_errors_alone_degrade():
    state = probe(ready(), 0, 1.0)
    for event in parse_text("[2026-12-04 22:00:09 TP0] Scheduler hit an exception: TypeError: boom"):
        state = state.observe_event(event, 2.0)
    assert state.verdict(5.0).verdict is Serving.DEGRADED
    assert state.verdict(12.0).verdict is Serving.CRASHED
    served_after = state.observe_line(3.0, DECODE)
    assert served_after.verdict(12.0).verdict is Serving.DEGRADED
    assert served_after.verdict(40.0).verdict is Serving.SERVING  # the error left the window


def test_limits_refuse_a_budget_over_the_deadline():
    with pytest.raises(ValueError, match="probe_budget_s"):
        ServingLimits(probe_timeout_s=5, probe_budget_s=5)


# -- properties ----------------------------------------------------------------------------------

_steps = st.lists(
    st.one_of(
        st.tuples(st.just("probe"), st.floats(0, 30), st.sampled_from([200, 200, 503, 0])),
        st.tuples(
            st.just("line"),
            st.sampled_from([DECODE, PREFILL, "noise", "Health check failed. for last 20 seconds"]),
        ),
        st.tuples(st.just("sample"), st.sampled_from(["sleeping", "running", "stopped", "gone"])),
        st.tuples(
            st.just("send"),
        ),
    ),
    max_size=40,
)


def _run(steps) -> tuple[ServingState, float]:
    state, t = ready(), 0.0
    for step in steps:
        t += 1.0
        kind = step[0]
        if kind == "probe":
            state = probe(state, t, step[1], step[2])
            t += step[1]
        elif kind == "line":
            state = state.observe_line(t, step[1])
        elif kind == "sample":
            tp1 = () if step[1] == "gone" else (("TP1", 101, step[1]),)
            state = state.observe_sample(ActivitySample(t=t, rank_processes=(RANKS[0], *tp1)))
        else:
            state = state.probe_sent(t)
    return state, t


@settings(max_examples=300, deadline=None)
@given(_steps)
# Found by hypothesis: a rank gone at t = 10.12139055199841 read at t + settle_s rounded to just
# under settle_s and stayed DEGRADED.
@example(
    [
        ("probe", 0.0, 200),
        ("line", "[2026-12-04 22:00:01 TP0] Decode batch, #running-req: 1, #token: 40, token usage: 0.01"),
        ("line", "[2026-12-04 22:00:01 TP0] Decode batch, #running-req: 1, #token: 40, token usage: 0.01"),
        ("probe", 5.121390551998411, 200),
        ("sample", "gone"),
    ]
)
def test_properties(steps):
    state, t = _run(steps)
    call = state.verdict(t)
    # A rank seen and then missing is a crash, whatever else happened; a crash is never undone.
    if state.gone:
        assert call.verdict in (Serving.CRASHED, Serving.DEGRADED)
        assert state.verdict(t + LIMITS.settle_s).verdict is Serving.CRASHED
        assert state.verdict(t + 1000).verdict is Serving.CRASHED
    # HUNG only when a probe failed (or is overdue) and nothing was served since it was sent.
    if call.verdict is Serving.HUNG:
        assert state.in_flight_since is not None or not state.last_probe.ok
    # SERVING never with a slow last probe.
    if call.verdict is Serving.SERVING and state.last_probe is not None and state.in_flight_since is None:
        assert state.last_probe.ok and state.last_probe.latency_s <= LIMITS.probe_budget_s
    # Nothing changes a verdict but inputs and time: the same state reads the same.
    assert state.verdict(t) == call
