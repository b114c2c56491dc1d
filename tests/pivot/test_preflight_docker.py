"""`kit preflight` end to end in the rehearsal image: real Gloo ranks, real planted faults, py-spy stacks,
and no container left behind on any path. The CLI runs in a subprocess, as people and CI run it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from pivot_helpers import KIT, run_kit

from kit.pivot.steps import device_plan

pytestmark = [pytest.mark.docker]


def test_preflight_passes_every_step_on_two_gloo_ranks_and_removes_its_container(
    rehearsal_image, new_containers
):
    code, result, lines, _ = run_kit("preflight", "--image", rehearsal_image, "--tp", "2")
    assert code == 0, result
    assert result["verdict"] == "ok" and result["backend"] == "gloo" and result["ranks"] == 2
    assert [(s["step"], s["status"]) for s in result["steps"]] == [
        ("launch", "ok"),
        ("init", "ok"),
        ("allreduce", "ok"),
        ("p2p", "ok"),
        ("sweep", "ok"),
    ]
    assert {(p["src"], p["dst"]) for p in result["pairs"]} == {(0, 1), (1, 0)}
    sweep = result["sweep"]
    assert sweep[0]["bytes"] == 8 and sweep[-1]["bytes"] == device_plan("cpu").sweep["max_bytes"]
    assert all(row["busbw_gbps"] >= 0 and row["time_us"] > 0 for row in sweep)
    assert result["transports"] == ["gloo"] and result["env"]["NCCL_DEBUG"] == "INFO"
    assert [line["step"] for line in lines if line.get("type") == "step"] == [
        "launch",
        "init",
        "allreduce",
        "p2p",
        "sweep",
    ]
    assert result["containers_removed"] is True
    assert not new_containers()


def test_a_planted_missing_rank_is_hung_in_init_within_its_deadline_with_stacks(
    rehearsal_image, new_containers
):
    code, result, _, _ = run_kit(
        "preflight", "--image", rehearsal_image, "--tp", "2", "--fault", "hang-init:rank=1"
    )
    assert code == 4, result
    assert (result["verdict"], result["step"]) == ("hung", "init")
    deadline = device_plan("cpu").limit("init").deadline_s
    assert result["message"] == f"init not through after {deadline:.0f} s"
    first_run = result["seconds"] - result["retry"]["seconds"]
    launch = result["steps"][0]["seconds"]
    assert first_run < launch + deadline + 15  # the verdict, then stacks and removal, not a minute later
    stacks = {s["rank"]: s for s in result["stacks"]}
    assert stacks["rank0"]["kind"] == "rendezvous" and "init_process_group" in stacks["rank0"]["where"]
    assert stacks["rank1"]["kind"] == "planted-fault"
    assert (result["waiting_ranks"], result["missing_ranks"]) == (["rank0"], ["rank1"])
    # The same step again with NCCL_P2P_DISABLE=1 hangs too: not NCCL's P2P path.
    assert result["retry"]["env"] == {"NCCL_P2P_DISABLE": "1"} and result["retry"]["verdict"] == "hung"
    assert result["p2p"] == "not P2P"
    folder = Path(result["diagnostics"])
    assert "_create_c10d_store" in (folder / "stacks" / "rank0.txt").read_text()
    assert "KIT_PREFLIGHT" in (folder / "preflight.log").read_text()
    assert json.loads((folder / "result.json").read_text())["p2p"] == "not P2P"
    assert not new_containers()


def test_a_p2p_shaped_hang_is_named_p2p_by_the_retry(faults_image, new_containers):
    code, result, _, _ = run_kit(
        "preflight", "--image", faults_image.image, "--tp", "2", "--fault", "hang-p2p", env=faults_image.env()
    )
    assert code == 4, result
    assert (result["verdict"], result["step"]) == ("hung", "allreduce")
    assert {s["kind"] for s in result["stacks"]} == {"planted-fault"}
    assert result["retry"]["verdict"] == "ok" and result["p2p"] == "P2P"
    assert [s["status"] for s in result["retry"]["steps"]] == ["ok", "ok", "ok"]  # up to allreduce only
    assert not new_containers()


def test_ctrl_c_during_a_preflight_removes_its_container(rehearsal_image, new_containers):
    proc = subprocess.Popen(
        [*KIT, "preflight", "--image", rehearsal_image, "--fault", "hang-init:rank=1", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    try:
        while not [c for c in new_containers() if c.status == "running"]:
            assert time.monotonic() < deadline, "the container never started"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        time.sleep(2)  # inside init, where the planted rank hangs
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert json.loads(out.splitlines()[-1])["verdict"] == "interrupted"
    assert not new_containers()


def test_an_image_that_is_not_built_is_exit_3(tmp_path, rehearsal_image):
    images = tmp_path / "images"
    images.mkdir()
    manifest = (Path(__file__).resolve().parents[2] / "images" / f"{rehearsal_image}.toml").read_text()
    (images / "never-built-cpu.toml").write_text(
        manifest.replace(f'name = "{rehearsal_image}"', 'name = "never-built-cpu"')
    )
    proc = subprocess.run(
        [*KIT, "preflight", "--image", "never-built-cpu"],
        capture_output=True,
        text=True,
        env={**os.environ, "KIT_PROJECT_DIR": str(tmp_path)},
        timeout=60,
    )
    assert proc.returncode == 3
    assert proc.stderr.strip() == (
        "kit: error: image kit/sglang:never-built-cpu not built (run 'kit image build never-built-cpu')"
    )
