"""Things going away mid-way: the Docker engine, a kept container watched later, and cleanup by label.

The engine is made to vanish for real: `kit up` talks to it through a TCP proxy on 127.0.0.1 that
the test shuts down mid start-up (the engine itself keeps running, so the test can clean up).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from kit.launch import resolve

pytestmark = [pytest.mark.docker, pytest.mark.slow]
KIT = [sys.executable, "-m", "kit"]
DOCKER_SOCKET = "/var/run/docker.sock"


@pytest.fixture(autouse=True)
def _rehearsal_image(built_image):
    spec = resolve("tiny")
    built_image(spec.image_ref, spec.image)


class EngineProxy:
    """127.0.0.1:PORT -> the engine's unix socket; close() cuts every connection at once."""

    def __init__(self):
        if not os.path.exists(DOCKER_SOCKET):
            pytest.skip(f"the engine does not listen on {DOCKER_SOCKET}")
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed.is_set():
            try:
                client_side, _ = self.listener.accept()
            except OSError:
                return
            engine_side = socket.socket(socket.AF_UNIX)
            engine_side.connect(DOCKER_SOCKET)
            self.sockets += [client_side, engine_side]
            for a, b in ((client_side, engine_side), (engine_side, client_side)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self):
        self.closed.set()
        with contextlib.suppress(OSError):  # shutdown, not just close: it wakes the blocked accept()
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for s in self.sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass


def test_the_engine_going_away_is_one_line_naming_the_container_and_no_traceback(new_servers):
    proxy = EngineProxy()
    env = {**os.environ, "DOCKER_HOST": f"tcp://127.0.0.1:{proxy.port}"}
    proc = subprocess.Popen(
        [*KIT, "up", "tiny"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        for line in proc.stdout:  # mid start-up: after the first milestone line, whenever it comes
            if " init.begin" in line:
                break
        assert new_servers(), proc.communicate()
        proxy.close()
        stdout, stderr = proc.communicate()  # the kit notices the engine is gone and ends
    finally:
        proxy.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, stdout + stderr
    assert "Traceback" not in stderr
    error_lines = [line for line in stderr.splitlines() if line.startswith("kit: error:")]
    assert len(error_lines) == 1, stderr
    assert "the Docker engine stopped answering" in error_lines[0]
    name = new_servers()[0].name  # the engine never really left: the container is there to be named
    assert name in error_lines[0]
    assert f"'kit down {name}'" in error_lines[0]  # that container only: the engine may be shared


def test_a_kept_container_can_be_watched_listed_logged_and_brought_down(new_servers):
    up = subprocess.run(
        [*KIT, "up", "tiny", "--keep", "--fault", "hang-init:rank=1", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    result = json.loads([line for line in up.stdout.splitlines() if '"type":"result"' in line][-1])
    assert up.returncode == 4 and result["container_removed"] is False
    name = result["container"]

    listed = subprocess.run([*KIT, "ps", "--json"], capture_output=True, text=True, timeout=300, check=True)
    rows = json.loads(listed.stdout)
    assert [r["target"] for r in rows if r["name"] == name] == ["tiny"]

    # kit watch replays the log of a container it did not start, and names the same hang.
    watched = subprocess.run(
        [*KIT, "watch", name, "--json", "--stall", "init=5"], capture_output=True, text=True, timeout=600
    )
    verdict = json.loads([line for line in watched.stdout.splitlines() if '"type":"result"' in line][-1])
    assert watched.returncode == 4, watched.stdout + watched.stderr
    assert (verdict["verdict"], verdict["phase"]) == ("hung", "init")
    assert verdict["missing_ranks"] == ["TP1"]
    assert verdict["container_removed"] is False

    logs = subprocess.run([*KIT, "logs", name, "--tail", "50"], capture_output=True, text=True, timeout=300)
    assert "Init parallel begin" in logs.stdout

    down = subprocess.run([*KIT, "down", name], capture_output=True, text=True, timeout=300)
    assert down.returncode == 0 and f"removed {name}" in down.stdout
    assert not new_servers()


def test_down_with_nothing_named_is_one_line_exit_2():
    proc = subprocess.run([*KIT, "down"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("kit: error: CONTAINERS: nothing to remove")
    assert proc.stderr.count("\n") == 1


def test_kit_smoke_prints_a_passing_table_for_tiny(new_servers):
    proc = subprocess.run(
        # Two starts: the checks' own, and the tool call's (tiny's smoke.tool_call_overrides).
        [*KIT, "smoke", "tiny", "--no-faults", "--json"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = proc.stdout.strip().splitlines()
    assert lines, f"kit smoke printed no report (exit {proc.returncode}): {proc.stderr[-3000:]}"
    report = json.loads(lines[-1])
    assert proc.returncode == 0, report
    names = [c["name"] for c in report["checks"]]
    assert names == [
        "distributed init",
        "first token /v1/chat/completions",
        "first token /generate",
        "health /health_generate",
        "greedy answers repeat",
        "structured output (JSON schema)",
        "serving for 10 s",
        "tool call parsed",  # on a start of its own (tiny's smoke.tool_call_overrides)
    ]
    assert all(c["ok"] for c in report["checks"])
    assert not new_servers()
