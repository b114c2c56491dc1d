"""What a watch said against what ran (kit/hostcheck/judge.py), judged from text: a real recording of
`kit watch --pid --json` on the quiet shape (tests/fixtures/hostcheck/watch-quiet-cpu-shapes.jsonl:
OUT/shapes.jsonl of `KIT_CHECK_STEPS=watch-quiet bash scripts/gpu-host-check` on this CPU machine,
2026-12-05), and lines made in the watch's own shape where a GPU run is needed to get them."""

from __future__ import annotations

import json
from pathlib import Path

from kit.hostcheck.judge import compile_seen, judge_compile, judge_stall, judge_watch, result_line

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "hostcheck" / "watch-quiet-cpu-shapes.jsonl"


def _recorded() -> tuple[list[str], dict]:
    """The watch's own lines, and the check's `"type": "gpu-host-check"` line about them."""
    lines = RECORDED.read_text(encoding="utf-8").splitlines()
    meta = [json.loads(x) for x in lines if '"gpu-host-check"' in x]
    return [x for x in lines if '"gpu-host-check"' not in x], meta[0]


def test_result_line_is_the_watchs_last_result():
    lines = ['{"type":"activity","t":1}', "not json", '{"type":"result","verdict":"hung","exit_code":4}']
    assert result_line(lines)["verdict"] == "hung"
    assert result_line(lines[:2]) is None
    watch, _ = _recorded()
    assert result_line(watch)["phase"] == "capture"


def test_the_recorded_quiet_control_is_judged_hung_in_capture():
    watch, meta = _recorded()
    state, head = judge_stall(result_line(watch), meta["watch_exit_code"], "quiet")
    assert state == "ok", head
    assert head.startswith("quiet: HUNG in capture exit 4; activity quiet")
    # The same lines are not a spin: wrong phase, not spinning, no spin_gpu in TP0's stack.
    state, head = judge_stall(result_line(watch), meta["watch_exit_code"], "spin")
    assert state == "finding"
    assert "expected phase init" in head and "expected activity 'spinning'" in head and "spin_gpu" in head


def test_the_recorded_watch_judged_as_the_hang_step_names_what_a_gpu_run_adds():
    """judge_watch on real watch output: the verdict line is right (HUNG, exit 4), but a CPU process
    holds no GPU memory and waits in no rendezvous, so those two lines are findings, not passes."""
    watch, meta = _recorded()
    alive = {pid: {"status": state} for pid, state in meta["alive_after_watch"].items()}
    said = judge_watch("hang", result_line(watch), meta["watch_exit_code"], watch, alive, meta)
    assert [s for s, _ in said] == ["ok", "finding", "ok", "finding"], said
    assert said[0][1].startswith("hang: HUNG in capture exit 4 after 16.02 s; activity quiet")
    assert "carry no GPU memory (gpu_mem_bytes {None})" in said[1][1]
    assert said[2][1] == "hang: the watched tree is alive after the verdict (2 processes)"
    assert said[3][1] == "hang: no stack classified as rendezvous (kinds {'other'})"
    # A crash run that got the same lines: the wrong verdict, and no tree to look for.
    crash = judge_watch("crash", result_line(watch), 4, watch, {}, meta)
    assert crash[0][0] == "finding" and crash[0][1].startswith("expected CRASHED exit 1; got crash: HUNG")
    assert len(crash) == 2


def test_a_hang_with_gpu_memory_and_a_rendezvous_stack_passes_and_a_dead_tree_does_not():
    result = {
        "type": "result",
        "verdict": "hung",
        "phase": "init",
        "activity": {"shape": "quiet", "cpu_cores": 0.0, "gpu_mem_delta_gib": 0.0},
        "stacks": [
            {"rank": "TP0", "kind": "rendezvous", "where": "_create_c10d_store <- init_process_group"}
        ],
    }
    lines = [json.dumps({"type": "activity", "gpu_mem_bytes": b}) for b in (0, 1_073_741_824 * 3 // 2)]
    lines.append(json.dumps(result))
    meta = {"result_after_s": 27.5}
    alive = {"10": {"status": "sleeping"}, "11": {"status": "sleeping"}}
    said = judge_watch("hang", result, 4, lines, alive, meta)
    assert [s for s, _ in said] == ["ok", "ok", "ok"]
    assert said[1][1] == "hang: the watch read GPU memory by PID: up to 1.50 GiB"
    gone = judge_watch("hang", result, 4, lines, {"10": {"status": "zombie"}}, meta)
    assert gone[2][0] == "error" and "gone after the watch" in gone[2][1]


def test_no_result_line_is_an_error_with_the_watchs_last_word():
    meta = {"watch_seconds": 75.2, "watch_stderr_tail": "Traceback ...\nRuntimeError: py-spy failed\n"}
    said = judge_watch("hang", None, 130, ['{"type":"activity"}'], {}, meta)
    assert said == [
        ("error", "hang: no result line from kit watch (exit 130, 75.2 s): RuntimeError: py-spy failed")
    ]


# -- the shapes (moved from tests/runtime/test_gpu_shapes.py) ----------------------------------------


def _result(verdict="hung", phase="init", shape="spinning", where="spin_gpu <- scheduler <- main"):
    return {
        "type": "result",
        "verdict": verdict,
        "phase": phase,
        "activity": {"shape": shape, "cpu_cores": 1.0, "gpu_util": [100]},
        "stacks": [{"rank": "TP0", "kind": "other", "where": where}],
    }


def test_the_spin_is_judged_by_verdict_phase_shape_and_stack():
    assert judge_stall(_result(), 4, "spin")[0] == "ok"
    state, text = judge_stall(_result(shape=None), 4, "spin")
    assert state == "finding" and "expected activity 'spinning'" in text
    state, text = judge_stall(_result(where="scheduler <- main"), 4, "spin")
    assert state == "finding" and "spin_gpu" in text
    assert judge_stall(_result(verdict="ready"), 0, "spin")[0] == "finding"
    assert judge_stall(None, 1, "spin")[0] == "error"
    assert judge_stall(_result(phase="capture", shape="quiet", where="x"), 4, "quiet")[0] == "ok"
    assert judge_stall(_result(phase="init", shape="quiet"), 4, "quiet")[0] == "finding"


def _activity(compile_bytes, compilers):
    return json.dumps({"type": "activity", "compile_bytes": compile_bytes, "compilers": compilers})


def test_compile_activity_is_the_largest_in_the_watchs_samples():
    lines = ["not json", _activity(0, 0), _activity(4096, 1), _activity(None, None), "{broken"]
    assert compile_seen(lines) == {"samples": 3, "max_compile_bytes": 4096, "max_compilers": 1}
    watch, _ = _recorded()  # the quiet control: 4 samples, none compiling
    # (its result object has an "activity" key, so it is counted among the samples: 5, as before the move)
    assert compile_seen(watch) == {"samples": 5, "max_compile_bytes": 0, "max_compilers": 0}


def test_the_compile_is_judged_against_when_it_ended():
    compiled = {"kernels": 30, "started_at": 8.0, "ended_at": 48.0, "cache_bytes": 900_000}
    seen = {"samples": 20, "max_compile_bytes": 800_000, "max_compilers": 1}
    after = judge_compile(_result(phase="capture"), 4, 66.0, compiled, seen)
    assert [s for s, _ in after] == ["ok", "ok", "ok"]
    assert "18.0 s after the last compile" in after[-1][1]
    during = judge_compile(_result(phase="capture"), 4, 30.0, compiled, seen)
    assert during[0][0] == "finding" and "30.0 s" in during[0][1]
    unseen = judge_compile(None, 130, None, compiled, {**seen, "max_compile_bytes": 0, "max_compilers": 0})
    assert [s for s, _ in unseen] == ["ok", "finding", "finding"]
    assert judge_compile(None, 1, None, None, seen)[0][0] == "error"


def test_a_shape_sampled_by_stack_is_judged_by_its_kind_and_its_compiler_child():
    """The classify-shapes step (issue 36 item 6): prepared for a GPU host, judged here."""
    from kit.hostcheck.judge import judge_classified

    where = "spin_gpu (shapes.py:81) <- main (shapes.py:184)"
    assert judge_classified("spin", ["spinning", "spinning"], [where, where], [])[0] == "ok"
    state, line = judge_classified("spin", ["spinning", "other"], [where, where], [])
    assert state == "finding" and "expected every sample spinning" in line
    compiling = "compile (triton/compiler/compiler.py:300) <- kernel (shapes.py:120)"
    both = judge_classified("compile", ["working", "working"], [compiling] * 2, ["ptxas-blackwell"])
    assert both[0] == "ok"
    state, line = judge_classified("compile", ["working"], ["x"], [])
    assert state == "finding" and "two stack samples" in line and "compiler child" in line
