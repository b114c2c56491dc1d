"""The project's own code style is a test: ruff (configured in pyproject.toml) on everything we ship."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUFF = [sys.executable, "-m", "ruff"]
PATHS = ["kit", "tests", "benchmarks"]


def test_ruff_check_is_clean():
    proc = subprocess.run([*RUFF, "check", *PATHS], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_is_clean():
    proc = subprocess.run(
        [*RUFF, "format", "--check", *PATHS], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
