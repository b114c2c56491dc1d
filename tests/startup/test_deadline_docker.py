"""A deadline never destroys progress, on the real CPU rehearsal: `kit up tiny --deadline warmup=3`
(the server's own warm-up request takes tens of seconds compiling CPU kernels) says live that the
warm-up passed its deadline, follows it on and ends READY, exit 0; with --strict-deadlines (the smoke
tests' policy) it ends DEADLINE, exit 5, and the server is left running, never removed for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]
KIT = [sys.executable, "-m", "kit"]


@pytest.fixture
def tiny_image():
    from kit.launch import resolve
    from kit.runtime.engine import image_exists

    spec = resolve("tiny")
    if not image_exists(spec.image_ref):
        pytest.skip(f"image {spec.image_ref} not built (run 'kit image build {spec.image}')")
    return spec.image


def kit_lines(*args: str) -> tuple[int, list[dict]]:
    proc = subprocess.run(
        [*KIT, *args, "--json"], capture_output=True, text=True, timeout=900, env=dict(os.environ)
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines and lines[-1]["type"] == "result", f"{proc.stdout[-1500:]} {proc.stderr[-1500:]}"
    return proc.returncode, lines


def test_kit_up_is_ready_exit_0_and_says_the_warmup_passed_its_deadline(tiny_image, new_servers):
    code, lines = kit_lines("up", "tiny", "--deadline", "warmup=3")
    result = lines[-1]
    assert (code, result["verdict"], result["exit_code"]) == (0, "ready", 0), result.get("evidence")
    [row] = result["deadlines_passed"]
    assert row["phase"] == "warmup" and row["limit_s"] == 3 and row["took_s"] > 3
    said = [line for line in lines if line["type"] == "deadline"]  # live, before the verdict
    assert [(d["stage"], d["limit_s"]) for d in said] == [("warmup", 3)]
    assert lines.index(said[0]) < len(lines) - 1 and "last progress" in said[0]["moving"]
    assert result["first_token_s"] is not None  # followed on: it served after the deadline
    assert result["container_removed"] and not new_servers()


def test_strict_deadlines_end_with_deadline_exit_5_and_leave_the_server_running(tiny_image, new_servers):
    code, lines = kit_lines("up", "tiny", "--deadline", "warmup=3", "--strict-deadlines")
    result = lines[-1]
    assert (code, result["verdict"], result["phase"]) == (5, "deadline", "warmup"), result
    # Three seconds into the warm-up the ranks compile (torch inductor's C++ kernels): that is the
    # first likely cause, from the stacks, and no NCCL advice on a CPU run.
    first = result["likely_causes"][0]
    assert first["id"] == "compile-running", [c["id"] for c in result["likely_causes"]]
    assert any("compiling: inductor compile" in line for line in first["evidence"]), first["evidence"]
    assert not any(c["id"].startswith("nccl") for c in result["likely_causes"])
    assert not result["container_removed"]
    [server] = new_servers()
    assert server.name == result["container"] and server.status == "running"  # not harmed
