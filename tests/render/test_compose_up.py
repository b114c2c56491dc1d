"""`docker compose up tiny --wait` reaches healthy: the generated compose.yaml's healthcheck works on
the real rehearsal server, and the kit's label finds the container."""

from __future__ import annotations

import secrets
import shutil
import subprocess

import httpx
import pytest

from kit import paths
from kit.launch import resolve
from kit.runtime.engine import LABEL_TARGET, client

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_compose_up_tiny_waits_until_healthy_then_answers(built_image):
    spec = resolve("tiny")
    built_image(spec.image_ref, spec.image)
    docker = shutil.which("docker")
    if not docker or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("docker compose (v2) is not installed (scripts/bootstrap installs it)")
    project = f"kit-test-{secrets.token_hex(3)}"
    compose = [docker, "compose", "-p", project, "-f", str(paths.compose_file())]
    try:
        up = subprocess.run(
            [*compose, "up", "tiny", "--detach", "--wait", "--wait-timeout", "480"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert up.returncode == 0, up.stdout + up.stderr
        [container] = client().containers.list(
            filters={"label": [f"{LABEL_TARGET}=tiny", f"com.docker.compose.project={project}"]}
        )
        assert container.attrs["State"]["Health"]["Status"] == "healthy"
        host_port = container.attrs["NetworkSettings"]["Ports"]["30000/tcp"][0]
        assert host_port["HostIp"] == "127.0.0.1"
        response = httpx.post(
            f"http://127.0.0.1:{host_port['HostPort']}/generate",
            timeout=60,
            json={"text": "Hello", "sampling_params": {"max_new_tokens": 4, "temperature": 0}},
        )
        assert response.status_code == 200 and response.json()["text"]
    finally:
        subprocess.run([*compose, "down", "--volumes", "--timeout", "5"], capture_output=True, timeout=120)
    assert not client().containers.list(all=True, filters={"label": f"com.docker.compose.project={project}"})
