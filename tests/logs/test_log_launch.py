"""The ranks a launch promises, read off its own arguments, and the phase a traceback names."""

from __future__ import annotations

import pytest

from kit.logs import (
    Crashed,
    LaunchArgs,
    Milestone,
    Phase,
    PhaseLimits,
    Tracker,
    analyze_text,
    parse_text,
)
from kit.logs.launch import launch_fields

SERVER_ARGS = (
    "[2026-02-27 14:32:58] server_args=ServerArgs(model_path='/m', tp_size={tp}, pp_size={pp}, dp_size={dp},"
    " enable_dp_attention={dpa}, nnodes={nnodes}, node_rank={node}, moe_dense_tp_size=None)"
)


def _args(tp=1, pp=1, dp=1, dpa=False, nnodes=1, node=0) -> LaunchArgs:
    line = SERVER_ARGS.format(tp=tp, pp=pp, dp=dp, dpa=dpa, nnodes=nnodes, node=node)
    launch = LaunchArgs.from_fields(launch_fields(line))
    assert launch is not None
    return launch


@pytest.mark.parametrize(
    ("args", "keys"),
    [
        ({"tp": 1}, []),  # one scheduler, no rank prefix: nothing to expect
        ({"tp": 4}, ["TP0", "TP1", "TP2", "TP3"]),
        ({"tp": 2, "dp": 2}, ["DP0 TP0", "DP0 TP1", "DP1 TP0", "DP1 TP1"]),
        ({"tp": 1, "dp": 2}, ["DP0", "DP1"]),
        ({"tp": 2, "pp": 2}, ["PP0 TP0", "PP0 TP1", "PP1 TP0", "PP1 TP1"]),
        ({"tp": 4, "dp": 2, "dpa": True}, ["DP0 TP0", "DP0 TP1", "DP1 TP2", "DP1 TP3"]),
    ],
)
def test_expected_ranks_are_labelled_as_sglang_prefixes_them(args, keys):
    assert [r.key for r in _args(**args).expected()] == keys


def test_multi_node_ranks_are_spread_evenly_over_the_nodes():
    expected = _args(tp=16, nnodes=2, node=1).expected()
    assert [(r.key, r.node) for r in expected[7:9]] == [("TP7", 0), ("TP8", 1)]
    assert {r.node for r in expected} == {0, 1}


def test_an_elided_server_args_line_promises_nothing():
    [event] = parse_text("server_args=ServerArgs(...)")
    assert LaunchArgs.from_fields(event.fields) is None


def test_the_launch_line_makes_a_silent_rank_missing_in_a_live_tracker():
    text = "\n".join(
        [
            SERVER_ARGS.format(tp=2, pp=1, dp=1, dpa=False, nnodes=1, node=0),
            "[2026-02-27 14:33:00 TP0] Init torch distributed begin.",
        ]
    )
    tracker = Tracker.start(PhaseLimits(), 0.0).observe_events(parse_text(text), 1.0)
    assert [r.key for r in tracker.never_seen()] == ["TP1"]
    [missing] = tracker.missing()
    assert (missing.milestone, missing.ranks, missing.never_seen) == (
        Milestone.INIT_BEGIN,
        ("TP1",),
        ("TP1",),
    )
    # The live limits win over the log when the kit knows the spec.
    limited = Tracker.start(PhaseLimits(expected_ranks=3), 0.0).observe_events(parse_text(text), 1.0)
    assert [r.key for r in limited.never_seen()] == ["TP1", "TP2"]


# -- phases from tracebacks ----------------------------------------------------------------------

# The tail the issue quotes, as people paste it: the exception line alone.
OOM_TAIL = "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB."


def test_a_pasted_capture_oom_tail_is_crashed_in_capture_with_capture_oom_first():
    report = analyze_text(OOM_TAIL)
    assert (report.outcome, report.phase, report.phase_from) == ("crashed", Phase.CAPTURE, "exception")
    assert report.likely_causes[0].id == "capture-oom"
    assert report.likely_causes[0].generic is False
    # Generic causes (shm, memlock) may follow, marked generic, never above the evidence.
    assert all(cause.generic for cause in report.likely_causes[1:])


@pytest.mark.parametrize(
    ("frames", "phase"),
    [
        (["self.init_cuda_graphs()"], Phase.CAPTURE),
        (["self.load_model()"], Phase.LOAD),
        (["min_per_gpu_memory = self.init_torch_distributed()"], Phase.INIT),
        (["self.init_memory_pool("], Phase.MEMORY),
        (["assert res.status_code == 200"], None),
    ],
)
def test_the_source_line_under_a_frame_names_the_step_it_called(frames, phase):
    text = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/sgl/srt/model_executor/model_runner.py", line 410, in initialize',
            *(f"    {line}" for line in frames),
            "RuntimeError: something",
        ]
    )
    [error] = parse_text(text)
    assert error.fields.get("phase_hint") == (phase and phase.value)


def test_the_outermost_step_wins_over_the_helpers_below_it():
    # A pynccl all-reduce (an init helper) called during CUDA graph capture is capture.
    text = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/sgl/srt/model_executor/model_runner.py", line 224, in __init__',
            "    self.init_cuda_graphs()",
            '  File "/sgl/srt/distributed/device_communicators/pynccl.py", line 120, in all_reduce',
            '  File "/torch/distributed/rendezvous.py", line 9, in _create_c10d_store',
            "RuntimeError: NCCL error",
        ]
    )
    [error] = parse_text(text)
    assert error.fields["phase_hint"] == "capture"


def test_milestones_win_over_the_traceback_when_there_are_some():
    text = "\n".join(
        [
            "[2026-01-01 00:00:00 TP0] Load weight begin. avail mem=10 GB",
            "[2026-01-01 00:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/sgl/srt/model_executor/model_runner.py", line 10, in initialize',
            "    self.init_cuda_graphs()",
            "RuntimeError: x",
        ]
    )
    verdict = Tracker.start().observe_events(parse_text(text), 1.0).verdict(2.0, ended=True)
    assert isinstance(verdict, Crashed)
    assert (verdict.phase, verdict.phase_from) == (Phase.LOAD, "milestones")


def test_a_tail_without_a_phase_naming_frame_has_no_phase():
    report = analyze_text('  File "/x/triton/compiler.py", line 80, in make_ir\nValueError: bad')
    assert (report.outcome, report.phase, report.phase_from) == ("crashed", None, None)


def test_a_traceback_through_flashinfer_autotune_points_at_autotune():
    # sgl-project/sglang#12306's traceback: initialize -> kernel_warmup -> _flashinfer_autotune (0.5.9-era).
    text = "\n".join(
        [
            "[2025-11-18 13:28:40 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/sgl/srt/model_executor/model_runner.py", line 507, in initialize',
            "    self.kernel_warmup()",
            '  File "/sgl/srt/model_executor/model_runner.py", line 2061, in _flashinfer_autotune',
            "    self._dummy_run(batch_size=self.req_to_token_pool.size)",
            "RuntimeError: x",
        ]
    )
    verdict = Tracker.start().observe_events(parse_text(text), 1.0).verdict(2.0, ended=True)
    assert isinstance(verdict, Crashed)
    assert (verdict.phase, verdict.phase_from) == (Phase.AUTOTUNE, "exception")
