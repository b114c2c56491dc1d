"""The in-image rank script, run on this machine with a CPU torch: the same code the container runs.

It needs a Python with torch; the kit's own venv has none, so these tests use the `kit check` venv
for SGLang 0.5.23 (CPU torch) where it exists, or $KIT_TORCH_PYTHON, and skip otherwise (the docker
tests run the script inside the rehearsal image in any case).
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.check import venv_dir
from kit.pivot.preflight import RANKS_SCRIPT
from kit.pivot.steps import STEPS, PreflightRun, device_plan, step_rows

ROOT = Path(__file__).resolve().parents[2]
REHEARSAL = ROOT / "kit" / "rehearsal"


def torch_python() -> str:
    candidates = [os.environ.get("KIT_TORCH_PYTHON", ""), str(venv_dir("0.5.23") / "bin" / "python")]
    for python in filter(None, candidates):
        if (
            Path(python).exists()
            and subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0
        ):
            return python
    pytest.skip("no Python with torch here (set KIT_TORCH_PYTHON, or run 'kit check tiny' once)")


def request(tmp_path: Path, **extra) -> Path:
    body = {
        "world_size": 2,
        "device": "cpu",
        "backend": "gloo",
        "sweep": {"min_bytes": 8, "max_bytes": 4096, "factor": 8, "iters": 2, "warmup": 1},
        "p2p_bytes": 4096,
        "run_timeout_s": 60,
        **extra,
    }
    path = tmp_path / "request.json"
    path.write_text(json.dumps(body))
    return path


# Imports the fault switch the way the rehearsal image's .pth does, then runs the rank script.
WITH_FAULTS = (
    "import sys, runpy; sys.path.insert(0, {rehearsal!r}); import kit_faults; "
    "sys.argv = [{script!r}, {request!r}]; runpy.run_path({script!r}, run_name='__main__')"
)


def start(python: str, req: Path, env: dict[str, str]) -> subprocess.Popen:
    code = WITH_FAULTS.format(rehearsal=str(REHEARSAL), script=str(RANKS_SCRIPT), request=str(req))
    return subprocess.Popen(
        [python, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
        cwd=req.parent,
        start_new_session=True,  # the ranks are its children: one signal ends them all
    )


def read_run(output: str, world: int = 2) -> PreflightRun:
    run = PreflightRun(world, STEPS, device_plan("cpu"), 0.0)
    for line in output.splitlines():
        run.feed_line(line, 1.0)
    return run


def test_the_rank_script_imports_only_the_standard_library_and_torch():
    tree = ast.parse(RANKS_SCRIPT.read_text())
    roots = {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
        if not (isinstance(node, ast.ImportFrom) and node.module == "__future__")
    }
    assert roots - set(sys.stdlib_module_names) == {"torch", "setproctitle"}


@pytest.mark.slow
def test_two_gloo_ranks_pass_every_step_with_checked_values_pairs_and_a_sweep(tmp_path):
    python = torch_python()
    shared_before = set(Path("/dev/shm").glob("kit-preflight-*"))
    done = subprocess.run(
        [python, str(RANKS_SCRIPT), str(request(tmp_path))], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run = read_run(done.stdout)
    assert run.verdict(1.0).verdict == "ok"
    assert [r.status for r in step_rows(run, None)] == ["ok"] * 5
    pairs = {(p["src"], p["dst"]) for d in run.state["p2p"].details.values() for p in d["pairs"]}
    assert pairs == {(0, 1), (1, 0)}
    assert [row["bytes"] for row in run.sweep] == [8, 64, 512, 4096]
    assert all(row["busbw_gbps"] == row["algbw_gbps"] for row in run.sweep)  # 2(n-1)/n = 1 for n = 2
    assert set(Path("/dev/shm").glob("kit-preflight-*")) == shared_before  # each owner unlinked its buffer


@pytest.mark.slow
def test_the_p2p_fault_hangs_the_first_all_reduce_unless_nccl_p2p_is_disabled(tmp_path):
    python = torch_python()
    req = request(tmp_path, until="allreduce")
    cured = start(python, req, {"KIT_FAULT": "hang-p2p", "NCCL_P2P_DISABLE": "1"})
    out, _ = cured.communicate(timeout=120)
    assert cured.returncode == 0, out[-2000:]
    assert read_run(out).verdict(1.0).verdict == "ok"

    hung = start(python, req, {"KIT_FAULT": "hang-p2p"})
    try:
        time.sleep(8)  # init takes well under a second; the all_reduce never ends
        assert hung.poll() is None
    finally:
        os.killpg(hung.pid, signal.SIGKILL)
    out, _ = hung.communicate(timeout=30)
    run = read_run(out)
    assert run.complete("init") and not run.complete("allreduce")
    assert set(run.state["allreduce"].begun) == {0, 1}
