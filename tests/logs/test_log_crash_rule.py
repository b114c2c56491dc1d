"""The rule behind every container the kit removes: CRASHED rests on the server's processes having
exited, or on a fatal line followed by no sign of life at all for the grace; never on one line.

Properties over generated start-ups (hypothesis): what happens after an error (lines, `\\r` redraws,
reads, GPU memory, CPU, compile writes, milestones) in any order and at any time.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.logs import ActivitySample, Crashed, Event, Hung, Milestone, PhaseLimits, Rank, Tracker
from kit.logs.activity import signs_of_life, summarize, what_moved

LIMITS = PhaseLimits()


def ev(milestone: Milestone, tp: int = 0, *, fatal: bool = False, exception: str | None = None) -> Event:
    fields = {"exception": exception} if exception else {}
    return Event(1, None, Rank(tp=tp), milestone, fields, f"[TP{tp}] {milestone.value}", fatal=fatal)


# One step after the error: (kind, seconds later). A sample carries counters that grow by `rate`.
steps = st.lists(
    st.tuples(
        st.sampled_from(["line", "redraw", "read", "gpu", "cpu", "compile", "milestone", "nothing"]),
        st.floats(min_value=0.1, max_value=30),
    ),
    max_size=25,
)


def _replay(tracker: Tracker, t: float, plan) -> tuple[Tracker, float, float]:
    """Apply the steps; returns the tracker, the time, and the last time anything lived."""
    counters = {"cpu": 0.0, "read": 0, "gpu": 1 << 30, "compile": 0}
    tracker = tracker.observe_sample(
        ActivitySample(t=t, cpu_seconds=0.0, read_bytes=0, gpu_mem_bytes=1 << 30, compile_bytes=0)
    )
    alive = t
    for kind, dt in plan:
        t += dt
        if kind in ("line", "redraw"):
            tracker = tracker.observe_line(t, "\rLoading 40%" if kind == "redraw" else "a line")
            alive = t
        elif kind == "milestone":
            tracker = tracker.observe_event(ev(Milestone.LOAD_END), t)
            alive = t
        else:
            if kind == "read":
                counters["read"] += 64 << 20
            elif kind == "gpu":
                counters["gpu"] += 256 << 20
            elif kind == "cpu":
                counters["cpu"] += dt  # one core
            elif kind == "compile":
                counters["compile"] += 4096
            tracker = tracker.observe_sample(
                ActivitySample(
                    t=t,
                    cpu_seconds=counters["cpu"],
                    read_bytes=counters["read"],
                    gpu_mem_bytes=counters["gpu"],
                    compile_bytes=counters["compile"],
                )
            )
            if kind != "nothing":
                alive = t
    return tracker, t, alive


@settings(max_examples=150, deadline=None)
@given(steps, st.floats(min_value=0, max_value=2000))
def test_a_non_fatal_error_is_never_a_crash_while_the_server_runs(plan, later):
    tracker = Tracker.start(LIMITS).observe_event(ev(Milestone.LOAD_BEGIN), 0.0)
    tracker = tracker.observe_event(
        ev(Milestone.ERROR, exception="ModuleNotFoundError: No module named 'x'"), 1.0
    )
    tracker, t, _ = _replay(tracker, 1.0, plan)
    assert not isinstance(tracker.verdict(t + later), Crashed)


@settings(max_examples=150, deadline=None)
@given(steps, st.floats(min_value=0, max_value=60))
def test_after_a_fatal_line_the_crash_waits_for_the_grace_without_any_sign_of_life(plan, later):
    tracker = Tracker.start(LIMITS).observe_event(ev(Milestone.LOAD_BEGIN), 0.0)
    tracker = tracker.observe_event(ev(Milestone.ERROR, fatal=True, exception="RuntimeError: x"), 1.0)
    tracker, t, alive = _replay(tracker, 1.0, plan)
    now = t + later
    crashed = isinstance(tracker.verdict(now), Crashed)
    assert crashed == (now - alive >= LIMITS.crash_grace_s)
    assert isinstance(tracker.verdict(now, ended=True), Crashed)  # the processes exited: at once


@settings(max_examples=100, deadline=None)
@given(steps)
def test_once_the_processes_exit_the_error_they_ended_with_is_the_crash(plan):
    # An error no milestone followed and that the server did not outlive by the grace is the
    # crash; one it worked on after for longer ended nothing (the exit itself names the end).
    tracker = Tracker.start(LIMITS).observe_event(ev(Milestone.LOAD_BEGIN), 0.0)
    error = ev(Milestone.ERROR, exception="ValueError: x")
    tracker = tracker.observe_event(error, 1.0)
    tracker, t, alive = _replay(tracker, 1.0, plan)
    milestone_after = any(kind == "milestone" for kind, _ in plan)
    ended_with_it = not milestone_after and alive - 1.0 < LIMITS.crash_grace_s
    assert isinstance(tracker.verdict(t, ended=True), Crashed) == ended_with_it
    assert (error in tracker.survived_errors(t, ended=True)) == (not ended_with_it)


def test_cpu_is_life_after_a_fatal_line_but_not_progress_after_launch():
    before = ActivitySample(t=0, cpu_seconds=0.0, read_bytes=0, gpu_mem_bytes=0)
    after = ActivitySample(t=2, cpu_seconds=2.0, read_bytes=0, gpu_mem_bytes=0)  # one core
    common = {"min_read_bytes": 1 << 20, "min_net_bytes": 1 << 20, "min_gpu_mem_bytes": 16 << 20}
    assert what_moved(before, after, cpu_counts=False, cpu_busy_cores=0.25, **common) is None
    assert signs_of_life(before, after, cpu_alive_cores=0.05, **common) == "cpu"
    idle = ActivitySample(t=2, cpu_seconds=0.01, read_bytes=0, gpu_mem_bytes=0)
    assert signs_of_life(before, idle, cpu_alive_cores=0.05, **common) is None


def test_freeing_gpu_memory_is_life_too():
    common = {"cpu_alive_cores": 0.05, "min_read_bytes": 1, "min_net_bytes": 1, "min_gpu_mem_bytes": 16 << 20}
    before = ActivitySample(t=0, gpu_mem_bytes=60 << 30)
    after = ActivitySample(t=2, gpu_mem_bytes=1 << 30)
    assert signs_of_life(before, after, **common) == "gpu memory"


# -- compile is progress where kernels compile ----------------------------------------------------


def test_compile_writes_and_live_compilers_are_progress_only_where_compiles_happen():
    common = {
        "cpu_counts": False,
        "cpu_busy_cores": 0.25,
        "min_read_bytes": 1 << 20,
        "min_net_bytes": 1 << 20,
    }
    common["min_gpu_mem_bytes"] = 16 << 20
    before = ActivitySample(t=0, cpu_seconds=0.0, compile_bytes=0, compilers=0)
    wrote = ActivitySample(t=2, cpu_seconds=2.0, compile_bytes=300_000, compilers=0)
    compiling = ActivitySample(t=2, cpu_seconds=2.0, compile_bytes=0, compilers=2)
    spinning = ActivitySample(t=2, cpu_seconds=2.0, compile_bytes=0, compilers=0)
    assert what_moved(before, wrote, compile_counts=True, **common) == "compile"
    assert what_moved(before, compiling, compile_counts=True, **common) == "compile"
    assert what_moved(before, spinning, compile_counts=True, **common) is None  # a spin is no compile
    assert what_moved(before, wrote, compile_counts=False, **common) is None


def test_a_compile_in_capture_resets_the_window_and_a_spin_does_not():
    tracker = Tracker.start(LIMITS).observe_event(ev(Milestone.CAPTURE_BEGIN), 0.0)
    assert tracker.stage == "capture" and "capture" in LIMITS.compile_counts_in
    window = LIMITS.stall_window_s.of("capture")
    compiling = tracker
    for step in range(0, int(window * 2), 2):
        compiling = compiling.observe_sample(
            ActivitySample(t=float(step), cpu_seconds=float(step), compile_bytes=step * 1000, compilers=1)
        )
    assert compiling.verdict(window * 2 - 2) is None
    spinning = tracker
    for step in range(0, int(window * 2), 2):
        spinning = spinning.observe_sample(
            ActivitySample(t=float(step), cpu_seconds=float(step), compilers=0)
        )
    assert isinstance(spinning.verdict(window * 2 - 2), Hung)


def test_the_autotune_phase_has_its_own_window():
    limits = PhaseLimits()
    tracker = Tracker.start(limits).observe_event(ev(Milestone.KV_READY), 0.0)
    tracker = tracker.observe_event(ev(Milestone.AUTOTUNE_BEGIN), 1.0)
    assert tracker.stage == "autotune"
    assert tracker.observe_event(ev(Milestone.AUTOTUNE_END), 2.0).stage == "capture"


# -- the shape of the activity a verdict is reached on --------------------------------------------


def _samples(cores: float, util: int, *, read: int = 0, n: int = 8) -> list[ActivitySample]:
    return [
        ActivitySample(t=2.0 * i, cpu_seconds=cores * 2.0 * i, read_bytes=read * i, gpu_util=(util,) * 4)
        for i in range(n)
    ]


def test_ranks_waiting_are_quiet_and_a_hung_collective_spins():
    assert summarize(_samples(0.0, 0), ranks=4).shape == "quiet"
    assert summarize(_samples(4.0, 100), ranks=4).shape == "spinning"
    assert summarize(_samples(0.0, 100), ranks=4).shape == "spinning"  # GPUs pinned at 100 %
    assert summarize(_samples(1.0, 30), ranks=4).shape is None  # a quarter core per rank: neither
    assert summarize(_samples(4.0, 100, read=100 << 20), ranks=4).shape is None  # data moves: no hang shape
    assert summarize(_samples(0.0, 0)[:1], ranks=4) is None


def test_per_rank_cpu_wins_over_the_container_average():
    busy_one = [
        ActivitySample(t=2.0 * i, cpu_seconds=2.0 * i, rank_cpu_seconds=(("TP0", 2.0 * i), ("TP1", 0.0)))
        for i in range(4)
    ]
    summary = summarize(busy_one, ranks=2)
    assert dict(summary.rank_cores) == {"TP0": 1.0, "TP1": 0.0}
    assert summary.shape == "spinning"
    assert "TP0 1.00" in summary.describe() and "activity=spinning" in summary.describe()
