"""The kit never harms a start-up it watches: on the real CPU rehearsal, a start that prints a
harmless traceback during launch and another during load, then works on for longer than the old
10 s crash grace with no milestone, is READY under `kit up` and `kit watch`; a real fatal error is
still CRASHED.

The tracebacks come from the rehearsal image's test-only switch (`traceback:at=launch+load`,
kit/rehearsal/kit_faults.py), in SGLang's own shapes: a bare ModuleNotFoundError traceback from the
launcher (as SGLang's retry() prints one), then one logged with its rank's prefix through a
scheduler's logger while it opens its first weights file. Where the shared image predates the switch
a derived image carries it (tests/rehearsal_faults_image.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]
KIT = [sys.executable, "-m", "kit"]
FAULT = "traceback:at=launch+load,hold=15"
MISSING = "ModuleNotFoundError: No module named 'kit_fault_optional_kernel'"


def brief(result: dict) -> str:
    """What a failed assertion should show: the verdict, where, how quiet, on what activity."""
    keys = ("verdict", "phase", "quiet_for_s", "limit_s", "exception", "survived_errors", "activity")
    return f"{ {k: result.get(k) for k in keys} } last lines: {result.get('evidence', [])[-4:]}"


def kit_json(*args: str, env: dict[str, str], timeout: float = 600) -> tuple[int, dict]:
    proc = subprocess.run([*KIT, *args, "--json"], capture_output=True, text=True, timeout=timeout, env=env)
    results = [json.loads(line) for line in proc.stdout.splitlines() if '"type":"result"' in line]
    assert results, f"no result: {proc.stdout[-1500:]} {proc.stderr[-1500:]}"
    return proc.returncode, results[-1]


def test_kit_up_is_ready_after_harmless_tracebacks_in_launch_and_load(faults_image, new_servers):
    code, result = kit_json(
        "up", "tiny", "--image", faults_image.image, "--fault", FAULT, env=faults_image.env()
    )
    assert (code, result["verdict"]) == (0, "ready"), brief(result)
    survived = result["survived_errors"]
    assert any(line.startswith("main: ") and MISSING in line for line in survived), survived
    assert any(line.startswith("TP1: ") and MISSING in line for line in survived), survived
    # The load went on for the hold with no milestone, longer than the old crash grace.
    load = [s for s in result["timeline"] if s["phase"] == "load" and s["rank"] == "TP1"]
    assert load and load[0]["elapsed_s"] >= 12, result["timeline"]
    assert result["container_removed"] and not new_servers()


def _start(faults_image, fault: str, monkeypatch):
    from kit.launch import resolve
    from kit.startup.server import start_server

    if faults_image.project_dir is not None:
        monkeypatch.setenv("KIT_PROJECT_DIR", str(faults_image.project_dir))
    return start_server(resolve("tiny", image=faults_image.image), fault=fault)


def test_kit_watch_is_ready_after_harmless_tracebacks_in_launch_and_load(
    faults_image, new_servers, monkeypatch
):
    server = _start(faults_image, FAULT, monkeypatch)
    try:
        code, result = kit_json("watch", server.container.name, env=faults_image.env())
        assert (code, result["verdict"]) == (0, "ready"), brief(result)
        assert len([line for line in result["survived_errors"] if MISSING in line]) == 2, result
        server.container.reload()
        assert server.container.status == "running"  # a watch never removes what it watches
    finally:
        server.container.remove(force=True)
    assert not new_servers()


def test_kit_watch_still_calls_a_real_fatal_error_crashed(faults_image, new_servers, monkeypatch):
    server = _start(faults_image, "crash-load:rank=1", monkeypatch)
    try:
        code, result = kit_json("watch", server.container.name, env=faults_image.env())
        assert (code, result["verdict"], result["phase"]) == (1, "crashed", "load"), brief(result)
        assert "kit fault crash-load: rank 1 failed while loading weights" in result["exception"]
    finally:
        server.container.remove(force=True)
    assert not new_servers()
