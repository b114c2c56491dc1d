"""The compile cache and GPU access against the real engine: a server started by the kit mounts the
cache volume with its variables and has SYS_PTRACE; removing the server (what `kit down` and
`kit down --all` do) keeps the volume; `kit cache clear` refuses while a container uses it; a GPU way
the engine refuses is left behind for the next, and nothing is left when none works.

Each test uses a volume of its own (KIT_COMPILE_CACHE_VOLUME) and labels its containers
(KIT_RUN_LABELS): the engine is shared, and the user's cache is not the tests' to clear.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import sys

import pytest

from kit.runtime.compile_cache import ENV, MOUNT, VOLUME_ENV
from kit.runtime.server import RUN_LABELS

pytestmark = pytest.mark.docker
KIT = [sys.executable, "-m", "kit"]


@pytest.fixture
def isolated(monkeypatch):
    """(volume, label filter) of this test; both removed afterwards."""
    from docker.errors import NotFound

    from kit.runtime.engine import client

    token = secrets.token_hex(4)
    volume, mark = f"kit-compile-cache-test-{token}", f"io.kit.test={token}"
    monkeypatch.setenv(VOLUME_ENV, volume)
    monkeypatch.setenv(RUN_LABELS, mark)
    yield volume, mark
    for container in client().containers.list(all=True, filters={"label": mark}):
        container.remove(force=True)
    with contextlib.suppress(NotFound):
        client().volumes.get(volume).remove(force=True)


def kit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*KIT, *args], capture_output=True, text=True, timeout=120)


def test_a_kit_server_mounts_the_cache_has_ptrace_and_removing_it_keeps_the_volume(isolated):
    from kit.launch import resolve
    from kit.runtime.engine import client
    from kit.runtime.inventory import remove_servers
    from kit.startup.server import start_server

    volume, _mark = isolated
    server = start_server(resolve("tiny"))
    attrs = client().containers.get(server.name).attrs
    mounts = {m.get("Name"): m for m in attrs["Mounts"] if m["Type"] == "volume"}
    assert mounts[volume]["Destination"] == MOUNT and mounts[volume]["RW"]
    assert "SYS_PTRACE" in attrs["HostConfig"]["CapAdd"]
    env = dict(item.split("=", 1) for item in attrs["Config"]["Env"])
    assert all(env[key] == value for key, value in ENV.items())
    # SGLang writes into it as it starts: the volume is a real, writable folder in the container.
    code, out = server.container.exec_run(["sh", "-c", f"touch {MOUNT}/probe && ls {MOUNT}"])
    assert code == 0 and "probe" in out.decode()

    shown = json.loads(kit("cache", "show", "--json").stdout)
    assert shown["volume"] == volume and shown["exists"]
    assert [u["name"] for u in shown["used_by"]] == [server.name] and shown["used_by"][0]["kit"]
    refused = kit("cache", "clear")
    assert refused.returncode == 1 and f"in use by {server.name}" in refused.stderr
    assert client().volumes.get(volume)  # still there

    # kit down NAME and kit down --all remove a server the same way (remove(force, v=True)): the
    # named volume stays (v=True removes anonymous volumes only).
    assert remove_servers((server.name,), all_=False).removed == (server.name,)
    assert client().volumes.get(volume).name == volume
    cleared = json.loads(kit("cache", "clear", "--json").stdout)
    assert cleared == {"volume": volume, "removed": True, "freed_bytes": cleared["freed_bytes"]}
    assert not json.loads(kit("cache", "show", "--json").stdout)["exists"]
    again = kit("cache", "clear")
    assert again.returncode == 0 and "nothing to clear" in again.stdout


def test_refused_gpu_ways_are_tried_in_order_and_none_is_left_behind(isolated):
    """This engine has no NVIDIA toolkit: a GPU request and a CDI request are both refused. Each is
    tried, each refusal is reported, and no container (nor the cache volume's user) is left."""
    from kit.errors import EnvironmentProblem
    from kit.launch import resolve
    from kit.render.docker import server_runs
    from kit.runtime import server as runtime
    from kit.runtime.engine import client
    from kit.runtime.host import GpuPlan, GpuWay

    _, mark = isolated
    spec = resolve("tiny").model_copy(update={"gpus": 1})  # the CPU image, asked for a GPU
    plan = GpuPlan((GpuWay("cdi", "a trial", False, 1), GpuWay("gpu-request", "a trial", False, 1)))
    name = f"kit-tiny-gpu-{secrets.token_hex(3)}"
    runs = server_runs(spec, plan, name=name, labels=runtime.run_labels())
    with pytest.raises(EnvironmentProblem) as raised:
        runtime.start_container(spec, runs, name=name, session="test")
    hint = raised.value.hint or ""
    assert "CDI device nvidia.com/gpu=0:" in hint and "a GPU device request (docker run --gpus 1):" in hint
    assert not client().containers.list(all=True, filters={"label": mark})
