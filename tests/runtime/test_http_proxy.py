"""The kit's requests to a server it watches go direct, whatever proxy the host's environment names.

A real local HTTP server (an SSE stream shaped like SGLang's /v1/chat/completions) and a proxy
variable pointing at a closed loopback port: the kit's helpers reach the server; a plain httpx call
that trusts the environment (the control) goes to the dead proxy and fails.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from kit.runtime import http


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again when the socket is


class _Server(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/generate":
            body = json.dumps({"text": " world"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for piece in ("Hel", "lo"):
            chunk = {"choices": [{"delta": {"content": piece}}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def server_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def dead_proxy(monkeypatch: pytest.MonkeyPatch) -> str:
    proxy = f"http://127.0.0.1:{_closed_port()}"
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, proxy)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    return proxy


def test_control_a_client_that_trusts_the_environment_goes_to_the_dead_proxy(server_url, dead_proxy):
    with pytest.raises(httpx.ConnectError):
        httpx.get(server_url + "/health", timeout=5.0)


def test_first_token_health_and_generate_go_direct_past_a_proxy_variable(server_url, dead_proxy):
    token = http.chat_first_token(server_url, "tiny", timeout_s=10.0)
    assert token.text == "Hello" and token.chunks == 2
    assert http.health(server_url, "/health", timeout_s=5.0) == 200
    assert http.generate_text(server_url, "Hello", timeout_s=5.0) == " world"
    assert http.server_get(server_url + "/server_info", timeout_s=5.0).json() == {"ok": True}
