"""The conformance matrix's CI subset, against the releases' own parsers (slow: check venvs).

One release per dialect and the groups holding every cell that ever disagreed (kit/check/matrix.toml
[ci]); the full matrix is `scripts/conformance` and docs/conformance.md. The first run creates the
check venvs under the kit's cache (a shared base, then ~0.2 GB per release); the time is printed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.check.conformance import load_matrix, run_matrix
from kit.dialects import DIALECTS_DIR

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_ci_subset_has_no_disagreement(capsys):
    matrix = load_matrix()
    started = time.monotonic()
    report = run_matrix(releases=matrix.ci.releases, keys=matrix.ci.cells, jobs=2)
    seconds = time.monotonic() - started
    created = sum(report.setup_seconds.values())
    n = report.counts()
    with capsys.disabled():
        print(
            f"\nconformance CI subset: {report.ran} cells on {len(report.releases)} releases "
            f"({', '.join(report.releases)}) in {seconds:.0f} s, "
            f"of which {created:.0f} s creating check venvs; {n['agree']} agree, "
            f"{n['unverified']} unverified, {n['not run']} not run, "
            f"{len(report.disagreements)} disagreements"
        )
    assert report.ran >= len(matrix.ci.cells) * len(matrix.ci.releases)
    assert not report.disagreements, "\n".join(
        f"{o.release} {o.cell.key}: {o.detail}" for o in report.disagreements
    )
    # Every CI cell's load stage runs here: a 'not run' means the driver lost the attention registry.
    assert not report.having("not run"), "\n".join(
        f"{o.release} {o.cell.key}: {o.detail}" for o in report.having("not run")
    )
    # Silence about an old variable is never counted as agreement.
    assert all(o.status != "agree" or o.mark != "silent" for o in report.outcomes)


PLANTED = """
[[rules]]
id = "planted"
severity = "error"
when = { device = "cuda", tp = 2 }
message = "a rule SGLang does not have"
fix = "none"
source = "tests/conformance: planted"
rejects = "this is not what SGLang says"
"""


@pytest.mark.slow
def test_a_planted_disagreement_fails_the_run(tmp_path):
    dialects = tmp_path / "dialects"
    shutil.copytree(DIALECTS_DIR, dialects, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    newest = dialects / "sglang-0.5.21.toml"
    # [[rules]] in a file that extends another replaces the parent's list, so keep the parent's rules
    # by planting into the file that owns them when the newest one has none of its own.
    owner = newest if "[[rules]]" in newest.read_text() else dialects / "sglang-0.5.16.toml"
    owner.write_text(owner.read_text() + PLANTED)
    env = {**os.environ, "KIT_DIALECTS_DIR": str(dialects)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kit.check.conformance_main",
            "--release",
            "0.5.23",
            "--group",
            "tp",
            "--out",
            "-",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=900,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "kit rule planted fires; SGLang accepts" in done.stderr
    assert "disagreements: **2**" in done.stdout  # qwen-base and qwen-mtp at tp=2
    assert "| `qwen-base tp=2` | **≠** kit refuses (planted) |" in done.stdout
