"""`kit preflight` end to end in the rehearsal image: SGLang 0.5.23's own set-up and group init over real
Gloo ranks, real planted faults, py-spy stacks, and no container left behind on any path. The CLI runs
in a subprocess, as people and CI run it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from pivot_helpers import KIT, run_kit

from kit.images.manifest import load_manifest
from kit.pivot.graph_step import CPU_SKIP
from kit.pivot.steps import ALL_STEPS, device_plan

pytestmark = [pytest.mark.docker]


def test_preflight_tiny_runs_sglangs_own_group_init_on_gloo_and_names_the_settings_it_applied(
    rehearsal_image, new_containers
):
    code, result, lines, _ = run_kit("preflight", "tiny", timeout=600)
    assert code == 0, result
    assert result["verdict"] == "ok" and result["backend"] == "gloo" and result["ranks"] == 2
    assert [(s["step"], s["status"]) for s in result["steps"]] == [
        (step, "skipped" if step == "graph" else "ok") for step in ALL_STEPS
    ]
    assert result["graph"] == {"skipped": CPU_SKIP}  # the CPU rehearsal has no CUDA graphs: said so
    # The image's own release built the groups, through its own bootstrap (0.5.23)
    assert result["sglang"] == load_manifest(rehearsal_image).pins.sglang
    assert (result["groups"], result["recipe"]) == ("sglang", "bootstrap")
    assert result["tp_group"] == {
        "backend": "gloo",
        "tp_world": 2,
        "pynccl": False,
        "custom_all_reduce": None,
    }
    # ... with the launch's distributed flags read by SGLang's own parser (tiny's launch sets none)
    assert result["server_args"]["device"] == "cpu" and result["server_args"]["host"] == "0.0.0.0"
    assert result["server_args"]["disable_custom_all_reduce"] is False
    settings = result["settings"]
    # SGLang's own settings (entrypoints/engine.py::_set_envs_and_config), named with where they came from
    for key, value in {
        "NCCL_CUMEM_ENABLE": "0",
        "NCCL_NVLS_ENABLE": "0",
        "CUDA_DEVICE_MAX_CONNECTIONS": "8",
    }.items():
        assert settings[key]["value"] == value and settings[key]["source"] == "sglang", key
        assert settings[key]["by"].endswith("_set_envs_and_config")
    assert settings["SGLANG_CPU_OMP_THREADS_BIND"] == {"value": "0|1", "source": "profile"}  # tiny's env
    assert settings["NCCL_DEBUG"] == {"value": "INFO", "source": "kit"}
    setup = result["steps"][1]["detail"]
    assert (
        setup.startswith("sglang 0.5.23: its arguments and environment (") and "NCCL_CUMEM_ENABLE=0" in setup
    )
    assert {(p["src"], p["dst"]) for p in result["pairs"]} == {(0, 1), (1, 0)}
    sweep = result["sweep"]
    assert sweep[0]["bytes"] == 8 and sweep[-1]["bytes"] == device_plan("cpu").sweep["max_bytes"]
    assert all(row["busbw_gbps"] >= 0 and row["time_us"] > 0 for row in sweep)
    assert result["transports"] == ["gloo"] and result["env"]["NCCL_DEBUG"] == "INFO"
    assert [line["step"] for line in lines if line.get("type") == "step"] == list(ALL_STEPS)
    assert result["containers_removed"] is True
    assert not new_containers()


def test_a_planted_missing_rank_is_hung_in_init_within_its_deadline_with_stacks(
    rehearsal_image, new_containers
):
    code, result, _, _ = run_kit(
        "preflight", "--image", rehearsal_image, "--tp", "2", "--fault", "hang-init:rank=1", timeout=600
    )
    assert code == 4, result
    assert (result["verdict"], result["step"]) == ("hung", "init")
    deadline = device_plan("cpu").limit("init").deadline_s
    assert result["message"] == f"init not through after {deadline:.0f} s"
    first_run = result["seconds"] - result["retry"]["seconds"]
    launch, setup = result["steps"][0]["seconds"], result["steps"][1]["seconds"]
    assert first_run < launch + setup + deadline + 15  # the verdict, then stacks and removal
    stacks = {s["rank"]: s for s in result["stacks"]}
    assert stacks["rank0"]["kind"] == "rendezvous" and "init_process_group" in stacks["rank0"]["where"]
    # the planted rank hangs inside SGLang's own init_distributed_environment
    assert (
        stacks["rank1"]["kind"] == "planted-fault"
        and "init_distributed_environment" in stacks["rank1"]["where"]
    )
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
        "preflight",
        "--image",
        faults_image.image,
        "--tp",
        "2",
        "--fault",
        "hang-p2p",
        env=faults_image.env(),
        timeout=600,
    )
    assert code == 4, result
    # SGLang's own group init runs collectives (in_the_same_node_as): the planted P2P hang sits there,
    # as the reported one sits in SGLang's warm-up all_reduce, before the kit's own all_reduce
    assert (result["verdict"], result["step"]) == ("hung", "init")
    assert {s["kind"] for s in result["stacks"]} == {"planted-fault"}
    assert result["retry"]["verdict"] == "ok" and result["p2p"] == "P2P"
    assert [s["status"] for s in result["retry"]["steps"]] == ["ok", "ok", "ok"]  # up to init only
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


def test_spawned_ranks_build_sglangs_groups_as_they_do_on_a_gpu_host(rehearsal_image, new_containers):
    """On CUDA the ranks are spawned, as SGLang spawns its schedulers (a forked child cannot use CUDA
    the launcher touched): SGLang's ServerArgs travels pickled. The same path, proven here on gloo."""
    from kit.launch import resolve
    from kit.pivot.preflight import container_kwargs, rank_request, run_environment
    from kit.pivot.preflight_container import PreflightContainer
    from kit.pivot.steps import STEPS, PreflightRun

    spec = resolve("tiny")
    environment, _ = run_environment(spec, None, {})
    plan = device_plan("cpu")
    request = {**rank_request(spec, 2, plan, "allreduce", environment), "start_method": "spawn"}
    kwargs = container_kwargs(
        spec, 2, name="kit-preflight-spawn-test", session="spawn", environment=environment
    )
    box = PreflightContainer(kwargs, request)
    try:
        box.container.start()
        assert box.container.wait(timeout=600)["StatusCode"] == 0, box.log_text()[-3000:]
        log = box.log_text()
    finally:
        box.remove()
    run = PreflightRun(2, STEPS[:2], plan, 0.0)
    for line in log.splitlines():
        run.feed_line(line, 1.0)
    assert run.verdict(1.0).verdict == "ok", log[-3000:]
    assert run.setup["sglang"] == "0.5.23" and not run.setup["error"]
    assert {d["groups"] for d in run.state["init"].details.values()} == {"sglang"}
    assert len({run.pids[0], run.pids[1]}) == 2
    assert not new_containers()
