"""scripts/gpu-host-check itself, on this CPU machine: it takes its steps from kit/hostcheck/steps.toml,
runs them through `python -m kit.hostcheck`, keeps to its budget and writes summary.txt. (The steps'
GPU results come only from a lent GPU host: docs/gpu-host-check.md, docs/evidence/.)"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "scripts" / "gpu-host-check"


@pytest.fixture
def run(tmp_path):
    """Run the bash entry with OUT in tmp_path; the work folder it makes in /tmp is removed after."""
    before = set(glob.glob("/tmp/gpu-host-check.*"))

    def go(steps: str, budget: int, *args: str) -> subprocess.CompletedProcess:
        env = {
            **os.environ,
            "OUT": str(tmp_path / "out"),
            "KIT_CHECK_PYTHON": sys.executable,
            "KIT_CHECK_DEPS": str(tmp_path / "deps"),
            "KIT_CHECK_WHEELS": str(tmp_path / "no-wheels"),
            "KIT_CHECK_COMMIT": "0123abc",
            "KIT_CHECK_BUDGET": str(budget),
            "KIT_CHECK_STEPS": steps,
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        }
        return subprocess.run(
            ["bash", str(RUNNER), *args], capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path
        )

    yield go
    for path in set(glob.glob("/tmp/gpu-host-check.*")) - before:
        shutil.rmtree(path, ignore_errors=True)


def test_a_spent_budget_skips_each_step_and_says_so(run, tmp_path):
    done = run("import,env", 10)
    assert done.returncode == 0, done.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text().splitlines()
    assert summary[:2] == [
        "gpu-host-check: 2 steps: 0 ok, 0 finding, 2 error",
        "commit: 0123abc (KIT_CHECK_COMMIT)",
    ]
    assert summary[3] == "import       error    skipped: the 10 s budget is spent  [skipped]"
    assert summary[4].startswith("env          error    skipped: the 10 s budget is spent")


def test_the_chosen_steps_run_in_the_tables_order_through_the_package(run, tmp_path):
    """wheels (none carried here: an error, the run goes on) and import, asked for in the other order."""
    done = run("import,no-such-step,wheels", 420)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    summary = (out / "summary.txt").read_text().splitlines()
    assert summary[0] == "gpu-host-check: 2 steps: 1 ok, 0 finding, 1 error"
    assert summary[3].startswith(f"wheels       error    no wheels in {tmp_path / 'no-wheels'}")
    assert summary[4].startswith("import       ok       python3 -m kit --help works")
    log = (out / "log.txt").read_text()
    assert log.index("===== wheels (limit 60 s") < log.index("===== import (limit 30 s")
    assert {p.name for p in out.iterdir()} == {"summary.txt", "commit.txt", "log.txt"}


def test_no_known_step_is_an_error_not_an_empty_pass(run, tmp_path):
    done = run("no-such-step", 420)
    assert done.returncode == 1
    assert "no step to run" in done.stderr
    assert "no step to run" in (tmp_path / "out" / "summary.txt").read_text()


def test_help_prints_the_header(run):
    done = run("", 10, "--help")
    assert (
        done.returncode == 0
        and "KIT_CHECK_STEPS" in done.stdout
        and "kit/hostcheck/steps.toml" in done.stdout
    )
    assert not done.stdout.startswith("#!")
