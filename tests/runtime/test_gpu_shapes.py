"""Issue 27 item 9's GPU host steps (kit/hostcheck/shape_steps.py, kit/hostcheck/rehearsal/shapes.py).

On CPU: the quiet control (watch-quiet) end to end through scripts/gpu_host_check.py on a plain
process: kit watch --pid names it HUNG in capture and leaves it alive. On a GPU (`gpu`): the spin and
the cold Triton compile. The rehearsal's lines and the judging of the watch's output are tested
without a process in tests/hostcheck/.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kit.hostcheck.rehearsal import shapes

ROOT = Path(__file__).resolve().parents[2]


def test_the_quiet_control_on_a_plain_process_is_hung_in_capture_and_left_alive(tmp_path):
    """watch-quiet through scripts/gpu_host_check.py, the thin runner by path (py-spy from the venv)."""
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
