"""The two GPU workflows test what they claim: the quick one selects every gpu-marked test of the
tree (collected with its own pytest arguments and compared with every test's markers), the nightly
one every full_model test, one job per target; both fail without a GPU and when they tested nothing,
upload bundles on failure; the nightly jobs' timeouts are the catalog's deadlines, computed."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kit.launch import resolve
from kit.testing import budget, junit

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
QUICK = yaml.safe_load((WORKFLOWS / "gpu-quick.yml").read_text(encoding="utf-8"))
NIGHTLY = yaml.safe_load((WORKFLOWS / "gpu-nightly.yml").read_text(encoding="utf-8"))
TARGETS_OF = {"qwen-base": ["qwen-base"], "qwen-mtp": ["qwen-mtp"]}  # nightly job -> the targets it smokes

# Written into the inner pytest: the selected tests and their markers, after -m/-k deselection.
DUMP = """
import json, os

def pytest_collection_finish(session):
    rows = {i.nodeid: sorted({m.name for m in i.iter_markers()}) for i in session.items}
    with open(os.environ["KIT_COLLECTED"], "w") as out:
        json.dump(rows, out)
"""


def pytest_args(run: str) -> list[str]:
    """The arguments of the `.venv/bin/pytest` command in a step, minus report-only ones."""
    words = shlex.split(run.replace("\\\n", " ").split(".venv/bin/pytest", 1)[1].split("\n", 1)[0])
    words = [w for w in words if not w.startswith(("--junitxml", "-r"))]
    return [os.path.expandvars(w).replace("$TP", "1") for w in words]


def steps(workflow: dict, job: str) -> list[dict]:
    return workflow["jobs"][job]["steps"]


def pytest_step(workflow: dict, job: str) -> dict:
    [step] = [s for s in steps(workflow, job) if ".venv/bin/pytest" in s.get("run", "")]
    return step


def collect(tmp_path: Path, name: str, args: list[str]) -> subprocess.Popen:
    (tmp_path / "kit_collect_dump.py").write_text(DUMP)
    env = {**os.environ, "KIT_COLLECTED": str(tmp_path / f"{name}.json"), "PYTHONPATH": str(tmp_path)}
    env.pop("KIT_REQUIRE_GPU", None)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "--collect-only",
        "-q",
        "-p",
        "kit_collect_dump",
        "-p",
        "no:cacheprovider",
    ]
    return subprocess.Popen(
        [*cmd, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def collected(tmp_path: Path, runs: dict[str, list[str]]) -> dict[str, dict[str, list[str]]]:
    """Every named pytest selection at once (each a fresh process, as the workflow runs it)."""
    procs = {name: collect(tmp_path, name, args) for name, args in runs.items()}
    found = {}
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode in (0, 5), out.decode()[-2000:]  # 5: nothing selected (checked below)
        found[name] = json.loads((tmp_path / f"{name}.json").read_text())
    return found


@pytest.mark.slow
def test_the_workflows_select_every_gpu_test_of_the_tree(tmp_path):
    runs = {"all": [], "quick": pytest_args(pytest_step(QUICK, "quick")["run"])}
    runs |= {job: pytest_args(pytest_step(NIGHTLY, job)["run"]) for job in TARGETS_OF}
    found = collected(tmp_path, runs)
    everything = found["all"]
    gpu = {test for test, marks in everything.items() if "gpu" in marks}
    full = {test for test, marks in everything.items() if "full_model" in marks}
    # The tests outside tests/smoke that no workflow ran before, and the tiny production target's smoke.
    for where in ("tests/images/test_image_gpu.py", "tests/pivot/test_gpu.py", "tests/runtime/test_nvml.py"):
        assert any(test.startswith(where) for test in gpu), where
    assert any("[qwen-tiny-mtp]" in test for test in gpu) and any("[qwen-tiny]" in test for test in gpu)

    assert set(found["quick"]) == gpu, sorted(gpu ^ set(found["quick"]))[:10]
    assert not full & set(found["quick"])
    nightly = set()
    for job, targets in TARGETS_OF.items():
        chosen = set(found[job])
        assert chosen, f"{job} selects nothing"
        assert all(any(f"[{t}" in test for t in targets) for test in chosen), sorted(chosen)[:5]
        nightly |= chosen
    assert nightly == full, sorted(full ^ nightly)[:10]


def test_the_nightly_jobs_timeouts_are_the_catalogs_deadlines():
    for job, targets in TARGETS_OF.items():
        minutes = budget.job_minutes([resolve(t) for t in targets])
        assert NIGHTLY["jobs"][job]["timeout-minutes"] == minutes, (
            f"{job}: python -m kit.testing.budget {targets}"
        )
    mtp, base = resolve("qwen-mtp"), resolve("qwen-base")
    assert budget.smoke_s(mtp) - budget.smoke_s(base) == 300  # MTP captures draft graphs too: capture 1200 s


def test_both_fail_without_a_gpu_and_when_they_tested_nothing():
    jobs = [(QUICK, "image"), (QUICK, "quick"), *((NIGHTLY, job) for job in ("image", "model", *TARGETS_OF))]
    for workflow, job in jobs:
        runs = [s.get("run", "") for s in steps(workflow, job)]
        assert runs[1].startswith("nvidia-smi"), f"{job}: nvidia-smi is not its first step"
        assert "|| true" not in runs[1].splitlines()[0]
    tested = [(QUICK, "quick"), *((NIGHTLY, job) for job in TARGETS_OF)]
    for workflow, job in tested:
        assert "--kit-require-gpu" in pytest_step(workflow, job)["run"]
        report = pytest_step(workflow, job)["run"].split("--junitxml=", 1)[1].split()[0]
        [check] = [s for s in steps(workflow, job) if "kit.testing.junit" in s.get("run", "")]
        assert check["if"] == "always()" and check["run"].endswith(report)
        [bundles] = [s for s in steps(workflow, job) if "bundles" in s.get("with", {}).get("path", "")]
        assert bundles["if"] == "failure()" and "~/.cache/kit/runs/" in bundles["with"]["path"]


def test_the_nightly_fetches_and_verifies_the_pinned_model_before_any_smoke():
    runs = [s.get("run", "") for s in steps(NIGHTLY, "model")]
    assert ".venv/bin/kit model fetch qwen-base" in runs and ".venv/bin/kit model verify qwen-base" in runs
    for job in TARGETS_OF:
        assert "model" in NIGHTLY["jobs"][job]["needs"]
    assert "qwen-base" in NIGHTLY["jobs"]["qwen-mtp"]["needs"]  # its greedy reference


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites>
<testsuite name="pytest" errors="{e}" failures="{f}" skipped="{s}" tests="{t}" time="1.0"></testsuite>
</testsuites>"""


def test_a_report_of_skips_or_nothing_is_a_job_that_tested_nothing(tmp_path):
    def run(text: str | None) -> int:
        path = tmp_path / "r.xml"
        path.unlink(missing_ok=True)
        if text is not None:
            path.write_text(text)
        return junit.main([str(path)])

    assert run(JUNIT.format(e=0, f=0, s=0, t=3)) == 0
    assert run(JUNIT.format(e=0, f=1, s=2, t=3)) == 0  # a failure ran (the job fails on the pytest step)
    assert run(JUNIT.format(e=0, f=0, s=3, t=3)) == 1
    assert run(JUNIT.format(e=2, f=0, s=1, t=3)) == 1
    assert run(JUNIT.format(e=0, f=0, s=0, t=0)) == 1
    assert run(None) == 1 and run("not xml") == 1
    assert (
        junit.counts(JUNIT.format(e=0, f=1, s=2, t=5)).line()
        == "5 tests: 2 passed, 1 failed, 0 errors, 2 skipped"
    )
