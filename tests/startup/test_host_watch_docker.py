"""`kit watch --pid`, `kit bundle create --pid` and `kit repro` of a host bundle, over a real SGLang
process tree from the rehearsal image. A container's processes are host processes: the test starts
the rehearsal server in a container of its own (its output going to a file on a bind mount) and
watches the launcher's host PID and that file, as it would a server under systemd. The container
is the test's, by label; nothing is left behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time

import psutil
import pytest

from kit.launch import resolve
from kit.runtime.engine import client
from kit.runtime.processes import py_spy
from kit.runtime.server import RUN_LABELS

pytestmark = [pytest.mark.docker, pytest.mark.slow]
KIT = [sys.executable, "-m", "kit"]


@pytest.fixture(autouse=True)
def _rehearsal_image(built_image):
    spec = resolve("tiny")
    built_image(spec.image_ref, spec.image)


def start_host_server(tmp_path, extra: tuple[str, ...] = ()) -> tuple[object, int, str]:
    """The rehearsal's launch in a container, stdout into a file on a bind mount: (container, the
    launcher's host PID, the log's host path)."""
    spec = resolve("tiny")
    argv = " ".join([*spec.argv, *extra])
    key, _, value = os.environ[RUN_LABELS].partition("=")  # new_servers' label: cleaned up by it
    logs = tmp_path / "logs"
    logs.mkdir()
    container = client().containers.run(
        spec.image_ref,
        ["sh", "-c", f"exec {argv} > /logs/server.log 2>&1"],
        detach=True,
        init=True,
        environment=dict(spec.env),
        labels={key: value},
        volumes={str(logs): {"bind": "/logs", "mode": "rw"}},
        shm_size="2g",
    )
    container.reload()
    init = psutil.Process(container.attrs["State"]["Pid"])
    deadline = time.monotonic() + 60
    while not init.children() and time.monotonic() < deadline:
        time.sleep(0.2)
    launcher = init.children()[0]
    assert "sglang.launch_server" in " ".join(launcher.cmdline())
    return container, launcher.pid, str(logs / "server.log")


def kit(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([*KIT, *args], capture_output=True, text=True, timeout=timeout)


def last_json(proc: subprocess.CompletedProcess, kind: str = "result") -> dict:
    lines = [json.loads(line) for line in proc.stdout.splitlines() if f'"type":"{kind}"' in line]
    assert lines, f"no {kind}: {proc.stdout[-1500:]} {proc.stderr[-1500:]}"
    return lines[-1]


def test_watch_a_host_process_to_ready_then_bundle_it_and_repro_it_in_the_nearest_image(
    new_servers, tmp_path
):
    container, pid, log = start_host_server(tmp_path)
    try:
        # The launch window is widened for this machine's load only (the server's imports can get
        # under a quarter of a core for minutes when many sessions share two); the catalog's stays.
        watched = kit(
            "watch", "--pid", str(pid), "--log", log, "--target", "tiny", "--stall", "launch=900", "--json"
        )
        result = last_json(watched)
        assert watched.returncode == 0, result
        assert (result["verdict"], result["container"]) == ("ready", f"pid {pid}")
        assert {"TP0", "TP1"} <= {r["rank"] for r in result["ranks"]}
        assert psutil.pid_exists(pid)  # watched, never touched

        bundle = tmp_path / "host.tar.gz"
        made = kit("bundle", "create", "--pid", str(pid), "--log", log, "-o", str(bundle))
        assert made.returncode == 0, made.stderr
        with tarfile.open(bundle) as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith("/fingerprint.json"))
            fingerprint = json.loads(tar.extractfile(member).read())
        versions = fingerprint["versions"]
        assert (versions["sglang"], versions["torch"], versions["python"]) == (
            "0.5.23",
            "2.13.0+cpu",
            "python3.11",
        )
        assert fingerprint["launch"]["argv"][1:3] == ["-m", "sglang.launch_server"]
        assert "--model-path" in fingerprint["launch"]["argv"]
        assert fingerprint["process"]["exe"] == "/usr/bin/python3.11"
        assert fingerprint["launch"]["target"] == "tiny"  # found by the model path the argv serves
    finally:
        container.remove(force=True)

    replay = kit("repro", str(bundle), "--json")
    plan, outcome = last_json(replay, "plan"), last_json(replay)
    assert plan["nearest_image"]["manifest"] == "sglang-0.5.23-cpu"
    assert plan["nearest_image"]["differences"] == []  # the rehearsal's own environment
    assert plan["image"]["ref"] == resolve("tiny").image_ref  # the plan says which build it runs
    assert any("nearest kit image sglang-0.5.23-cpu" in note for note in plan["nearest_image"]["notes"])
    # The replay runs under the bundle's own limits (the catalog's): on a loaded machine its launch
    # may be judged HUNG, so the verdict is compared, not required to be READY.
    assert [c["what"] for c in outcome["repro"]["compared"]] == ["verdict", "phase", "stuck ranks"]
    assert outcome["repro"]["reproduced"] == (outcome["verdict"] == "ready"), outcome["repro"]
    assert not new_servers()


def test_a_two_node_launch_whose_second_node_never_starts_is_hung_in_init_with_its_stack(
    new_servers, tmp_path
):
    """Node 0 of two: its TP0 waits in torch.distributed's rendezvous for TP1, which no node starts.
    Quiet (no CPU counted in init, no reads): HUNG after the init window, with the waiting rank's
    stack read by py-spy from this host when ptrace is allowed."""
    extra = ("--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "127.0.0.1:29555")
    container, pid, log = start_host_server(tmp_path, extra)
    try:
        watched = kit("watch", "--pid", str(pid), "--log", log, "--target", "tiny", "--json")
        result = last_json(watched)
        assert watched.returncode == 4, result
        assert (result["verdict"], result["phase"]) == ("hung", "init")
        assert psutil.pid_exists(pid)  # a verdict never stops what is watched
        stacks = {s["rank"]: s for s in result["stacks"]}
        if py_spy() is not None and os.geteuid() == 0:
            assert stacks["TP0"]["kind"] == "rendezvous", stacks
            assert "TP0" in result["waiting_ranks"]
        else:
            assert all(s["kind"] == "unavailable" for s in stacks.values())
        assert result["bundle"] and os.path.exists(result["bundle"])
    finally:
        container.remove(force=True)
    assert not new_servers()
