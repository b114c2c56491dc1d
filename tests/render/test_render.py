"""Renderers: one LaunchSpec, five shapes. Key lines are checked, and compose.yaml is the kit's output."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from catalog_helpers import run_cli

from kit import paths
from kit.launch import list_targets, resolve
from kit.render.compose import compose_document, portable_path, render_compose, start_period_s
from kit.render.docker import docker_run_argv, run_kwargs
from kit.render.lws import lws_manifests, render_lws
from kit.render.sglang import launch_command, render_sglang
from kit.render.systemd import render_systemd

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
    assert text.endswith("  --port 30000\n")


def test_docker_run_for_qwen_has_gpus_ipc_ulimits_cache_and_a_local_port():
    argv = docker_run_argv(resolve("qwen-base"))
    line = " ".join(argv)
    for part in ("--gpus 4", "--ipc host", "--ulimit memlock=-1", "--ulimit stack=67108864",
                 "-p 127.0.0.1:30000:30000", "-e HF_TOKEN", "--label io.kit.target=qwen-base",
                 "/.cache/huggingface:/root/.cache/huggingface"):  # fmt: skip
        assert part in line
    assert "SYS_PTRACE" not in line
    assert run_kwargs(resolve("qwen-base"), diagnose=True)["cap_add"] == ["SYS_PTRACE"]
    code, out, _ = run_cli(["render", "docker", "qwen-base", "--diagnose"])
    assert code == 0 and "--cap-add SYS_PTRACE" in out


def test_compose_yaml_is_kit_render_compose_byte_for_byte():
    code, out, _ = run_cli(["render", "compose"])
    assert code == 0
    assert (paths.project_root() / "compose.yaml").read_text(encoding="utf-8") == out


def test_compose_services_key_lines():
    doc = yaml.safe_load((paths.project_root() / "compose.yaml").read_text(encoding="utf-8"))
    services = doc["services"]
    assert list(services) == ["qwen-base", "qwen-mtp", "tiny"]
    qwen = services["qwen-base"]
    assert qwen["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": 4, "capabilities": ["gpu"]}
    ]
    assert qwen["ipc"] == "host" and qwen["ulimits"] == {"memlock": -1, "stack": 67108864}
    assert qwen["environment"]["HF_TOKEN"] == "${HF_TOKEN:-}"
    assert qwen["volumes"] == ["${HOME}/.cache/huggingface:/root/.cache/huggingface"]
    assert all(port.startswith("127.0.0.1:") for s in services.values() for port in s["ports"])
    assert qwen["profiles"] == ["gpu"] and "profiles" not in services["tiny"]
    # an init as PID 1, so a crashed SGLang exits non-zero and restart policies apply
    assert all(service["init"] is True for service in services.values())
    check = qwen["healthcheck"]
    assert "/health_generate" in check["test"][-1]
    # start_period covers every phase's deadline: init 300 + load 3600 + memory 300 + capture 900 + warmup 600
    assert check["start_period"] == "5700s"
    assert services["qwen-mtp"]["healthcheck"]["start_period"] == "6000s"
    tiny = services["tiny"]
    assert tiny["image"] == "kit/sglang:sglang-0.5.23-cpu"
    assert tiny["command"] == list(resolve("tiny").argv)
    assert tiny["environment"] == {"SGLANG_CPU_OMP_THREADS_BIND": "0|1", "SGLANG_USE_CPU_ENGINE": "1"}
    assert tiny["healthcheck"]["test"][:3] == ["CMD", "python", "-c"]  # no curl in the image
    assert tiny["healthcheck"]["start_period"] == "420s"
    assert "deploy" not in tiny


def test_compose_escapes_dollars_from_the_spec():
    spec = resolve("tiny", overrides=["env.PASSWORDISH=a$b"])
    assert compose_document([spec])["services"]["tiny"]["environment"]["PASSWORDISH"] == "a$$b"


def test_portable_path_only_rewrites_the_home(monkeypatch):
    monkeypatch.setenv("HOME", "/home/u")
    assert portable_path("/home/u/.cache/huggingface") == "${HOME}/.cache/huggingface"
    assert portable_path("/home/user2/x") == "/home/user2/x"
    assert portable_path("/data/hf") == "/data/hf"


def test_start_period_is_the_sum_of_phase_deadlines():
    assert start_period_s(resolve("tiny")) == 60 + 120 + 60 + 60 + 120


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
    assert "TimeoutStartSec=6000" in unit
    assert "HF_TOKEN=" not in exec_start
    # systemd restarts it by name after a crash: kit watch follows the next attempt (io.kit.restart).
    assert "Restart=on-failure" in unit and "--label io.kit.restart=on-failure" in exec_start


def test_systemd_escapes_specifiers():
    unit = render_systemd(resolve("tiny", overrides=["env.X=100%", "env.Y=$HOME"]))
    assert "-e X=100%%" in unit and "-e 'Y=$$HOME'" in unit


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
    text = render_lws(resolve("qwen-base"), nodes=2)
    assert "&id" not in text and "*id" not in text
    assert len(list(yaml.safe_load_all(text))) == 2


@pytest.mark.parametrize("kind", ["sglang", "docker", "systemd", "lws"])
@pytest.mark.parametrize("target", ["qwen-base", "qwen-mtp", "tiny"])
def test_every_renderer_renders_every_target(kind, target):
    code, out, err = run_cli(["render", kind, target])
    assert code == 0 and out and not err


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
