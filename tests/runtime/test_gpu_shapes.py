"""Issue 27 item 9's GPU host steps (scripts/gpu_shape_steps.py, scripts/gpu_shape_rehearsal.py).

On CPU: the rehearsal's lines are SGLang 0.5.23's and read as init / capture begun; the judging of
the watch's output; and the quiet control (watch-quiet) end to end through the real runner on a plain
process: kit watch --pid names it HUNG in capture and leaves it alive. On a GPU (`gpu`): the spin and
the cold Triton compile.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kit.logs import analyze_text

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(ROOT / "scripts"))
shapes = importlib.import_module("gpu_shape_rehearsal")
steps = importlib.import_module("gpu_shape_steps")
hang = importlib.import_module("gpu_hang_rehearsal")


def _texts(path: Path) -> set[str]:
    return {line.split("] ", 1)[1] for line in path.read_text().splitlines() if line.startswith("[20")}


def _log(*texts: str, now: float = 1_780_000_000.0) -> str:
    lines = [hang.stamp(now=now) + t for t in hang.LAUNCHER_LINES]
    lines += [hang.stamp("TP0", now=now + 1 + i) + t for i, t in enumerate(texts)]
    return "\n".join(lines) + "\n"


def test_the_shape_rehearsal_prints_sglang_0_5_23s_own_lines():
    real = _texts(FIXTURES / "kit-logs" / "sglang-0.5.23-cpu-tiny-tp2-ready.log")
    assert set(shapes.TO_MEMORY_POOL) <= real
    # 0.5.23's capture line format (cuda_graph_setup.py), as the kit's parser reads it.
    capture = analyze_text(_log(hang.INIT_BEGIN, *shapes.TO_MEMORY_POOL, shapes.CAPTURE_BEGIN))
    assert (capture.outcome, capture.last_milestone, capture.phase) == ("hung", "capture.begin", "capture")
    spin = analyze_text(_log(hang.INIT_BEGIN))
    assert (spin.last_milestone, spin.phase) == ("init.begin", "init")


def _result(verdict="hung", phase="init", shape="spinning", where="spin_gpu <- scheduler <- main"):
    return {
        "type": "result",
        "verdict": verdict,
        "phase": phase,
        "activity": {"shape": shape, "cpu_cores": 1.0, "gpu_util": [100]},
        "stacks": [{"rank": "TP0", "kind": "other", "where": where}],
    }


def test_the_spin_is_judged_by_verdict_phase_shape_and_stack():
    assert steps.judge_stall(_result(), 4, "spin")[0] == "ok"
    state, text = steps.judge_stall(_result(shape=None), 4, "spin")
    assert state == "finding" and "expected activity 'spinning'" in text
    state, text = steps.judge_stall(_result(where="scheduler <- main"), 4, "spin")
    assert state == "finding" and "spin_gpu" in text
    assert steps.judge_stall(_result(verdict="ready"), 0, "spin")[0] == "finding"
    assert steps.judge_stall(None, 1, "spin")[0] == "error"
    assert steps.judge_stall(_result(phase="capture", shape="quiet", where="x"), 4, "quiet")[0] == "ok"
    assert steps.judge_stall(_result(phase="init", shape="quiet"), 4, "quiet")[0] == "finding"


def _activity(compile_bytes, compilers):
    return json.dumps({"type": "activity", "compile_bytes": compile_bytes, "compilers": compilers})


def test_compile_activity_is_the_largest_in_the_watchs_samples():
    lines = ["not json", _activity(0, 0), _activity(4096, 1), _activity(None, None), "{broken"]
    assert steps.compile_seen(lines) == {"samples": 3, "max_compile_bytes": 4096, "max_compilers": 1}


def test_the_compile_is_judged_against_when_it_ended():
    compiled = {"kernels": 30, "started_at": 8.0, "ended_at": 48.0, "cache_bytes": 900_000}
    seen = {"samples": 20, "max_compile_bytes": 800_000, "max_compilers": 1}
    after = steps.judge_compile(_result(phase="capture"), 4, 66.0, compiled, seen)
    assert [s for s, _ in after] == ["ok", "ok", "ok"]
    assert "18.0 s after the last compile" in after[-1][1]
    during = steps.judge_compile(_result(phase="capture"), 4, 30.0, compiled, seen)
    assert during[0][0] == "finding" and "30.0 s" in during[0][1]
    unseen = steps.judge_compile(
        None, 130, None, compiled, {**seen, "max_compile_bytes": 0, "max_compilers": 0}
    )
    assert [s for s, _ in unseen] == ["ok", "finding", "finding"]
    assert steps.judge_compile(None, 1, None, None, seen)[0][0] == "error"


def test_the_quiet_control_on_a_plain_process_is_hung_in_capture_and_left_alive(tmp_path):
    """watch-quiet through scripts/gpu_host_check.py, as the runner calls it (py-spy from the venv)."""
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KIT_CACHE_DIR": str(work / "kit-cache")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    argv = [sys.executable, str(ROOT / "scripts" / "gpu_host_check.py"), "watch-quiet"]
    argv += ["--out", str(out), "--work", str(work), "--capture-stall", "6", "--watch-limit", "60"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    statuses = (work / "status" / "watch-quiet").read_text().splitlines()
    assert statuses[0].startswith("ok\tquiet: HUNG in capture exit 4"), (statuses, done.stdout[-2000:])
    assert statuses[1].startswith("ok\tquiet: the watched tree was alive after the verdict")
    meta = [json.loads(x) for x in (out / "shapes.jsonl").read_text().splitlines() if '"gpu-host-check"' in x]
    assert meta[0]["killed_by_check"] is True
    assert [p["phase"] for p in meta[0]["rehearsal_phases"]] == ["capture-begin", "quiet"]


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton (ships with CUDA torch)")
def test_cold_triton_compiles_in_capture_hold_the_verdict_off_until_they_stop(tmp_path):
    """watch-compile without a GPU: the same kernels compiled ahead of time for sm_90 (real Triton,
    real ptxas, real cache writes) while the log stays quiet; then HUNG in capture."""
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KIT_CACHE_DIR": str(work / "kit-cache")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    argv = [sys.executable, str(ROOT / "scripts" / "gpu_host_check.py"), "watch-compile"]
    argv += ["--out", str(out), "--work", str(work), "--capture-stall", "8", "--compile-seconds", "20"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=150, env=env)
    statuses = (work / "status" / "watch-compile").read_text().splitlines()
    assert all(line.startswith("ok\t") for line in statuses), (statuses, done.stdout[-2000:])
    assert "no verdict while compiling" in statuses[0] and "HUNG in capture exit 4" in statuses[2]


# -- on a GPU ----------------------------------------------------------------------------------------


def _gpu_step(name: str, tmp_path: Path, *extra: str) -> list[str]:
    python = os.environ.get("KIT_TORCH_PYTHON", sys.executable)
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    if not shutil.which(python) or subprocess.run([python, "-c", probe], timeout=120).returncode != 0:
        pytest.skip("no Python with CUDA torch here (set KIT_TORCH_PYTHON to one)")
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    argv = [python, str(ROOT / "scripts" / "gpu_host_check.py"), name, "--out", str(out), "--work", str(work)]
    subprocess.run([*argv, *extra], timeout=200, env=env)
    return (work / "status" / name).read_text().splitlines()


@pytest.mark.gpu
def test_a_spinning_gpu_rank_is_hung_in_init_spinning_with_its_stack_in_the_spin(tmp_path):
    lines = _gpu_step("watch-spin", tmp_path, "--stall", "20", "--watch-limit", "55")
    assert all(line.startswith("ok\t") for line in lines), lines


@pytest.mark.gpu
def test_a_cold_triton_compile_in_capture_is_not_hung_while_it_compiles(tmp_path):
    lines = _gpu_step("watch-compile", tmp_path, "--capture-stall", "15", "--compile-seconds", "40")
    assert all(line.startswith("ok\t") for line in lines), lines


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton (ships with CUDA torch)")
def test_the_compile_shapes_kernels_compile_for_sm_90_without_a_gpu(tmp_path, monkeypatch):
    """Triton's own compiler and ptxas, for the H200's sm_90, no driver needed: the kernels are sound
    and each (kernel, SCALE) is a new cubin in the cache, as the watch-compile step relies on."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {"x": "*fp32", "y": "*fp32", "n": "i32", "SCALE": "constexpr", "BLOCK": "constexpr"}
    cubins = set()
    for kernel in shapes.KERNELS:
        for scale in (1, 2):
            source = ASTSource(fn=kernel, signature=signature, constexprs={"SCALE": scale, "BLOCK": 1024})
            cubins.add(triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["cubin"])
    assert len(cubins) == 2 * len(shapes.KERNELS)
    assert sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file()) > 6 * 4096
