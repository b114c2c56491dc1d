"""Safe exposure: 127.0.0.1 by default; anything further needs an API key, passed by variable name.

The key's value never appears in a rendering: the files name the variable, the container reads it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from catalog_helpers import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from kit.errors import InputError
from kit.launch import api_key_from_env, resolve
from kit.render.compose import compose_document, render_compose
from kit.render.docker import check_exposure, docker_run_argv, run_kwargs, server_command
from kit.render.lws import lws_manifests, render_lws
from kit.render.systemd import render_systemd
from kit.spec import client_host, is_loopback

EXPOSED = ["container.publish_address=0.0.0.0"]
WITH_KEY = [*EXPOSED, "container.api_key_env=KIT_API_KEY"]


@pytest.mark.parametrize("kind", ["compose", "docker", "systemd"])
def test_publishing_qwen_beyond_loopback_without_a_key_exits_2(kind):
    code, out, err = run_cli(["render", kind, "qwen-base", "--set", EXPOSED[0]])
    assert code == 2 and not out
    assert err.count("\n") == 1  # one line
    assert "container.publish_address" in err and "container.api_key_env=KIT_API_KEY" in err


def test_every_library_door_refuses_it_too():
    spec = resolve("qwen-base", overrides=EXPOSED)
    for render in (
        lambda: run_kwargs(spec),
        lambda: docker_run_argv(spec),
        lambda: compose_document([spec]),
        lambda: render_systemd(spec),
    ):
        with pytest.raises(InputError) as info:
            render()
        assert info.value.field == "container.publish_address"


def test_loopback_needs_no_key_and_is_the_default():
    spec = resolve("qwen-base")
    assert spec.publish_address == "127.0.0.1" and spec.api_key_env is None
    check_exposure(spec)
    check_exposure(resolve("tiny", overrides=["container.publish_address=::1"]))


def test_with_a_key_compose_passes_it_by_variable_name(monkeypatch):
    monkeypatch.setenv("KIT_API_KEY", "s3cret-value-never-written")
    spec = resolve("qwen-base", overrides=WITH_KEY)
    text = render_compose([spec])
    assert "s3cret-value-never-written" not in text
    service = yaml.safe_load(text)["services"]["qwen-base"]
    assert service["ports"] == ["0.0.0.0:30000:30000"]
    assert service["environment"]["KIT_API_KEY"].startswith("${KIT_API_KEY:?")
    command = service["command"]
    assert command[:2] == ["sh", "-c"] and "--api-key" in command[2] and "$$KIT_API_KEY" in command[2]
    assert command[4:] == list(spec.argv)  # the server argv itself is untouched
    assert "KIT_API_KEY" in service["healthcheck"]["test"][-1]
    assert "Authorization" in service["healthcheck"]["test"][-1]


def test_the_key_wrapper_refuses_an_empty_key_and_hands_it_to_sglang(tmp_path):
    # The wrapper runs in the image's sh; here a stand-in 'python' prints what it was given.
    spec = resolve("tiny", overrides=WITH_KEY)
    command = server_command(spec)
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    empty = subprocess.run(command, capture_output=True, text=True, env={**env, "KIT_API_KEY": ""})
    assert empty.returncode != 0 and "not starting without the API key" in empty.stderr
    done = subprocess.run(command, capture_output=True, text=True, env={**env, "KIT_API_KEY": "k1"})
    args = done.stdout.splitlines()
    assert done.returncode == 0 and args[-2:] == ["--api-key", "k1"]
    assert args[:2] == ["-m", "sglang.launch_server"]


def test_docker_and_systemd_pass_the_key_by_name(monkeypatch):
    monkeypatch.setenv("KIT_API_KEY", "s3cret-value-never-written")
    spec = resolve("qwen-base", overrides=WITH_KEY)
    argv = docker_run_argv(spec)
    assert "-e" in argv and argv[argv.index("KIT_API_KEY") - 1] == "-e"
    assert "-p" in argv and argv[argv.index("-p") + 1] == "0.0.0.0:30000:30000"
    unit = render_systemd(spec)
    assert "s3cret" not in unit and "KIT_API_KEY=... in /etc/kit/qwen-base.env" in unit
    assert "$$KIT_API_KEY" in unit  # systemd would expand a bare $NAME itself
    assert run_kwargs(spec)["ports"] == {"30000/tcp": ("0.0.0.0", None)}


def test_lws_always_takes_the_key_from_a_secret():
    for overrides in ([], WITH_KEY, ["container.api_key_env=TEAM_KEY"]):
        spec = resolve("qwen-base", overrides=overrides)
        name = spec.api_key_env or "KIT_API_KEY"
        for role in ("leaderTemplate", "workerTemplate"):
            pod = lws_manifests(spec)[0]["spec"]["leaderWorkerTemplate"][role]
            container = pod["spec"]["containers"][0]
            assert container["args"][-2:] == ["--api-key", f"$({name})"]
            [entry] = [e for e in container["env"] if e["name"] == name]
            secret = {"secretKeyRef": {"name": "kit-api-key", "key": "key"}}
            assert entry == {"name": name, "valueFrom": secret}
        assert "kubectl create secret generic kit-api-key" in render_lws(spec)


def test_kit_up_needs_the_key_in_the_environment(monkeypatch):
    spec = resolve("tiny", overrides=WITH_KEY)
    monkeypatch.delenv("KIT_API_KEY", raising=False)
    with pytest.raises(InputError) as info:
        api_key_from_env(spec, required=True)
    assert info.value.field == "container.api_key_env" and "export KIT_API_KEY" in info.value.one_line()
    monkeypatch.setenv("KIT_API_KEY", "abc")
    assert api_key_from_env(spec, required=True) == "abc"
    assert api_key_from_env(resolve("tiny")) is None


def test_bad_addresses_and_names_are_input_errors():
    code, _, err = run_cli(["render", "docker", "tiny", "--set", "container.publish_address=everywhere"])
    assert code == 2 and "container.publish_address" in err and "IP address" in err
    code, _, err = run_cli(["render", "docker", "tiny", "--set", "container.api_key_env=not a name"])
    assert code == 2 and "container.api_key_env" in err


@settings(max_examples=60, deadline=None)
@given(st.ip_addresses())
def test_exposure_rule_over_any_address(address):
    spec = resolve("tiny").model_copy(update={"publish_address": str(address)})
    if address.is_loopback:
        check_exposure(spec)
    else:
        with pytest.raises(InputError):
            check_exposure(spec)
    check_exposure(spec.model_copy(update={"api_key_env": "K"}))
    host = client_host(str(address))
    assert (
        host in ("127.0.0.1", "[::1]")
        if (address.is_loopback or address.is_unspecified)
        else str(address) in host
    )
    assert is_loopback(str(address)) == address.is_loopback


@pytest.mark.docker
def test_docker_compose_config_accepts_an_exposed_service_with_its_key(tmp_path):
    docker = shutil.which("docker")
    if not docker or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("docker compose (v2) is not installed (scripts/bootstrap installs it)")
    code, text, _ = run_cli(["render", "compose", "qwen-base", *[a for o in WITH_KEY for a in ("--set", o)]])
    assert code == 0
    path = tmp_path / "compose.yaml"
    path.write_text(text)
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(Path.home())}
    config = [docker, "compose", "-f", str(path), "--profile", "gpu", "config"]
    done = subprocess.run(config, capture_output=True, text=True, env={**base, "KIT_API_KEY": "k-123"})
    assert done.returncode == 0, done.stderr
    service = yaml.safe_load(done.stdout)["services"]["qwen-base"]
    assert service["environment"]["KIT_API_KEY"] == "k-123"  # interpolated from the environment only
    assert service["pull_policy"] == "never" and service["build"]["dockerfile"] == "Dockerfile"
    missing = subprocess.run(config, capture_output=True, text=True, env=base)
    assert missing.returncode != 0 and "KIT_API_KEY" in missing.stderr
