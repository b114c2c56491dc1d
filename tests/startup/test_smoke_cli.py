"""`kit smoke` exits as `kit up` on a start that does not reach READY: a planted init hang in the CPU
rehearsal is HUNG, exit 4 (before issue 20 it was 1, as for any failed check), and nothing is left."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from kit.errors import ExitCode
from kit.launch import resolve

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _rehearsal_image(built_image):
    spec = resolve("tiny")
    built_image(spec.image_ref, spec.image)


def test_smoke_on_a_hung_start_exits_hung_as_up_does(new_servers):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kit",
            "smoke",
            "tiny",
            "--no-faults",
            "--fault",
            "hang-init:rank=1",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == ExitCode.HUNG, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert (report["startup"], report["startup_exit_code"]) == ("hung", ExitCode.HUNG)
    assert any(not check["ok"] for check in report["checks"])  # "server ready" failed, and says HUNG
    assert new_servers() == []  # the hung server was removed


def test_sigterm_mid_smoke_exits_130_and_leaves_no_container(new_servers):
    """A CI runner cancelling a job sends SIGTERM: smoke unwinds through its cleanup as `kit up` does
    (before, the process died on the spot and its container stayed running)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kit", "smoke", "tiny", "--no-faults", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not new_servers() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)  # the smoke's own container, started by its first step
        assert new_servers(), f"smoke started no container (exit {proc.poll()})"
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, stdout[-2000:] + stderr[-2000:]
    assert "Traceback" not in stderr
    assert new_servers() == []
