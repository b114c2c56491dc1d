"""A server whose own environment names a proxy (and no NO_PROXY): the proxy cause first, early.

SGLang's warm-up asks the server's own /model_info through `requests`, which honours http_proxy.
A proxy written here (python http.server answering 403 to everything, as a corporate proxy
refusing an unknown host does) listens on the Docker bridge; the rehearsal server is started
with HTTP_PROXY/http_proxy pointing at it. Before, `kit watch` waited out the warm-up for 120 s and
blamed an all-reduce; now the verdict comes within seconds of the evidence, the proxy cause first.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from kit.launch import resolve
from kit.runtime.engine import client, image_exists

pytestmark = [pytest.mark.docker, pytest.mark.slow]
KIT_UP = [sys.executable, "-m", "kit", "up", "tiny", "--json"]


class _Refusing(BaseHTTPRequestHandler):
    asked: ClassVar[list[str]] = []

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        _Refusing.asked.append(self.path)
        body = b"<html><body>403 Forbidden: access denied by the proxy</body></html>"
        self.send_response(403)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET


def _bridge_gateway() -> str:
    config = client().networks.get("bridge").attrs["IPAM"]["Config"][0]
    if config.get("Gateway"):
        return config["Gateway"]
    return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))


def test_a_403_proxy_in_the_servers_env_is_named_first_before_the_warmup_deadline(new_servers):
    spec = resolve("tiny")
    if not image_exists(spec.image_ref):
        pytest.skip(f"image {spec.image_ref} not built (run 'kit image build {spec.image}')")
    gateway = _bridge_gateway()
    proxy = ThreadingHTTPServer((gateway, 0), _Refusing)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    url = f"http://{gateway}:{proxy.server_address[1]}"
    try:
        started = time.monotonic()
        proc = subprocess.run(
            [*KIT_UP, "--set", f"env.HTTP_PROXY={url}", "--set", f"env.http_proxy={url}"],
            capture_output=True,
            text=True,
            timeout=400,
        )
        took = time.monotonic() - started
    finally:
        proxy.shutdown()
        proxy.server_close()
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    [result] = [line for line in lines if line.get("type") == "result"]
    assert result["verdict"] == "hung", result
    assert result["phase"] == "warmup"
    assert result["likely_causes"][0]["id"] == "warmup-proxy", result["likely_causes"]
    assert "NO_PROXY does not cover 127.0.0.1" in " ".join(result["evidence"])
    assert f"http://127.0.0.1:{spec.port}/model_info" in _Refusing.asked  # SGLang's own warm-up
    http_up = [m for m in lines if m.get("type") == "milestone" and m.get("milestone") == "http.up"]
    assert http_up, "the server's HTTP server came up"
    # The verdict (and the clean-up after it) well before SGLang's 120 s of warm-up retries.
    assert took - http_up[0]["t"] < 90, (took, http_up[0]["t"])
    assert not new_servers()
