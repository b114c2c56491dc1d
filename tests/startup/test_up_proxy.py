"""`kit up` with a proxy in the host's environment: the kit's own requests to the server go direct.

Before, `HTTP_PROXY=... kit up tiny` reached READY and then called the healthy server FAILED: its
first-token request for 127.0.0.1 went to the proxy (here a closed loopback port: "Connection
refused"). The real CLI in a subprocess, the real rehearsal server.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from kit.launch import resolve
from kit.runtime.engine import image_exists

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_up_tiny_with_a_dead_proxy_in_the_environment_is_ready_with_a_first_token(new_servers):
    spec = resolve("tiny")
    if not image_exists(spec.image_ref):
        pytest.skip(f"image {spec.image_ref} not built (run 'kit image build {spec.image}')")
    proxy = f"http://127.0.0.1:{_closed_port()}"
    env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
    env |= {"HTTP_PROXY": proxy, "http_proxy": proxy, "HTTPS_PROXY": proxy, "https_proxy": proxy}
    proc = subprocess.run(
        [sys.executable, "-m", "kit", "up", "tiny", "--json"],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    [result] = [line for line in lines if line.get("type") == "result"]
    assert proc.returncode == 0, result
    assert result["verdict"] == "ready"
    assert 0 < result["first_token_s"] < 30 and result["reply"]
    assert not new_servers()
