"""After READY, real faults on the CPU rehearsal (tiny, TP 2): the serving watcher's verdicts.

The real CLI in a subprocess with --json; faults are real signals to the real SGLang processes,
found on the host by their titles (`sglang::scheduler_TP1`, set by SGLang with setproctitle):
- `kit up tiny --serve`: TP1 stopped (SIGSTOP) for a few seconds is DEGRADED (the probe answers,
  late) then SERVING again; stopped for good it is HUNG with TP1's stack within the probe's
  deadline + 10 s, a bundle is written and the container removed;
- `kit watch NAME --serve` on a container the watch did not start: TP1 killed is CRASHED naming
  TP1 and the exit, and the container is left (never removed by a watch);
- `kit up tiny --serve`: the server killed (docker kill) is CRASHED with its exit code named.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from kit.launch import resolve
from kit.logs.schema import validate
from kit.runtime.engine import client, image_exists

pytestmark = [pytest.mark.docker, pytest.mark.slow]
KIT = [sys.executable, "-m", "kit"]
PROBE = ("--probe-every", "2", "--probe-timeout", "12", "--probe-budget", "2.5")


@pytest.fixture(autouse=True)
def _rehearsal_image():
    spec = resolve("tiny")
    if not image_exists(spec.image_ref):
        pytest.skip(f"image {spec.image_ref} not built (run 'kit image build {spec.image}')")


class Kit:
    """A kit command in a subprocess, its JSON lines read as they come."""

    def __init__(self, *args: str, env: dict | None = None):
        self.proc = subprocess.Popen(
            [*KIT, *args, "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.lines: queue.Queue[dict] = queue.Queue()
        self.seen: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.put(json.loads(line))

    def wait_for(self, what, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break
                continue
            self.seen.append(line)
            validate(line, "up-events")
            if what(line):
                return line
        stderr = self.proc.stderr.read() if self.proc.poll() is not None and self.proc.stderr else ""
        raise AssertionError(
            f"not seen within {timeout} s; lines: {self.seen[-8:]}; stderr: {stderr[-2000:]}"
        )

    def serving(self, verdict: str, timeout: float) -> dict:
        return self.wait_for(
            lambda line: line.get("type") == "serving" and line["verdict"] == verdict, timeout
        )

    def result(self, timeout: float = 120) -> tuple[int, dict]:
        line = self.wait_for(lambda line: line.get("type") == "result", timeout)
        return self.proc.wait(timeout=60), line

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)


def rank_process(container_name: str, rank: str) -> psutil.Process:
    """The host's view of a rank's scheduler process inside the container."""
    container = client().containers.get(container_name)
    root = psutil.Process(container.attrs["State"]["Pid"])
    for proc in root.children(recursive=True):
        if " ".join(proc.cmdline()).strip() == f"sglang::scheduler_{rank}":
            return proc
    raise AssertionError(f"no sglang::scheduler_{rank} under {container_name}")


def test_a_stopped_rank_is_degraded_then_serving_then_hung_with_its_stack(new_servers):
    kit = Kit("up", "tiny", "--serve", *PROBE)
    try:
        start = kit.wait_for(lambda line: line.get("type") == "start", 120)
        kit.serving("serving", 400)
        tp1 = rank_process(start["container"], "TP1")
        tp1.send_signal(signal.SIGSTOP)  # shorter than the probe's deadline: late, not lost
        time.sleep(6)
        tp1.send_signal(signal.SIGCONT)
        slow = kit.serving("degraded", 30)
        assert "budget" in slow["why"], slow
        kit.serving("serving", 30)
        tp1.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        hung = kit.serving("hung", 12 + 10 + 5)
        assert time.monotonic() - stopped_at <= 12 + 10, hung
        assert hung["ranks"] == ["TP1"] and "stopped" in hung["why"], hung
        code, result = kit.result()
    finally:
        kit.stop()
    assert code == 4, result
    assert result["verdict"] == "hung" and result["phase"] == "serving"
    assert result["serving"]["verdict"] == "hung" and result["serving"]["probes"] >= 3
    # The process state is the direct evidence (SIGSTOP: state T): it comes first; the collective its
    # peer waits in follows.
    causes = [c["id"] for c in result["likely_causes"]]
    assert causes[0] == "rank-stopped" and "serving-collective-stuck" in causes, result["likely_causes"]
    stacks = {row["rank"]: row for row in result["stacks"]}
    assert stacks["TP1"]["kind"] != "unavailable", result["stacks"]  # a stopped process's stack too
    bundle = Path(result["bundle"])
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
    assert any(name.endswith("TP1.txt") or "TP1" in name for name in names if "stacks" in name), names
    assert result["container_removed"] is True
    assert not new_servers()


def test_watch_names_a_killed_rank_crashed_and_leaves_the_container(new_servers):
    from kit.startup.server import start_server

    server = start_server(resolve("tiny"))
    kit = Kit("watch", server.name, "--serve", *PROBE)
    try:
        kit.serving("serving", 400)
        rank_process(server.name, "TP1").kill()
        crashed = kit.serving("crashed", 30)
        code, result = kit.result()
    finally:
        kit.stop()
    assert code == 1, result
    # TP0 notices its peer gone (gloo: connection reset) and SGLang kills the whole tree: the
    # server's own end names the exit, TP1 among the ranks gone first.
    assert "TP1" in crashed["ranks"], crashed
    assert "SIGKILL" in crashed["why"], crashed
    assert result["bundle"] and Path(result["bundle"]).is_file()
    left = new_servers()
    assert [c.name for c in left] == [server.name]  # the watch never removes what it watches


def test_the_server_killed_is_crashed_with_its_exit(new_servers):
    kit = Kit("up", "tiny", "--serve", *PROBE)
    try:
        start = kit.wait_for(lambda line: line.get("type") == "start", 120)
        kit.serving("serving", 400)
        client().containers.get(start["container"]).kill()
        crashed = kit.serving("crashed", 30)
        code, result = kit.result()
    finally:
        kit.stop()
    assert code == 1, result
    assert "137" in crashed["why"] and "SIGKILL" in crashed["why"], crashed
    assert result["verdict"] == "crashed" and result["phase"] == "serving"
    assert not new_servers()
