"""scripts/bootstrap's long steps say they are alive: a heartbeat with time and last output line every
10 s, a done line with the time, and on failure the log's tail (the function, run as bootstrap does)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bootstrap"


def _quietly(command: str) -> subprocess.CompletedProcess:
    text = SCRIPT.read_text()
    functions = text[text.index("say() {") : text.index("# --- 1.")]
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{functions}\n{command}"],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
def test_a_quiet_step_prints_a_heartbeat_with_its_last_line_then_its_time():
    done = _quietly('quietly "waiting on a slow step" bash -c "echo first line; sleep 12; echo second"')
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    assert lines[0] == "bootstrap: waiting on a slow step ..."
    beats = [line for line in lines if line.startswith("bootstrap:   still waiting on a slow step (1")]
    assert beats and all(line.endswith(": first line") for line in beats)
    assert lines[-1].startswith("bootstrap:   waiting on a slow step: done in 1")


def test_a_failing_step_shows_its_log_tail_and_stops():
    done = _quietly('quietly "a failing step" bash -c "echo what went wrong; exit 7"; echo not reached')
    assert done.returncode == 1
    assert "a failing step failed (exit 7)" in done.stderr and "what went wrong" in done.stderr
    assert "not reached" not in done.stdout
