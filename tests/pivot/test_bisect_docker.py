"""`kit bisect tiny` end to end on the rehearsal image: a planted P2P-shaped hang is found on the first
failing rung and the change that turns it green is named, in one report; Ctrl-C and the budget leave
nothing running."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from pivot_helpers import KIT, run_kit

from kit.launch import resolve

pytestmark = [pytest.mark.docker]


def rows(result: dict) -> list[tuple[str, str, str]]:
    return [(t["rung"], t["change"], t["verdict"]) for t in result["trials"]]


def test_bisect_names_preflight_and_nccl_p2p_disable_for_a_planted_p2p_hang(faults_image, new_containers):
    code, result, lines, _ = run_kit(
        "bisect",
        "tiny",
        "--image",
        faults_image.image,
        "--fault",
        "hang-p2p",
        env=faults_image.env(),
        timeout=600,
    )
    assert code == 4, result  # the failing rung's verdict: HUNG
    assert rows(result) == [
        ("doctor", "as configured", "pass"),
        ("preflight", "as configured", "hung"),
        ("preflight", "NCCL_P2P_DISABLE=1", "ok"),
    ]
    # SGLang's own group init runs the first collective, where the planted P2P hang sits
    assert (result["verdict"], result["failing_rung"], result["failing_phase"]) == (
        "fixed",
        "preflight",
        "init",
    )
    assert result["fix"] == "NCCL_P2P_DISABLE=1"
    # --image only where the faults image is not tiny's own (a derived test image)
    image = "" if faults_image.image == resolve("tiny").image else f" --image {faults_image.image}"
    assert result["fix_command"] == f"kit preflight tiny{image} --set env.NCCL_P2P_DISABLE=1"
    bundle = Path(result["bundle"])  # the failing run's log, stacks and result
    assert "kit_fault_hang_p2p" in (bundle / "stacks" / "rank0.txt").read_text()
    # each run was reported as it ended, before the final result
    assert [line["verdict"] for line in lines if line.get("type") == "trial"] == ["pass", "hung", "ok"]
    assert not new_containers()


@pytest.mark.slow
def test_bisect_from_the_base_rung_turns_a_hung_server_green_with_nccl_p2p_disable(
    faults_image, new_containers
):
    """The server rungs: SGLang's own first all_reduce hangs under the planted fault; the same launch with
    --set env.NCCL_P2P_DISABLE=1 is READY with a first token; tiny's target rung is the base rung."""
    code, result, lines, _ = run_kit(
        "bisect",
        "tiny",
        "--image",
        faults_image.image,
        "--fault",
        "hang-p2p",
        "--from",
        "base",
        env=faults_image.env(),
        timeout=600,
    )
    assert code == 4, result
    assert rows(result) == [("base", "as configured", "hung"), ("base", "NCCL_P2P_DISABLE=1", "ready")]
    assert result["fix_command"].startswith("kit up tiny ") and result["fix_command"].endswith(
        "--set env.NCCL_P2P_DISABLE=1"
    )
    assert any(line.get("type") == "milestone" for line in lines)  # the live view of each server run
    assert not new_containers()


def test_ctrl_c_during_bisect_leaves_nothing_running(rehearsal_image, new_containers):
    proc = subprocess.Popen(
        [*KIT, "bisect", "tiny", "--fault", "hang-init:rank=1", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    try:
        while not [c for c in new_containers() if c.status == "running"]:
            assert time.monotonic() < deadline, "the preflight container never started"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    result = json.loads(out.splitlines()[-1])
    assert result["verdict"] == "interrupted"
    assert rows(result)[-1] == ("preflight", "as configured", "interrupted")
    assert not new_containers()


def test_a_spent_budget_stops_the_server_run_in_progress_and_removes_it(rehearsal_image, new_containers):
    started = time.monotonic()
    code, result, _, _ = run_kit("bisect", "tiny", "--from", "base", "--budget", "15")
    assert code == 5, result
    assert result["verdict"] == "budget" and rows(result) == [("base", "as configured", "budget")]
    assert time.monotonic() - started < 60  # not the server's own start-up time
    assert "ran out" in result["notes"][0]
    assert not new_containers()
