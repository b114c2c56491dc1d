"""Renderers: one LaunchSpec, five shapes. Key lines are checked, and compose.yaml is the kit's output.
Every shape that runs the server carries SYS_PTRACE, the compile cache, and its GPUs the way it is told."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from catalog_helpers import run_cli

from kit import paths
from kit.launch import list_targets, resolve
from kit.render.compose import compose_document, portable_path, render_compose, start_period_s
from kit.render.docker import docker_run_argv, gpu_argv, host_settings, run_kwargs
from kit.render.lws import lws_manifests, render_lws
from kit.render.sglang import launch_command, render_sglang
from kit.render.systemd import render_systemd
from kit.runtime.compile_cache import ENV, MOUNT, VOLUME
from kit.runtime.flight_recorder_env import ENV as FLIGHT_RECORDER_ENV
from kit.runtime.host import GpuWay

OLD = "sglang-0.5.10.post1-cu129-sm120"
NEW = "sglang-0.5.23-cu130-sm120"


def test_done_when_0_5_10_mtp_shows_extra_buffer_and_spec_v2():
    code, out, _ = run_cli(["render", "sglang", "qwen-mtp", "--image", OLD])
    assert code == 0
    assert "  --mamba-scheduler-strategy extra_buffer \\\n" in out
    assert "SGLANG_ENABLE_SPEC_V2=1 \\\n" in out
    assert "python -m sglang.launch_server \\\n" in out


@pytest.mark.parametrize("target", ["qwen-base", "qwen-mtp"])
def test_the_qwen_profiles_render_the_tool_call_parser_on_every_release(target, tmp_path):
    # Every release the conformance matrix knows has --tool-call-parser with qwen3_coder among its
    # choices (each qwen cell of docs/conformance.md passes argparse with it).
    from kit.check.conformance import Releases, load_matrix
    from kit.launch import resolve_full

    made = Releases(tmp_path)
    for release in load_matrix().releases:
        image = made.image(NEW, release)
        argv = resolve_full(target, image=image, images_dir=tmp_path).spec.argv
        assert argv[argv.index("--tool-call-parser") + 1] == "qwen3_coder", release
    for image in (OLD, NEW):
        code, out, _ = run_cli(["render", "sglang", target, "--image", image])
        assert code == 0 and "  --tool-call-parser qwen3_coder \\\n" in out


def test_done_when_0_5_23_mtp_shows_the_new_flag_and_no_spec_v2():
    code, out, _ = run_cli(["render", "sglang", "qwen-mtp", "--image", NEW])
    assert code == 0
    assert "  --mamba-radix-cache-strategy extra_buffer \\\n" in out
    assert "SPEC_V2" not in out


def test_sglang_json_is_the_spec():
    spec = resolve("qwen-mtp", image=OLD)
    assert launch_command(spec)["argv"] == list(spec.argv)
    code, out, _ = run_cli(["render", "sglang", "tiny", "--json"])
    assert (
        code == 0
        and '"argv":["python","-m","sglang.launch_server","--model-path","/opt/kit/models/tiny"' in out
    )


def test_sglang_text_quotes_for_the_shell():
    text = render_sglang(resolve("tiny"))
    assert "SGLANG_CPU_OMP_THREADS_BIND='0|1' \\\n" in text
    assert "  --port 30000 \\\n" in text
    assert text.endswith("  --sleep-on-idle\n")  # the last argument ends the command: no trailing '\\'


def test_docker_run_for_qwen_has_gpus_ipc_ulimits_cache_and_a_local_port():
    argv = docker_run_argv(resolve("qwen-base"))
    line = " ".join(argv)
    for part in ("--gpus 4", "--ipc host", "--ulimit memlock=-1", "--ulimit stack=67108864",
                 "-p 127.0.0.1:30000:30000", "-e HF_TOKEN", "--label io.kit.target=qwen-base",
                 "/.cache/huggingface:/root/.cache/huggingface"):  # fmt: skip
        assert part in line
    assert "--cap-add SYS_PTRACE" in line  # py-spy's stacks, for kit watch on any server
    request = GpuWay("gpu-request", "test", True, 4)
    assert run_kwargs(resolve("qwen-base"), way=request)["cap_add"] == ["SYS_PTRACE"]
    assert "cap_add" not in run_kwargs(resolve("qwen-base"), way=request, diagnose=False)
    code, out, _ = run_cli(["render", "docker", "qwen-base", "--diagnose", "--gpu-access", "request"])
    assert code == 0 and out.count("--cap-add SYS_PTRACE") == 1  # the old flag still works, once


def test_compose_yaml_is_kit_render_compose_byte_for_byte():
    code, out, _ = run_cli(["render", "compose"])
    assert code == 0
    assert (paths.project_root() / "compose.yaml").read_text(encoding="utf-8") == out


def test_compose_services_key_lines():
    doc = yaml.safe_load((paths.project_root() / "compose.yaml").read_text(encoding="utf-8"))
    services = doc["services"]
    targets = ["qwen-base", "qwen-mtp", "qwen-tiny", "qwen-tiny-mtp", "tiny", "tiny-qwen"]
    assert list(services) == [*targets, "qwen-base-watch"]  # the watcher last, under its profile
    services = {name: services[name] for name in targets}  # the servers
    qwen = services["qwen-base"]
    assert qwen["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": 4, "capabilities": ["gpu"]}
    ]
    assert qwen["ipc"] == "host" and qwen["ulimits"] == {"memlock": -1, "stack": 67108864}
    assert qwen["environment"]["HF_TOKEN"] == "${HF_TOKEN:-}"
    assert qwen["volumes"] == ["${HOME}/.cache/huggingface:/root/.cache/huggingface", f"{VOLUME}:{MOUNT}"]
    # The compile cache is one named volume, not a per-project one: kit up shares it.
    assert doc["volumes"] == {VOLUME: {"name": VOLUME}, "kit-bundles": {"name": "kit-bundles"}}
    for service in services.values():
        assert service["cap_add"] == ["SYS_PTRACE"]
        assert f"{VOLUME}:{MOUNT}" in service["volumes"]
        assert all(service["environment"][key] == value for key, value in ENV.items())
    assert all(port.startswith("127.0.0.1:") for s in services.values() for port in s["ports"])
    assert qwen["profiles"] == ["gpu"] and "profiles" not in services["tiny"]
    # an init as PID 1, so a crashed SGLang exits non-zero and restart policies apply
    assert all(service["init"] is True for service in services.values())
    check = qwen["healthcheck"]
    assert "/health_generate" in check["test"][-1]
    # start_period covers every phase's deadline: init 300 + load 3600 + memory 300 + autotune 1200
    # + capture 900 + warmup 600 (FlashInfer's autotune runs between the memory pool and capture)
    assert check["start_period"] == "6900s"
    assert services["qwen-mtp"]["healthcheck"]["start_period"] == "7200s"
    tiny = services["tiny"]
    assert tiny["image"] == "kit/sglang:sglang-0.5.23-cpu"
    assert tiny["command"] == list(resolve("tiny").argv)
    assert tiny["environment"] == {
        **ENV,
        **FLIGHT_RECORDER_ENV,
        "SGLANG_CPU_OMP_THREADS_BIND": "0|1",
        "SGLANG_USE_CPU_ENGINE": "1",
    }
    assert tiny["healthcheck"]["test"][:3] == ["CMD", "python", "-c"]  # no curl in the image
    assert tiny["healthcheck"]["start_period"] == "480s"
    assert "deploy" not in tiny
    # The tiny production architecture: one GPU by default (its TP), the model inside the image.
    small = services["qwen-tiny"]
    assert small["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 1
    # No HF cache: only the compile cache is mounted.
    assert small["profiles"] == ["gpu"] and small["volumes"] == [f"{VOLUME}:{MOUNT}"]
    assert "profiles" not in services["tiny-qwen"]


def test_compose_escapes_dollars_from_the_spec():
    spec = resolve("tiny", overrides=["env.PASSWORDISH=a$b"])
    assert compose_document([spec])["services"]["tiny"]["environment"]["PASSWORDISH"] == "a$$b"


def test_portable_path_only_rewrites_the_home(monkeypatch):
    monkeypatch.setenv("HOME", "/home/u")
    assert portable_path("/home/u/.cache/huggingface") == "${HOME}/.cache/huggingface"
    assert portable_path("/home/user2/x") == "/home/user2/x"
    assert portable_path("/data/hf") == "/data/hf"


def test_start_period_is_the_sum_of_phase_deadlines():
    # init + load + memory + autotune (capture's 60 s, the catalog names none) + capture + warmup
    assert start_period_s(resolve("tiny")) == 60 + 120 + 60 + 60 + 60 + 120


def test_readme_and_compose_agree_on_qwen_bases_start_period():
    readme = (paths.project_root() / "README.md").read_text(encoding="utf-8")
    said = re.search(r"`start_period` \((\d+) s, about (\d+) minutes for qwen-base", readme)
    assert said, "README no longer says qwen-base's start_period"
    doc = yaml.safe_load((paths.project_root() / "compose.yaml").read_text(encoding="utf-8"))
    period = doc["services"]["qwen-base"]["healthcheck"]["start_period"]
    assert f"{said[1]}s" == period == f"{start_period_s(resolve('qwen-base'))}s"
    assert int(said[2]) == round(int(said[1]) / 60)


def test_render_compose_for_one_target_with_overrides():
    text = render_compose([resolve("tiny", overrides=["max_total_tokens=4096"])])
    assert list(yaml.safe_load(text)["services"]) == ["tiny"]
    assert "- '4096'" in text


def test_systemd_unit_runs_the_container_in_the_foreground():
    unit = render_systemd(resolve("qwen-mtp", image=OLD))
    assert "[Service]" in unit and "[Install]" in unit and "WantedBy=multi-user.target" in unit
    exec_start = unit.split("ExecStart=", 1)[1].split("\nExecStop=", 1)[0]
    assert exec_start.startswith("/usr/bin/docker \\\n    run \\\n    --rm")
    assert " -d " not in exec_start.replace("\\\n", " ")
    assert "-e SGLANG_ENABLE_SPEC_V2=1" in exec_start
    assert "--mamba-scheduler-strategy extra_buffer" in exec_start
    assert "EnvironmentFile=-/etc/kit/qwen-mtp.env" in unit
    assert "TimeoutStartSec=7200" in unit  # every phase, autotune included
    assert "HF_TOKEN=" not in exec_start
    # systemd restarts it by name after a crash: kit watch follows the next attempt (io.kit.restart).
    assert "Restart=on-failure" in unit and "--label io.kit.restart=on-failure" in exec_start


def test_systemd_escapes_specifiers():
    unit = render_systemd(resolve("tiny", overrides=["env.X=100%", "env.Y=$HOME"]))
    assert "-e X=100%%" in unit and '-e "Y=$$HOME"' in unit


def test_lws_single_node_and_multi_node():
    single = lws_manifests(resolve("qwen-base"))
    assert single[0]["kind"] == "LeaderWorkerSet" and single[0]["spec"]["leaderWorkerTemplate"]["size"] == 1
    multi = lws_manifests(resolve("qwen-base", overrides=["tp=8", "nnodes=2"]))
    template = multi[0]["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    for role in ("leaderTemplate", "workerTemplate"):
        container = template[role]["spec"]["containers"][0]
        args = container["args"]
        assert args[args.index("--nnodes") + 1] == "2"
        assert args[args.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
        assert args[args.index("--dist-init-addr") + 1] == "$(LWS_LEADER_ADDRESS):20000"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert "readinessProbe" in template["leaderTemplate"]["spec"]["containers"][0]
    assert "readinessProbe" not in template["workerTemplate"]["spec"]["containers"][0]
    assert multi[1]["kind"] == "Service"
    for role in ("leaderTemplate", "workerTemplate"):
        pod = template[role]["spec"]
        container = pod["containers"][0]
        assert container["securityContext"] == {"capabilities": {"add": ["SYS_PTRACE"]}}
        assert {"name": "compile-cache", "mountPath": MOUNT} in container["volumeMounts"]
        assert {"name": "compile-cache", "hostPath": {"path": MOUNT, "type": "DirectoryOrCreate"}} in pod[
            "volumes"
        ]
        assert {"name": "TRITON_CACHE_DIR", "value": ENV["TRITON_CACHE_DIR"]} in container["env"]
    text = render_lws(resolve("qwen-base"), nodes=2)
    assert "&id" not in text and "*id" not in text
    assert len(list(yaml.safe_load_all(text))) == 2


@pytest.mark.parametrize("kind", ["sglang", "docker", "systemd", "lws"])
@pytest.mark.parametrize("target", ["qwen-base", "qwen-mtp", "tiny"])
def test_every_renderer_renders_every_target(kind, target):
    code, out, err = run_cli(["render", kind, target])
    assert code == 0 and out and not err


@pytest.mark.parametrize("kind", ["sglang", "docker", "systemd", "lws", "compose"])
@pytest.mark.parametrize("target", ["qwen-mtp", "tiny"])
def test_every_render_arms_the_flight_recorder_and_the_soft_watchdog(kind, target):
    """PyTorch's flight recorder (its variables, dumps into the folder every render mounts) and
    SGLang's soft watchdog at the profile's longest stall window, in every shape of the server."""
    from kit.launch import resolve_full, soft_watchdog_s

    code, out, _ = run_cli(["render", kind, target])
    assert code == 0
    for key, value in FLIGHT_RECORDER_ENV.items():
        assert key in out and value in out, (key, value)
    assert value.startswith(MOUNT + "/") and MOUNT in out  # the folder a volume mounts (sglang: says so)
    resolved = resolve(target)
    window = max(resolved.timing.stall_windows.values())
    assert "--soft-watchdog-timeout" in out and str(int(window)) in out
    assert soft_watchdog_s(resolve_full(target).profile) == int(window)


def test_targets_command_lists_the_catalog():
    code, out, _ = run_cli(["targets"])
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == list_targets()


@pytest.mark.docker
def test_docker_compose_accepts_compose_yaml():
    docker = shutil.which("docker")
    if not docker or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("docker compose (v2) is not installed (scripts/bootstrap installs it)")
    done = subprocess.run(
        [
            docker,
            "compose",
            "-f",
            str(paths.project_root() / "compose.yaml"),
            "--profile",
            "gpu",
            "config",
            "-q",
        ],
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(Path.home()), "HF_TOKEN": ""},
    )
    assert done.returncode == 0, done.stderr


def test_compose_yaml_matches_the_compose_specification():
    # No engine needed: check-jsonschema (a dev dependency) carries the Compose spec's JSON schema.
    import sys
    from pathlib import Path

    tool = Path(sys.executable).with_name("check-jsonschema")
    if not tool.exists():
        pytest.skip("check-jsonschema is not installed (pip install -e '.[dev]')")
    done = subprocess.run(
        [str(tool), "--builtin-schema", "vendor.compose-spec", str(paths.project_root() / "compose.yaml")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_compose_service_builds_its_manifest_and_never_pulls():
    from kit.images.build import build_args
    from kit.images.manifest import load_manifest

    doc = yaml.safe_load((paths.project_root() / "compose.yaml").read_text(encoding="utf-8"))
    for name, service in doc["services"].items():
        if "watch" in service.get("profiles", ()):
            continue  # the kit's own watcher (test_compose_watcher_...)
        spec = resolve(name)
        assert service["pull_policy"] == "never"
        build = service["build"]
        assert build["context"] == "." and build["dockerfile"] == "Dockerfile"
        assert (paths.project_root() / build["context"] / build["dockerfile"]).is_file()
        assert build["args"] == build_args(load_manifest(spec.image))
        assert service["image"] == spec.image_ref == load_manifest(spec.image).tag


def test_compose_header_names_only_the_services_it_holds():
    code, out, _ = run_cli(["render", "compose", "qwen-base"])
    head = out.split("services:", 1)[0]
    assert code == 0 and "qwen-base" in head and "tiny" not in head and "qwen-mtp" not in head
    assert "kit model fetch qwen-base" in head
    code, out, _ = run_cli(["render", "compose", "tiny"])
    head = out.split("services:", 1)[0]
    assert "qwen" not in head and "gpu" not in head
    code, out, _ = run_cli(["render", "compose", "tiny", "--build-context", "../kit"])
    assert yaml.safe_load(out)["services"]["tiny"]["build"]["context"] == "../kit"


def test_qwen_launch_pins_its_revision_and_stays_offline():
    spec = resolve("qwen-base")
    assert spec.hf_repo == "Qwen/Qwen3.5-122B-A10B" and spec.hf_revision
    at = spec.argv.index("--model-path")
    assert list(spec.argv[at : at + 4]) == ["--model-path", spec.hf_repo, "--revision", spec.hf_revision]
    assert spec.env["HF_HUB_OFFLINE"] == "1"
    assert resolve("qwen-base", overrides=["env.HF_HUB_OFFLINE=0"]).env["HF_HUB_OFFLINE"] == "0"
    tiny = resolve("tiny")
    assert tiny.hf_repo is None and "--revision" not in tiny.argv and "HF_HUB_OFFLINE" not in tiny.env


def test_renderings_explain_the_dialect_beside_the_image():
    _, out, _ = run_cli(["render", "sglang", "tiny"])
    assert "SGLang dialect sglang-0.5.21: the flags and log lines of SGLang >=0.5.21" in out
    _, out, _ = run_cli(["validate", "tiny"])
    assert "dialect sglang-0.5.21: the flags and log lines of SGLang >=0.5.21" in out


def test_docker_renderings_run_an_init_so_a_crash_exits_non_zero():
    from kit.render.docker import docker_run_argv, run_kwargs

    spec = resolve("qwen-base")
    assert run_kwargs(spec)["init"] is True
    assert docker_run_argv(spec)[:5] == ["docker", "run", "--rm", "-d", "--init"]
    assert " --init " in render_systemd(spec).replace("\\\n", " ").replace("\n", " ")


# -- GPU access, the compile cache and SYS_PTRACE in every shape -------------------------------------

WAYS = {
    "request": GpuWay("gpu-request", "test", True, 4),
    "request-chosen": GpuWay("gpu-request", "test", True, 4, ("4", "5", "6", "7")),
    "cdi": GpuWay("cdi", "test", True, 4, ("4", "5", "6", "7")),
    "runtime": GpuWay("nvidia-runtime", "test", True, 4, ("4", "5", "6", "7")),
}


def test_each_gpu_way_as_docker_run_options():
    assert gpu_argv(WAYS["request"]) == ["--gpus", "4"]
    assert gpu_argv(WAYS["request-chosen"]) == ["--gpus", '"device=4,5,6,7"']
    assert gpu_argv(WAYS["cdi"]) == [p for i in range(4, 8) for p in ("--device", f"nvidia.com/gpu={i}")]
    assert gpu_argv(WAYS["runtime"]) == ["--runtime", "nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=4,5,6,7"]
    line = " ".join(docker_run_argv(resolve("qwen-base"), way=WAYS["cdi"]))
    assert "--device nvidia.com/gpu=4" in line and "--gpus" not in line
    unit = render_systemd(resolve("qwen-base"), way=WAYS["runtime"]).replace("\\\n    ", "")
    assert "--runtime nvidia" in unit and "NVIDIA_VISIBLE_DEVICES=4,5,6,7" in unit


@pytest.mark.parametrize("way", list(WAYS))
def test_each_gpu_way_in_compose_and_the_sdk(way):
    spec = resolve("qwen-base")
    service = compose_document([spec], ways={"qwen-base": WAYS[way]})["services"]["qwen-base"]
    kwargs = run_kwargs(spec, way=WAYS[way])
    if way == "cdi":
        assert service["devices"] == [f"nvidia.com/gpu={i}" for i in range(4, 8)] and "deploy" not in service
        assert kwargs["device_requests"][0]["Driver"] == "cdi"
    elif way == "runtime":
        assert (
            service["runtime"] == "nvidia" and service["environment"]["NVIDIA_VISIBLE_DEVICES"] == "4,5,6,7"
        )
        assert kwargs["runtime"] == "nvidia" and kwargs["environment"]["NVIDIA_VISIBLE_DEVICES"] == "4,5,6,7"
    else:
        device = service["deploy"]["resources"]["reservations"]["devices"][0]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
        assert (device.get("device_ids"), device.get("count")) == (
            (["4", "5", "6", "7"], None) if way == "request-chosen" else (None, 4)
        )
    # Whatever the way, the profile's variables win over the cache's, and the cache is mounted.
    assert kwargs["environment"]["NCCL_DEBUG"] == "WARN" and kwargs["environment"]["TRITON_CACHE_DIR"]
    assert kwargs["volumes"][VOLUME] == {"bind": MOUNT, "mode": "rw"}
    assert kwargs["cap_add"] == ["SYS_PTRACE"]


def test_compose_with_cdi_devices_validates_against_the_compose_specification(tmp_path):
    import sys

    tool = Path(sys.executable).with_name("check-jsonschema")
    if not tool.exists():
        pytest.skip("check-jsonschema is not installed (pip install -e '.[dev]')")
    for way in ("cdi", "runtime", "request-chosen"):
        target = tmp_path / f"{way}.yaml"
        target.write_text(render_compose([resolve("qwen-base")], ways={"qwen-base": WAYS[way]}))
        done = subprocess.run(
            [str(tool), "--builtin-schema", "vendor.compose-spec", str(target)],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_host_settings_give_preflight_the_cache_and_the_way(monkeypatch):
    """Preflight's containers take host_settings as they are: its environment is merged by the caller."""
    spec = resolve("qwen-base")
    settings = host_settings(spec, 2, way=GpuWay("cdi", "test", True, 2, ("0", "1")))
    assert settings["environment"] == ENV
    assert settings["device_requests"][0]["DeviceIDs"] == ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]
    assert settings["volumes"] == {VOLUME: {"bind": MOUNT, "mode": "rw"}}
    cpu = host_settings(resolve("tiny"), 0)
    assert "device_requests" not in cpu and cpu["shm_size"] == "2g" and cpu["environment"] == ENV
    monkeypatch.setenv("KIT_COMPILE_CACHE_VOLUME", "kit-compile-cache-test")
    assert host_settings(resolve("tiny"), 0)["volumes"] == {
        "kit-compile-cache-test": {"bind": MOUNT, "mode": "rw"}
    }


def test_render_cli_takes_gpus_and_the_way(monkeypatch):
    code, out, _ = run_cli(["render", "docker", "qwen-base", "--gpus", "4,5,6,7", "--gpu-access", "cdi"])
    assert code == 0 and "--device nvidia.com/gpu=7" in out
    monkeypatch.setenv("KIT_GPUS", "0,1")
    code, _, err = run_cli(["render", "docker", "qwen-base", "--gpu-access", "request"])
    assert code == 2 and "KIT_GPUS: names 2 GPU(s); qwen-base uses 4" in err
    code, out, _ = run_cli(["render", "docker", "tiny"])  # a CPU target ignores the variable
    assert code == 0 and "--gpus" not in out
    code, out, _ = run_cli(["render", "lws", "qwen-base", "--set", "tp=4"])
    assert code == 0


PROFILES = ("--profile", "gpu", "--profile", "watch")


def test_compose_watcher_watches_qwen_base_while_it_serves_and_compose_accepts_it():
    doc = yaml.safe_load((paths.project_root() / "compose.yaml").read_text(encoding="utf-8"))
    watcher = doc["services"]["qwen-base-watch"]
    assert watcher["profiles"] == ["watch"]
    assert watcher["command"] == ["watch", "qwen-base", "--target", "qwen-base", "--serve"]
    assert watcher["depends_on"] == {"qwen-base": {"condition": "service_started"}}
    assert "kit-bundles:/var/lib/kit" in watcher["volumes"] and doc["volumes"]["kit-bundles"]
    assert watcher["environment"]["KIT_CACHE_DIR"] == "/var/lib/kit"
    assert (paths.project_root() / watcher["build"]["dockerfile"]).is_file()
    assert not any(
        "watch" in s.get("profiles", ()) for n, s in doc["services"].items() if n != "qwen-base-watch"
    )
    docker = shutil.which("docker")
    if not docker or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("docker compose (v2) is not installed (scripts/bootstrap installs it)")
    done = subprocess.run(
        [docker, "compose", "-f", str(paths.project_root() / "compose.yaml"), *PROFILES, "config"],
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(Path.home()), "HF_TOKEN": ""},
    )
    assert done.returncode == 0, done.stderr
    # What Compose itself makes of it: the watcher sees the server's GPUs (the same device request,
    # NVML through the driver's utility capability) and may ptrace the ranks (py-spy, /proc/PID/io).
    seen = yaml.safe_load(done.stdout)["services"]["qwen-base-watch"]
    assert seen["cap_add"] == ["SYS_PTRACE"]
    server = yaml.safe_load(done.stdout)["services"]["qwen-base"]
    devices = seen["deploy"]["resources"]["reservations"]["devices"]
    assert devices == server["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and devices[0]["capabilities"] == ["gpu"]
    assert seen["environment"]["NVIDIA_DRIVER_CAPABILITIES"] == "utility"


def test_the_compose_watcher_gets_the_gpus_the_way_its_server_does():
    from kit.render.compose import watcher_service

    spec = resolve("qwen-base")
    cdi = watcher_service(spec, way=GpuWay("cdi", "test", True, count=2))
    assert cdi["devices"] == ["nvidia.com/gpu=0", "nvidia.com/gpu=1"] and "deploy" not in cdi
    runtime = watcher_service(spec, way=GpuWay("nvidia-runtime", "test", True, count=4))
    assert runtime["runtime"] == "nvidia" and runtime["environment"]["NVIDIA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert runtime["cap_add"] == ["SYS_PTRACE"]


def test_systemd_watcher_unit_runs_kit_watch_serve_and_systemd_accepts_both(tmp_path):
    from kit.render.systemd import render_systemd_watcher

    spec = resolve("tiny")
    kit = Path(sys.executable).with_name("kit")
    watcher = render_systemd_watcher(spec, kit=str(kit))
    assert f"ExecStart={kit} watch kit-tiny --target tiny --serve" in watcher
    assert "After=kit-tiny.service" in watcher and "WantedBy=kit-tiny.service" in watcher
    assert "ExecStop" not in watcher and "docker stop" not in watcher  # it never stops the server
    code, out, _ = run_cli(["render", "systemd", "tiny", "--watcher"])
    assert code == 0 and "/usr/local/bin/kit watch kit-tiny --target tiny --serve" in out
    tool = shutil.which("systemd-analyze")
    docker = shutil.which("docker")
    if not tool or not docker:
        pytest.skip("systemd-analyze or docker is not installed here")
    (tmp_path / "kit-tiny.service").write_text(render_systemd(spec, docker=docker))
    (tmp_path / "kit-tiny-watch.service").write_text(watcher)
    done = subprocess.run(
        [tool, "verify", "--man=no", "kit-tiny.service", "kit-tiny-watch.service"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
