"""The in-image rank script, run on this machine with a CPU torch: the same code the container runs.

It needs a Python with torch; the kit's own venv has none, so these tests use $KIT_TORCH_PYTHON, or
the `kit check` venv for the rehearsal's SGLang (CPU torch), which the session fixture builds where it
is missing: they run, whatever ran before them (the docker tests run the script inside the rehearsal
image as well). The script runs from a folder holding
it and sglang_groups.py, as in the container. That venv holds the sglang wheel without the packages
its distributed code imports, so its setup says why SGLang's set-up could not run and the groups are
plain torch.distributed: the path an image without a usable sglang takes.
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

from kit.pivot.graph_step import CPU_SKIP
from kit.pivot.preflight import RANKS_SCRIPT
from kit.pivot.preflight_container import SGLANG_GROUPS
from kit.pivot.steps import STEPS, PreflightRun, device_plan, step_rows

ROOT = Path(__file__).resolve().parents[2]
REHEARSAL = ROOT / "kit" / "rehearsal"


@pytest.fixture(scope="module")
def torch_python(check_venv_python) -> str:
    from kit.launch import resolve_full

    python = os.environ.get("KIT_TORCH_PYTHON") or check_venv_python(
        resolve_full("tiny").manifest.pins.sglang
    )
    done = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True)
    assert done.returncode == 0, f"{python} has no torch: {done.stderr[-500:]}"
    return python


def request(tmp_path: Path, **extra) -> Path:
    """The request and both in-image files in TMP_PATH, as the container has them."""
    for script in (RANKS_SCRIPT, SGLANG_GROUPS):
        (tmp_path / script.name).write_bytes(script.read_bytes())
    body = {
        "world_size": 2,
        "device": "cpu",
        "backend": "gloo",
        "launch_argv": ["--model-path", "/nowhere", "--device", "cpu", "--tp-size", "2"],
        "server_args": ["disable_custom_all_reduce"],
        "env_sources": {"NCCL_DEBUG": "kit"},
        "sweep": {"min_bytes": 8, "max_bytes": 4096, "factor": 8, "iters": 2, "warmup": 1},
        "graph": {"skip": CPU_SKIP},
        "p2p_bytes": 4096,
        "run_timeout_s": 60,
        **extra,
    }
    path = tmp_path / "request.json"
    path.write_text(json.dumps(body))
    return path


# Imports the fault switch the way the rehearsal image's .pth does, then runs the rank script (its own
# folder first on sys.path, as `python ranks.py` has it).
WITH_FAULTS = (
    "import os, sys, runpy; sys.path.insert(0, {rehearsal!r}); import kit_faults; "
    "sys.path.insert(0, os.path.dirname({script!r})); "
    "sys.argv = [{script!r}, {request!r}]; runpy.run_path({script!r}, run_name='__main__')"
)


def start(python: str, req: Path, env: dict[str, str], output: Path) -> subprocess.Popen:
    script = req.parent / RANKS_SCRIPT.name
    code = WITH_FAULTS.format(rehearsal=str(REHEARSAL), script=str(script), request=str(req))
    return subprocess.Popen(
        [python, "-c", code],
        stdout=output.open("w"),
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


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
        if not (isinstance(node, ast.ImportFrom) and node.module == "__future__")
    }


def test_the_in_image_files_import_only_the_standard_library_torch_and_each_other():
    assert _imports(RANKS_SCRIPT) - set(sys.stdlib_module_names) == {"torch", "setproctitle", "sglang_groups"}
    # sglang itself is imported by name at run time (importlib), so a missing one is reported, not fatal
    assert _imports(SGLANG_GROUPS) - set(sys.stdlib_module_names) == {"torch"}


@pytest.mark.slow
def test_two_gloo_ranks_pass_every_step_with_checked_values_pairs_and_a_sweep(tmp_path, torch_python):
    python = torch_python
    shared_before = set(Path("/dev/shm").glob("kit-preflight-*"))
    req = request(tmp_path)
    done = subprocess.run(
        [python, str(tmp_path / RANKS_SCRIPT.name), str(req)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NCCL_DEBUG": "INFO"},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run = read_run(done.stdout)
    assert run.verdict(1.0).verdict == "ok"
    rows = {r.step: r for r in step_rows(run, None)}
    assert {step: r.status for step, r in rows.items() if r.status != "ok"} == {"graph": "skipped"}
    assert rows["graph"].detail == CPU_SKIP  # the in-image step on CPU: skipped with the kit's reason
    init = run.state["init"].details[0]
    settings = run.setup["settings"]
    assert settings["NCCL_DEBUG"] == {"value": "INFO", "source": "kit"}
    if run.setup["error"]:  # SGLang's code could not run here: said, and plain torch groups instead
        assert init["groups"] == "torch.distributed" and run.setup["sglang"] == "0.5.23"
        # what its import set before it failed is named as such; its own NCCL settings never ran
        partial = [e["by"] for e in settings.values() if e["source"] == "sglang"]
        assert set(partial) <= {"sglang, before it failed"}
        assert "NCCL_CUMEM_ENABLE" not in settings
    else:
        assert init["groups"] == "sglang" and settings["NCCL_CUMEM_ENABLE"]["source"] == "sglang"
    pairs = {(p["src"], p["dst"]) for d in run.state["p2p"].details.values() for p in d["pairs"]}
    assert pairs == {(0, 1), (1, 0)}
    assert [row["bytes"] for row in run.sweep] == [8, 64, 512, 4096]
    assert all(row["busbw_gbps"] == row["algbw_gbps"] for row in run.sweep)  # 2(n-1)/n = 1 for n = 2
    assert set(Path("/dev/shm").glob("kit-preflight-*")) == shared_before  # each owner unlinked its buffer


@pytest.mark.slow
def test_the_p2p_fault_hangs_the_first_all_reduce_unless_nccl_p2p_is_disabled(tmp_path, torch_python):
    python = torch_python
    req = request(tmp_path, until="allreduce")
    output = tmp_path / "out.txt"
    cured = start(python, req, {"KIT_FAULT": "hang-p2p", "NCCL_P2P_DISABLE": "1"}, output)
    cured.wait(timeout=300)
    assert cured.returncode == 0, output.read_text()[-2000:]
    assert read_run(output.read_text()).verdict(1.0).verdict == "ok"

    hung = start(python, req, {"KIT_FAULT": "hang-p2p"}, output)
    try:
        deadline = time.monotonic() + 240
        while len(read_run(output.read_text()).state["init"].begun) < 2:  # setup imports sglang first
            assert hung.poll() is None and time.monotonic() < deadline, output.read_text()[-2000:]
            time.sleep(0.5)
        time.sleep(8)  # init and the first all_reduce take well under a second; the hung one never ends
        assert hung.poll() is None
    finally:
        os.killpg(hung.pid, signal.SIGKILL)
    hung.wait(timeout=30)
    run = read_run(output.read_text())
    if run.setup["error"]:  # plain torch groups: no collective in init, the first is the kit's own
        assert run.complete("init") and not run.complete("allreduce")
        assert set(run.state["allreduce"].begun) == {0, 1}
    else:  # SGLang's init runs collectives of its own, where the real hang sits
        assert not run.complete("init") and set(run.state["init"].begun) == {0, 1}
