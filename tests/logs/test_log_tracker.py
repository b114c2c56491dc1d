"""Tracker: phases per rank, phase-aware stall windows, deadlines, crashes and missing ranks."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from kit.errors import ExitCode
from kit.logs import (
    ActivitySample,
    Crashed,
    Deadline,
    Event,
    Hung,
    Milestone,
    Note,
    Phase,
    PhaseLimits,
    Rank,
    Ready,
    Tracker,
    VerdictKind,
)
from kit.logs.verdicts import StageSeconds

GiB = 1 << 30


def ev(milestone: Milestone | None, tp: int | None = None, **kw) -> Event:
    rank = None if tp is None else Rank(tp=tp)
    text = kw.pop("text", f"[TP{tp}] {milestone.value if milestone else kw.get('note')}")
    return Event(line_no=kw.pop("line_no", 1), time=None, rank=rank, milestone=milestone, text=text, **kw)


def started(*events_at: tuple[Event, float], limits: PhaseLimits | None = None) -> Tracker:
    tracker = Tracker.start(limits, t=0.0)
    for event, t in events_at:
        tracker = tracker.observe_event(event, t)
    return tracker


def samples(tracker: Tracker, start: float, stop: float, step: float, **growth) -> Tracker:
    """Feed samples every `step` seconds whose counters grow by `growth` per second."""
    t = start
    while t <= stop:
        tracker = tracker.observe_sample(
            ActivitySample(
                t=t,
                cpu_seconds=growth.get("cpu", 0.0) * t,
                read_bytes=int(growth.get("read", 0) * t),
                gpu_mem_bytes=int(growth.get("gpu", 0) * t),
            )
        )
        t += step
    return tracker


# -- stall windows -----------------------------------------------------------------------------


def test_a_slow_load_that_keeps_reading_is_never_hung():
    tracker = started(
        (ev(Milestone.INIT_BEGIN, 0), 0), (ev(Milestone.INIT_END, 0), 5), (ev(Milestone.LOAD_BEGIN, 0), 6)
    )
    limits = tracker.limits
    assert tracker.stage == "load"
    # 50 minutes of loading, no log line at all, 100 MB/s of reads: well past the 600 s window.
    t = 6.0
    while t < 6 + 3000:
        tracker = tracker.observe_sample(ActivitySample(t=t, read_bytes=int(t * 100e6)))
        assert tracker.verdict(t) is None, t
        t += 30
    assert t - 6 > limits.stall_window_s.load


def test_a_slow_load_that_only_computes_is_not_hung_where_the_profile_counts_cpu_in_load():
    limits = PhaseLimits(cpu_counts_in=frozenset({"launch", "load"}))  # the CPU rehearsal's choice
    tracker = started((ev(Milestone.LOAD_BEGIN, 0), 0), limits=limits)
    tracker = samples(tracker, 0, 1500, 10, cpu=1.0)  # one core busy (decompressing, converting)
    assert tracker.verdict(1500) is None


def test_a_spinning_load_is_hung_where_cpu_is_no_proof():
    """The GPU default: after launch a busy core is a spinning collective, not a load."""
    tracker = started((ev(Milestone.LOAD_BEGIN, 0), 0))
    window = tracker.limits.stall_window_s.load
    tracker = samples(tracker, 0, window + 20, 10, cpu=4.0)
    assert isinstance(tracker.verdict(window + 20), Hung)


def test_network_bytes_received_count_as_progress():
    tracker = started((ev(Milestone.LOAD_BEGIN, 0), 0))
    t = 0.0
    while t < 3000:
        tracker = tracker.observe_sample(ActivitySample(t=t, net_rx_bytes=int(t * 50e6)))
        t += 10
    assert tracker.verdict(t) is None


def test_gpu_utilisation_is_never_progress():
    tracker = started((ev(Milestone.INIT_END, 0), 0), (ev(Milestone.LOAD_BEGIN, 0), 0))
    window = tracker.limits.stall_window_s.load
    for t in range(0, int(window) + 30, 10):
        tracker = tracker.observe_sample(ActivitySample(t=t, gpu_mem_bytes=GiB, gpu_util=(100, 100)))
    assert isinstance(tracker.verdict(window + 30), Hung)


def test_a_quiet_load_is_hung_after_its_window():
    tracker = started((ev(Milestone.LOAD_BEGIN, 0), 0))
    window = tracker.limits.stall_window_s.load
    tracker = samples(tracker, 0, window + 60, 10)  # counters flat
    assert tracker.verdict(window - 1) is None
    verdict = tracker.verdict(window + 60)
    assert isinstance(verdict, Hung) and verdict.phase is Phase.LOAD
    assert verdict.quiet_for_s == pytest.approx(window + 60)


def _init_hang_on_tp3() -> Tracker:
    events = [
        (ev(Milestone.INIT_BEGIN, tp, text=f"[TP{tp}] Init torch distributed begin."), 0.0) for tp in range(4)
    ]
    events += [
        (ev(Milestone.INIT_END, tp, text=f"[TP{tp}] Init torch distributed ends."), 3.0) for tp in range(3)
    ]
    events += [(ev(Milestone.LOAD_BEGIN, tp), 3.5) for tp in range(3)]
    return started(*events)


def test_a_quiet_init_is_hung_after_its_short_window_naming_stuck_and_missing_ranks():
    tracker = _init_hang_on_tp3()
    window = tracker.limits.stall_window_s.init
    assert window < tracker.limits.stall_window_s.load
    # A hung collective busy-waits: CPU grows, but in init that is no proof of progress.
    tracker = samples(tracker, 3.5, 3.5 + window + 5, 5, cpu=4.0)
    assert tracker.verdict(3.5 + window - 1) is None
    verdict = tracker.verdict(3.5 + window + 5)
    assert isinstance(verdict, Hung)
    assert verdict.phase is Phase.INIT
    assert verdict.stuck_ranks == ("TP3",)
    assert verdict.missing_ranks == ("TP3",)
    assert "[TP3] Init torch distributed begin." in verdict.evidence
    assert (verdict.kind, verdict.exit_code) == (VerdictKind.HUNG, ExitCode.HUNG)


def test_missing_lists_the_milestones_each_laggard_never_printed():
    missing = _init_hang_on_tp3().missing()
    assert [(m.milestone, m.ranks) for m in missing] == [
        (Milestone.INIT_END, ("TP3",)),
        (Milestone.LOAD_BEGIN, ("TP3",)),
    ]


def test_expected_ranks_never_seen_are_missing_too():
    limits = PhaseLimits(expected_ranks=4)
    tracker = started(*[(ev(Milestone.INIT_BEGIN, tp), 0.0) for tp in range(3)], limits=limits)
    assert [(m.milestone, m.ranks) for m in tracker.missing()] == [(Milestone.INIT_BEGIN, ("TP3",))]


def test_gpu_memory_growth_counts_as_progress_in_init():
    tracker = started((ev(Milestone.INIT_BEGIN, 0), 0))
    tracker = samples(tracker, 0, 600, 10, gpu=GiB / 100)  # NCCL buffers being allocated
    assert tracker.verdict(600) is None


def test_cpu_counts_in_init_when_configured():
    limits = PhaseLimits(cpu_counts_in=frozenset({"init"}))
    tracker = samples(started((ev(Milestone.INIT_BEGIN, 0), 0), limits=limits), 0, 600, 10, cpu=1.0)
    assert tracker.verdict(600) is None


def test_idle_cpu_below_the_threshold_is_no_activity():
    limits = PhaseLimits(cpu_counts_in=frozenset({"load"}))
    tracker = samples(started((ev(Milestone.LOAD_BEGIN, 0), 0), limits=limits), 0, 700, 10, cpu=0.01)
    assert isinstance(tracker.verdict(700), Hung)


def test_a_counter_reset_is_not_growth():
    tracker = started((ev(Milestone.LOAD_BEGIN, 0), 0))
    tracker = tracker.observe_sample(ActivitySample(t=0, read_bytes=10 * GiB))
    tracker = tracker.observe_sample(ActivitySample(t=10, read_bytes=0))  # container restarted
    assert tracker.last_activity_at == 0


def test_any_log_line_resets_the_window():
    tracker = started((ev(Milestone.INIT_BEGIN, 0), 0))
    tracker = tracker.observe_line(100.0, "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC")
    assert tracker.verdict(100 + tracker.limits.stall_window_s.init - 1) is None
    assert tracker.tail[-1].endswith("via P2P/IPC")


def test_before_any_milestone_the_launch_limits_apply():
    tracker = Tracker.start(t=0.0)
    assert tracker.stage == "launch" and tracker.phase is None
    verdict = tracker.verdict(tracker.limits.stall_window_s.launch + 1)
    assert isinstance(verdict, Hung) and verdict.phase is None


# -- deadlines -----------------------------------------------------------------------------------


def test_a_phase_past_its_deadline_while_still_active_is_deadline():
    limits = PhaseLimits(deadline_s=dataclasses.replace(PhaseLimits().deadline_s, load=100))
    tracker = samples(started((ev(Milestone.LOAD_BEGIN, 0), 0), limits=limits), 0, 150, 10, read=1e8)
    assert tracker.verdict(90) is None
    verdict = tracker.verdict(150)
    assert verdict == Deadline(phase=Phase.LOAD, limit_s=100, elapsed_s=150)
    assert verdict.exit_code == ExitCode.DEADLINE


def test_deadline_counts_from_the_start_of_the_current_phase():
    limits = PhaseLimits(deadline_s=StageSeconds(10, 10, 10, 10, 10, 10, 10))
    tracker = started((ev(Milestone.INIT_BEGIN, 0), 0), (ev(Milestone.INIT_END, 0), 8), limits=limits)
    tracker = samples(tracker, 0, 15, 1, read=1e8)
    assert tracker.phase is Phase.LOAD and tracker.phase_since == 8
    assert tracker.verdict(15) is None
    assert isinstance(tracker.verdict(19), Deadline)


def test_the_servers_own_warmup_request_after_http_up_keeps_the_warmup_limits():
    tracker = started((ev(Milestone.CAPTURE_END, 0), 0))
    assert tracker.stage == "warmup"
    tracker = tracker.observe_event(ev(Milestone.HTTP_UP), 5)
    # Its first forward pass compiles kernels; the client's first-token limit is for after READY.
    assert (tracker.phase, tracker.stage) == (Phase.WARMUP, "warmup")


# -- crashes and readiness -------------------------------------------------------------------------


def test_a_fatal_line_is_a_crash_once_the_server_exits():
    dead = ev(Milestone.ERROR, None, fatal=True, text="Rank 1 scheduler is dead.")
    tracker = started((ev(Milestone.INIT_BEGIN, 1), 0), (dead, 1))
    verdict = tracker.verdict(1, ended=True)
    assert isinstance(verdict, Crashed)
    assert verdict.phase is Phase.INIT and "Rank 1 scheduler is dead." in verdict.evidence
    assert verdict.exit_code == ExitCode.FAILED


def test_a_fatal_line_while_the_server_runs_is_a_crash_only_after_the_grace_without_life():
    dead = ev(Milestone.ERROR, 1, fatal=True, text="Scheduler hit an exception")
    tracker = started((ev(Milestone.LOAD_BEGIN, 1), 0), (dead, 1))
    grace = tracker.limits.crash_grace_s
    assert tracker.verdict(1 + grace - 0.5) is None
    assert isinstance(tracker.verdict(1 + grace), Crashed)


def test_after_a_fatal_line_any_sign_of_life_postpones_the_crash_cpu_included():
    # CPU is no progress after launch on a GPU profile, but it is life: the server still runs.
    dead = ev(Milestone.ERROR, 1, fatal=True, text="Scheduler hit an exception")
    tracker = started((ev(Milestone.CAPTURE_BEGIN, 1), 0), (dead, 1))
    tracker = samples(tracker, 0, 30, 2, cpu=1.0)
    assert "capture" not in tracker.limits.cpu_counts_in
    assert tracker.verdict(31) is None
    assert isinstance(tracker.verdict(30 + tracker.limits.crash_grace_s), Crashed)
    # a redrawn bar (a line) is life too
    tracker = started((ev(Milestone.LOAD_BEGIN, 1), 0), (dead, 1)).observe_line(9, "\rLoading 40%")
    assert tracker.verdict(15) is None


def test_the_first_fatal_error_is_shown_and_its_exception_kept():
    cause = ev(
        Milestone.ERROR,
        9,
        fatal=True,
        text="Scheduler hit an exception",
        fields={"exception": "RuntimeError: x"},
    )
    after = ev(Milestone.ERROR, None, fatal=True, text="Received sigquit from a child process.")
    verdict = started((ev(Milestone.INIT_BEGIN, 9), 0), (cause, 1), (after, 1)).verdict(1, ended=True)
    assert isinstance(verdict, Crashed)
    assert (verdict.exception, verdict.rank) == ("RuntimeError: x", "TP9")


def test_a_traceback_followed_by_progress_was_survived():
    traceback = ev(Milestone.ERROR, 0, fields={"exception": "UserWarning: x"})
    tracker = started((ev(Milestone.LOAD_BEGIN, 0), 0), (traceback, 1), (ev(Milestone.LOAD_END, 0), 2))
    assert tracker.verdict(100) is None
    assert tracker.verdict(100, ended=True) is not None and not isinstance(
        tracker.verdict(100, ended=True), Crashed
    )
    assert tracker.survived_errors(100) == (traceback,)


def test_a_non_fatal_traceback_is_never_a_crash_while_the_server_runs():
    # The reproduction: an ignored ModuleNotFoundError traceback during load, then a long
    # load with no milestone. The old rule called it CRASHED 10 s later; now only the stall window
    # can end it (HUNG, if nothing at all moves), and the traceback is evidence.
    traceback = ev(Milestone.ERROR, 0, fields={"exception": "ModuleNotFoundError: No module named 'x'"})
    tracker = started((ev(Milestone.LOAD_BEGIN, 0), 0), (traceback, 1))
    tracker = samples(tracker, 0, 300, 2, read=50e6)
    assert tracker.verdict(300) is None
    assert tracker.survived_errors(300) == (traceback,)
    quiet = started((ev(Milestone.LOAD_BEGIN, 0), 0), (traceback, 1))
    window = quiet.limits.stall_window_s.of("load")
    assert quiet.verdict(1 + window - 1) is None
    assert isinstance(quiet.verdict(1 + window), Hung)


def test_a_traceback_with_no_milestone_after_it_is_the_crash_when_the_server_exits():
    traceback = ev(Milestone.ERROR, 0, fields={"exception": "ValueError: x"})
    tracker = started((ev(Milestone.LOAD_BEGIN, 0), 0), (traceback, 1))
    verdict = tracker.verdict(2, ended=True)  # the processes exited (or the log ended)
    assert isinstance(verdict, Crashed) and verdict.exception == "ValueError: x"
    assert tracker.survived_errors(2, ended=True) == ()


def test_ready():
    tracker = started((ev(Milestone.CAPTURE_END, 0), 0), (ev(Milestone.HTTP_UP), 1), (ev(Milestone.READY), 4))
    assert tracker.verdict(4) == Ready(at=4)
    assert tracker.phase is Phase.SERVING
    assert tracker.last_milestone is Milestone.READY
    assert [s.phase for s in tracker.rank_states] == [Phase.SERVING, Phase.SERVING]


def test_errors_after_a_shutdown_request_are_ignored():
    shutdown = ev(None, note=Note.SHUTDOWN, text="SIGTERM received.")
    exit_15 = ev(Milestone.ERROR, fatal=True, text="crashed with exit code -15")
    tracker = started((ev(Milestone.READY), 0), (shutdown, 5), (exit_15, 5))
    assert isinstance(tracker.verdict(6), Ready)


def test_a_fatal_error_after_ready_is_a_crash_but_a_request_traceback_is_not():
    tracker = started((ev(Milestone.READY), 0), (ev(Milestone.ERROR, 0, fields={"exception": "KeyError"}), 5))
    assert isinstance(tracker.verdict(100, ended=True), Ready)
    tracker = tracker.observe_event(ev(Milestone.ERROR, fatal=True, text="Killed"), 6)
    verdict = tracker.verdict(6, ended=True)
    assert isinstance(verdict, Crashed) and verdict.phase is Phase.SERVING


# -- ranks, rank-0-only lines, timeline ------------------------------------------------------------


def _up_to_kv(ranks: range) -> list[tuple[Event, float]]:
    order = [
        Milestone.INIT_BEGIN,
        Milestone.INIT_END,
        Milestone.LOAD_BEGIN,
        Milestone.LOAD_END,
        Milestone.KV_READY,
    ]
    return [(ev(m, tp), float(i)) for i, m in enumerate(order) for tp in ranks]


def test_rank0_only_capture_lines_do_not_make_other_ranks_missing():
    draft = ev(Milestone.CAPTURE_BEGIN, 0, rank0_only=True)
    tracker = started(*_up_to_kv(range(2)), (draft, 10))
    assert tracker.missing() == ()
    # Rank 1 captures too, silently: its phase follows rank 0.
    assert [(s.label, s.phase) for s in tracker.rank_states] == [
        ("TP0", Phase.CAPTURE),
        ("TP1", Phase.CAPTURE),
    ]
    assert [s.milestone for s in tracker.rank_states] == [Milestone.CAPTURE_BEGIN, Milestone.KV_READY]


def test_lines_every_rank_prints_do_make_silent_ranks_missing():
    target = ev(Milestone.CAPTURE_BEGIN, 0)
    tracker = started(*_up_to_kv(range(2)), (target, 10))
    assert [(m.milestone, m.ranks) for m in tracker.missing()] == [(Milestone.CAPTURE_BEGIN, ("TP1",))]


def test_rank0_only_lines_are_owed_by_the_rank0_of_every_replica():
    events = [
        (Event(1, None, Rank(tp=tp, dp=dp), Milestone.KV_READY, text="kv"), 0.0)
        for dp in range(2)
        for tp in range(2)
    ]
    events.append((Event(2, None, Rank(tp=0, dp=0), Milestone.CAPTURE_BEGIN, rank0_only=True, text="c"), 1.0))
    tracker = started(*events)
    assert [(m.milestone, m.ranks) for m in tracker.missing()] == [(Milestone.CAPTURE_BEGIN, ("DP1 TP0",))]


def test_rank0_only_lines_do_not_move_peers_that_are_behind():
    tracker = started((ev(Milestone.KV_READY, 0), 0), (ev(Milestone.LOAD_BEGIN, 1), 0))
    tracker = tracker.observe_event(ev(Milestone.CAPTURE_BEGIN, 0, rank0_only=True), 5)
    assert dict((s.label, s.phase) for s in tracker.rank_states)["TP1"] is Phase.LOAD
    assert tracker.phase is Phase.LOAD


def test_timeline_has_one_span_per_rank_and_phase_with_start_end_and_elapsed():
    tracker = started(*_up_to_kv(range(1)))
    spans = [(s.rank, s.phase, s.start, s.end) for s in tracker.timeline]
    assert spans == [
        ("TP0", Phase.INIT, 0.0, 1.0),
        ("TP0", Phase.LOAD, 1.0, 3.0),
        ("TP0", Phase.MEMORY, 3.0, 4.0),
        ("TP0", Phase.CAPTURE, 4.0, None),
    ]
    assert tracker.timeline[-1].elapsed(10.0) == 6.0
    assert tracker.timeline[1].elapsed(10.0) == 2.0


def test_observing_returns_a_new_tracker_and_leaves_the_old_one_alone():
    before = Tracker.start(t=0.0)
    after = before.observe_event(ev(Milestone.INIT_BEGIN, 0), 1.0)
    assert before.ranks == {} and before.phase is None
    assert after.phase is Phase.INIT
    with pytest.raises(dataclasses.FrozenInstanceError):
        after.phase = Phase.LOAD  # type: ignore[misc]


def test_notes_are_evidence_not_progress():
    connected = ev(None, 0, note=Note.NCCL_CONNECTED, text="NCCL INFO Connected all trees")
    tracker = started((ev(Milestone.INIT_BEGIN, 0), 0), (connected, 5))
    assert tracker.progress_seq == 1 and tracker.phase is Phase.INIT
    assert tracker.rank_states[0].evidence[-1] == "NCCL INFO Connected all trees"


def test_expected_but_unseen_ranks_are_not_owed_rank0_only_lines():
    limits = PhaseLimits(expected_ranks=3)
    events = [(ev(Milestone.KV_READY, tp), 0.0) for tp in range(2)]
    tracker = started(*events, (ev(Milestone.CAPTURE_BEGIN, 0, rank0_only=True), 1.0), limits=limits)
    assert [(m.milestone, m.ranks) for m in tracker.missing()] == [(Milestone.KV_READY, ("TP2",))]


def test_an_old_tracker_observed_again_keeps_its_own_timeline_and_the_newer_one_its_own():
    # The shared append-only logs fork when an older tracker is observed after a newer one grew.
    base = started(*_up_to_kv(range(1)))
    left = base.observe_event(ev(Milestone.CAPTURE_BEGIN, 0), 10.0).observe_event(
        ev(Milestone.CAPTURE_END, 0), 11.0
    )
    right = base.observe_event(ev(Milestone.KV_READY, 1), 12.0)
    assert [(s.rank, s.phase, s.end) for s in left.timeline][-2:] == [
        ("TP0", Phase.CAPTURE, 11.0),
        ("TP0", Phase.WARMUP, None),
    ]
    assert [(s.rank, s.phase) for s in right.timeline][-2:] == [
        ("TP0", Phase.CAPTURE),
        ("TP1", Phase.CAPTURE),
    ]
    assert len(base.timeline) == 4 and base.timeline[-1].end is None
    assert Milestone.CAPTURE_END in left.reached and Milestone.CAPTURE_END not in right.reached


def test_a_long_run_of_events_keeps_every_span_once():
    tracker = Tracker.start(t=0.0)
    cycle = [Milestone.INIT_BEGIN, Milestone.INIT_END, Milestone.LOAD_END, Milestone.KV_READY]
    for i in range(2000):  # an MTP draft worker repeats the cycle; here many times over
        tracker = tracker.observe_event(ev(cycle[i % 4], 0), float(i))
    spans = tracker.timeline
    assert len(spans) == 2000 and sum(s.end is None for s in spans) == 1
    assert all(a.end == b.start for a, b in itertools.pairwise(spans))


def test_the_first_line_of_each_note_kind_stays_evidence_after_the_tail_scrolls_past_it():
    transport = "host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"
    tracker = Tracker.start(PhaseLimits(evidence_lines=2), t=0.0)
    tracker = tracker.observe_event(
        ev(None, note=Note.NCCL_TRANSPORT, fields={"transport": "P2P"}, text=transport), 1.0
    )
    tracker = tracker.observe_line(1.0, transport)
    for i in range(2, 40):
        tracker = tracker.observe_event(ev(Milestone.INIT_BEGIN, tp=i % 4), float(i))
        tracker = tracker.observe_line(float(i), f"[TP{i % 4}] Init torch distributed begin.")
    tracker = tracker.observe_event(
        ev(None, note=Note.NCCL_TRANSPORT, fields={"transport": "P2P"}, text=transport + " again"), 41.0
    )
    assert transport not in tracker.tail
    assert transport in tracker.evidence()  # kept once per kind: the second P2P line is not added
    assert transport + " again" not in tracker.evidence()
