"""`kit up` end to end against the real rehearsal server: verdicts, exit codes, and no container left.

Each test runs the real CLI in a subprocess (as a person or CI would) with --json, and reads the
final result object. Faults are planted with the rehearsal image's test-only switch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kit.launch import list_targets, resolve
from kit.logs.schema import validate

pytestmark = [pytest.mark.docker, pytest.mark.slow]
KIT = [sys.executable, "-m", "kit"]


@pytest.fixture(autouse=True)
def _rehearsal_image(built_image):
    spec = resolve("tiny")
    built_image(spec.image_ref, spec.image)


def run_up(*args: str, timeout: float = 400) -> tuple[int, dict, list[dict], str]:
    proc = subprocess.run(
        [*KIT, "up", "tiny", "--json", *args], capture_output=True, text=True, timeout=timeout
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    results = [line for line in lines if line.get("type") == "result"]
    assert results, f"no result line; stdout={proc.stdout[-2000:]} stderr={proc.stderr[-2000:]}"
    for line in lines:  # the documented shape (docs/schema/up-events.json, up-result.json)
        validate(line, "up-events")
    return proc.returncode, results[-1], lines, proc.stderr


def test_up_tiny_is_ready_with_startup_and_first_token_times_and_leaves_nothing(new_servers):
    code, result, lines, _ = run_up()
    assert code == 0, result
    assert result["verdict"] == "ready"
    assert result["startup_s"] > 0
    assert 0 < result["first_token_s"] < 30
    assert result["reply"]
    assert result["container_removed"] is True
    milestones = {(m["rank"], m["milestone"]) for m in lines if m.get("type") == "milestone"}
    assert {
        ("TP0", "init.begin"),
        ("TP1", "init.begin"),
        ("TP0", "init.end"),
        ("TP1", "init.end"),
    } <= milestones
    assert not new_servers()


def test_up_tiny_human_output_says_ready_with_times(new_servers):
    proc = subprocess.run([*KIT, "up", "tiny"], capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "READY tiny after" in proc.stdout
    assert "first token" in proc.stdout
    assert "removed container kit-tiny-" in proc.stdout
    assert not new_servers()


def test_planted_init_hang_is_named_within_the_stall_window_with_stacks(new_servers):
    code, result, _, _ = run_up("--fault", "hang-init:rank=1")
    window = resolve("tiny").timing.stall_windows["init"]
    assert code == 4, result
    assert result["verdict"] == "hung"
    assert result["phase"] == "init"
    # quiet_for_s: time since the last log line or activity when the verdict was given.
    assert window <= result["quiet_for_s"] <= window + 5
    assert result["waiting_ranks"] == ["TP0"]
    assert result["missing_ranks"] == ["TP1"]
    stacks = {s["rank"]: s for s in result["stacks"]}
    assert stacks["TP0"]["kind"] == "rendezvous"
    assert "init_process_group" in stacks["TP0"]["where"]
    assert stacks["TP1"]["kind"] == "planted-fault"
    folder = Path(result["diagnostics"])
    assert (folder / "stacks" / "TP0.txt").read_text().count("_create_c10d_store") == 1
    assert "Init parallel begin" in (folder / "server.log").read_text()
    assert result["container_removed"] is True
    assert not new_servers()


def test_planted_crash_in_load_is_crashed_in_load_with_the_exception(new_servers):
    code, result, _, _ = run_up("--fault", "crash-load:rank=1")
    assert code == 1, result
    assert result["verdict"] == "crashed"
    assert result["phase"] == "load"
    assert "kit fault crash-load: rank 1 failed while loading weights" in result["exception"]
    assert not new_servers()


def test_a_slow_but_alive_load_is_never_called_hung(new_servers):
    # A window shorter than tiny's own (CI time), the load 1.5 times as long: only activity keeps it alive.
    load_window = 20
    seconds = int(load_window * 1.5)
    code, result, _, _ = run_up(
        "--fault", f"slow-load:seconds={seconds}", "--stall", f"load={load_window}", timeout=600
    )
    assert code == 0, result
    assert result["verdict"] == "ready"
    load = [s for s in result["timeline"] if s["phase"] == "load" and s["rank"] == "TP0"]
    assert load and load[0]["elapsed_s"] >= seconds
    assert not new_servers()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupting_kit_up_removes_the_container(sig, new_servers):
    """Interrupted mid start-up (after its first milestone, not after a guessed sleep): exit 130,
    an 'interrupted' result, the container gone. Waits for events, not for wall-clock ceilings: on
    a loaded 2-core machine removing a container can take longer than any fixed guess."""
    proc = subprocess.Popen(
        [*KIT, "up", "tiny", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    try:
        for line in proc.stdout:  # blocks until the kit prints; ends if it exits
            lines.append(line)
            if '"type":"milestone"' in line:
                break
        assert new_servers(), f"no container of this test is running: {''.join(lines)}"
        os.kill(proc.pid, sig)
        stdout, stderr = proc.communicate()  # the kit's own removal ends it
    finally:
        if proc.poll() is None:
            proc.kill()
    stdout = "".join(lines) + stdout
    assert proc.returncode == 130, stdout + stderr
    results = [json.loads(line) for line in stdout.splitlines() if '"type":"result"' in line]
    assert results and results[-1]["verdict"] == "interrupted"
    assert results[-1]["container_removed"] is True
    assert "Traceback" not in stderr
    assert not new_servers()


def test_kit_up_started_with_sigint_ignored_can_still_be_interrupted(new_servers):
    """nohup and some CI runners start jobs with SIGINT ignored; kit up installs its own handler."""
    proc = subprocess.Popen(
        [*KIT, "up", "tiny", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if '"type":"start"' in line:
                break
        os.kill(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, "".join(lines) + stdout + stderr
    assert not new_servers()


def test_unknown_target_is_one_line_and_exit_2():
    proc = subprocess.run([*KIT, "up", "no-such-thing"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "unknown target 'no-such-thing'" in proc.stderr
    assert f"known targets: {', '.join(list_targets())}" in proc.stderr
    assert "Traceback" not in proc.stderr
