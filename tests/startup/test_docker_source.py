"""What the watcher reads from a real container: '\\r' progress live through the attach stream, and a
container that started before the watch keeps its real phase times (the engine's log timestamps).

Faults come from the rehearsal image's test-only switch: slow-load with busy=0 sleeps (no CPU, no
reads), and with progress=P it redraws a tqdm-style bar with '\\r' every P seconds and no newline.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kit.launch import resolve

pytestmark = [pytest.mark.docker, pytest.mark.slow]
KIT = [sys.executable, "-m", "kit"]


@pytest.fixture(autouse=True)
def _rehearsal_image(built_image):
    spec = resolve("tiny")
    built_image(spec.image_ref, spec.image)


def kit_json(*args: str, timeout: float = 600) -> tuple[int, dict]:
    proc = subprocess.run([*KIT, *args, "--json"], capture_output=True, text=True, timeout=timeout)
    results = [json.loads(line) for line in proc.stdout.splitlines() if '"type":"result"' in line]
    assert results, f"no result: {proc.stdout[-1500:]} {proc.stderr[-1500:]}"
    return proc.returncode, results[-1]


def test_carriage_return_progress_alone_keeps_a_quiet_load_alive(new_servers):
    """30 s of loading with no CPU, no reads and no newline, under an 8 s load window: only the
    '\\r' redraws (every 2 s) show it is alive. Split on '\\n' alone, this was HUNG after 8 s."""
    code, result = kit_json(
        "up", "tiny", "--fault", "slow-load:seconds=30,busy=0,progress=2", "--stall", "load=8"
    )
    assert code == 0, result
    load = [s for s in result["timeline"] if s["phase"] == "load" and s["rank"] == "TP0"]
    assert load and load[0]["elapsed_s"] >= 30
    assert not new_servers()


def test_the_same_load_without_output_is_hung_in_load(new_servers):
    code, result = kit_json("up", "tiny", "--fault", "slow-load:seconds=120,busy=0", "--stall", "load=10")
    assert code == 4, result
    assert (result["verdict"], result["phase"]) == ("hung", "load")
    assert 10 <= result["quiet_for_s"] <= 10 + 5
    assert not new_servers()


def test_watching_a_container_that_started_earlier_keeps_its_real_phase_times(new_servers):
    code, first = kit_json("up", "tiny", "--keep", "--no-first-token")
    assert code == 0, first
    name = first["container"]
    try:
        code, watched = kit_json("watch", name)
        assert code == 0, watched
        # The watch began after READY; its times come from the log's own timestamps.
        assert watched["startup_s"] == pytest.approx(first["startup_s"], abs=3)
        inits = [s for s in watched["timeline"] if s["phase"] == "init" and s["rank"] == "TP0"]
        assert inits and inits[0]["start_s"] > 1  # after the launch stage, not at the watch's start
    finally:
        subprocess.run([*KIT, "down", name], capture_output=True, timeout=120)
    assert not new_servers()


def test_kit_watch_follows_a_restart_policy_and_judges_the_last_attempt(new_servers):
    """A real engine restarting a crashing server in place (restart policy on-failure): the watch
    does not stop at the first crash; it follows the next run of the same container and judges
    attempt 2, counting attempt 1. The engine restarts it at all only because the kit runs an init
    as PID 1: without one a crashed SGLang exits 0 (its self-SIGKILL is ignored by PID 1)."""
    from kit.startup.server import start_server

    server = start_server(resolve("tiny"), fault="crash-load")
    server.container.update(restart_policy={"Name": "on-failure", "MaximumRetryCount": 5})
    try:
        code, result = kit_json("watch", server.container.name, "--attempts", "2")
        assert code == 1, result
        assert (result["verdict"], result["phase"], result["attempt"]) == ("crashed", "load", 2), result
        assert result["earlier_attempts"] == ["CRASHED in load"]
        assert result["attempts"] == "attempt 2 of 2; attempt 1 CRASHED in load"
    finally:
        server.container.remove(force=True)
    assert not new_servers()
