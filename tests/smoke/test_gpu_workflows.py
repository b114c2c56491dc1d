"""The two GPU workflows test what they claim: the quick one selects every gpu-marked test of the
tree (collected with its own pytest arguments and compared with every test's markers) and runs the
tiny smoke again at every larger TP the runner has GPUs for (its shell run here with stand-in
nvidia-smi and pytest), the nightly one every full_model test, one job per target; both fail
without a GPU and when they tested nothing, upload bundles on failure; the nightly jobs' timeouts
are the catalog's deadlines, computed."""

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
    command = run.replace("\\\n", " ").split(".venv/bin/pytest", 1)[1].split("\n", 1)[0]
    words = shlex.split(command.split(" || ", 1)[0])  # the TP loop's `|| status=1` is shell, not pytest's
    words = [w for w in words if not w.startswith(("--junitxml", "-r"))]
    return [os.path.expandvars(w).replace("$tp", "2") for w in words]


def steps(workflow: dict, job: str) -> list[dict]:
    return workflow["jobs"][job]["steps"]


def pytest_step(workflow: dict, job: str) -> dict:
    """The job's pytest step over every test of its kind (the quick job's TP loop is TP_STEP)."""
    [step] = [s for s in steps(workflow, job) if ".venv/bin/pytest" in s.get("run", "") and s is not TP_STEP]
    return step


def named(workflow: dict, job: str, prefix: str) -> dict:
    [step] = [s for s in steps(workflow, job) if s.get("name", "").startswith(prefix)]
    return step


TP_STEP = named(QUICK, "quick", "Tiny smoke at TP")


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
    runs["quick-tp"] = pytest_args(TP_STEP["run"])
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
    # At TP 2 and 4: the tiny production smoke, both targets, and nothing else.
    tiny = {t for t in gpu if t.startswith("tests/smoke/test_smoke.py") and "[qwen-tiny" in t}
    assert tiny and set(found["quick-tp"]) == tiny, sorted(tiny ^ set(found["quick-tp"]))[:10]
    assert not full & set(found["quick"])
    nightly = set()
    for job, targets in TARGETS_OF.items():
        chosen = set(found[job])
        assert chosen, f"{job} selects nothing"
        assert all(any(f"[{t}" in test for t in targets) for test in chosen), sorted(chosen)[:5]
        nightly |= chosen
    assert nightly == full, sorted(full ^ nightly)[:10]


# Cold starts per night of each job's target, the smoke's own included (sglang#28431: MTP on Qwen3.5
# failed about one start in five).
STARTS_OF = {"qwen-base": 1, "qwen-mtp": 3}


def test_the_mtp_job_starts_its_server_cold_three_times():
    runs = [s.get("run", "") for s in steps(NIGHTLY, "qwen-mtp")]
    [loop] = [run for run in runs if "kit up qwen-mtp" in run]
    assert "for start in 1 2; do" in loop  # two `kit up`, then the smoke's start
    assert runs.index(loop) < next(i for i, run in enumerate(runs) if "pytest tests/smoke" in run)
    assert not any("kit up" in run for run in (s.get("run", "") for s in steps(NIGHTLY, "qwen-base")))


def test_the_nightly_jobs_timeouts_are_the_catalogs_deadlines():
    for job, targets in TARGETS_OF.items():
        minutes = budget.job_minutes([resolve(t) for t in targets], starts=STARTS_OF[job])
        assert NIGHTLY["jobs"][job]["timeout-minutes"] == minutes, (
            f"{job}: python -m kit.testing.budget {targets} --starts {STARTS_OF[job]}"
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
        assert check["if"] == "always()" and report in check["run"]
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


def _shell(script: str, tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """A step's script under GitHub's bash options, with the stand-ins in tmp_path/bin first on PATH."""
    path = f"{tmp_path / 'bin'}:{os.environ['PATH']}"
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=tmp_path, env={**os.environ, **env, "PATH": path}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _stand_in(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


@pytest.mark.parametrize(("gpus", "tps"), [(1, "1"), (2, "1 2"), (3, "1 2"), (4, "1 2 4"), (8, "1 2 4")])
def test_the_quick_job_runs_the_tiny_smoke_at_every_tp_the_runners_gpus_allow(tmp_path, gpus, tps):
    # nvidia-smi -L prints one 'GPU i: ...' line per device; topo and the bare call print a table.
    lines = "".join(f"GPU {i}: NVIDIA RTX PRO 6000 (UUID: GPU-{i})\\n" for i in range(gpus))
    _stand_in(tmp_path / "bin" / "nvidia-smi", f'[ "$1" = -L ] && printf "{lines}"; exit 0\n')
    github_env = tmp_path / "github_env"
    first = named(QUICK, "quick", "GPUs and topology")
    done = _shell(first["run"], tmp_path, {"GITHUB_ENV": str(github_env)})
    assert done.returncode == 0, done.stderr
    env = dict(line.split("=", 1) for line in github_env.read_text().splitlines())
    assert env == {"GPUS": str(gpus), "TPS": tps, "TP_MAX": tps.split()[-1]}

    # The TP step with a stand-in pytest that records its arguments: once per TP above 1.
    _stand_in(tmp_path / ".venv" / "bin" / "pytest", 'echo "$*" >> "$KIT_RUNS"\n')
    runs = tmp_path / "runs"
    done = _shell(TP_STEP["run"], tmp_path, {**env, "KIT_RUNS": str(runs)})
    assert done.returncode == 0, done.stderr
    called = runs.read_text().splitlines() if runs.exists() else []
    assert [c.split("--kit-set tp=", 1)[1].split()[0] for c in called] == [t for t in tps.split() if t != "1"]
    assert all(c.startswith("tests/smoke/test_smoke.py -m gpu --kit-require-gpu") for c in called)
    assert all(
        f"--junitxml=reports/gpu-quick-tp{t}.xml" in c for c, t in zip(called, tps.split()[1:], strict=True)
    )


def test_a_failing_tp_fails_the_step_and_a_missing_report_fails_the_check(tmp_path):
    _stand_in(tmp_path / ".venv" / "bin" / "pytest", 'case "$*" in *tp=2*) exit 1;; esac\n')
    done = _shell(TP_STEP["run"], tmp_path, {"TPS": "1 2 4"})
    assert done.returncode == 1  # TP 2 failed; TP 4 still ran (the loop goes on)
    check = next(s for s in steps(QUICK, "quick") if "kit.testing.junit" in s.get("run", ""))
    # python -m kit.testing.junit REPORT: here, "tested something" = the report exists.
    _stand_in(
        tmp_path / ".venv" / "bin" / "python",
        '[ -e "$3" ] && echo "ok $3" >> "$KIT_RUNS" || echo "no $3" >> "$KIT_RUNS"; [ -e "$3" ]\n',
    )
    (tmp_path / "reports").mkdir(exist_ok=True)
    (tmp_path / "reports" / "gpu-quick.xml").write_text("<testsuites/>")
    runs = tmp_path / "runs"
    done = _shell(check["run"], tmp_path, {"TPS": "1 2", "KIT_RUNS": str(runs)})
    assert done.returncode == 1  # reports/gpu-quick-tp2.xml is missing
    assert runs.read_text().splitlines() == ["ok reports/gpu-quick.xml", "no reports/gpu-quick-tp2.xml"]
