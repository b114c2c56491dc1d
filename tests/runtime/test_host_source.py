"""The host source over real processes (no Docker): a process tree's counters, a compiler child, the
bytes its processes write (compile progress), its stacks; and `kit watch --unit` / `kit bundle create --unit`
where systemd is not running: `systemctl` and `journalctl` are stood in by scripts that print
recorded output (tests/fixtures/journal/), while the unit's main process is a real one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

from kit.runtime.host_source import HostSource
from kit.runtime.processes import py_spy
from kit.runtime.source import Source

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "journal"
KIT = [sys.executable, "-m", "kit"]

# A child that writes a kernel into the cache 3 s after it starts, then lives on: the compile's bytes
# come from a process of the tree other than the one first sampled as the server.
WRITER = (
    "import os, sys, time; time.sleep(3); out = open(os.path.join(sys.argv[1], 'kernel.so'), 'wb'); "
    "out.write(os.urandom(65536)); out.flush(); time.sleep(300)"
)
SERVER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    cache = os.environ["TRITON_CACHE_DIR"]
    os.makedirs(cache, exist_ok=True)
    child = subprocess.Popen([sys.argv[1], "300"])  # a 'cc1plus' under the server
    writer = subprocess.Popen([sys.executable, "-c", sys.argv[2], cache])
    print(time.strftime("[%Y-%m-%d %H:%M:%S]") + " server_args=ServerArgs(model_path='x')", flush=True)
    while True:
        sum(range(200000))
        time.sleep(0.05)
    """
)


@pytest.fixture
def server(tmp_path):
    """A real process tree: a Python 'server' writing a log line, with a compiler-named child."""
    compiler = tmp_path / "cc1plus"
    compiler.symlink_to("/bin/sleep")
    log = tmp_path / "server.log"
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "triton"), "HF_TOKEN": "hf_" + "b" * 34}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(compiler), WRITER],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        deadline = time.monotonic() + 20
        while "server_args" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        yield process, log, tmp_path
    finally:
        for child in _children(process.pid):
            subprocess.run(["kill", str(child)], check=False)
        process.kill()
        process.wait(timeout=10)


def _children(pid: int) -> list[int]:
    import psutil

    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def test_the_tree_its_counters_its_compiler_and_its_compile_cache(server):
    process, log, _ = server
    source = HostSource.for_pid(process.pid)  # no --log: its stdout is a regular file
    try:
        assert isinstance(source, Source)  # the watcher's protocol, as the other two sources
        assert source.log.follower.path == log
        lines = [text for _, text in source.read()]
        assert any("server_args" in line for line in lines)
        first = source.sample(source.clock())  # before the writer child wrote (it waits 3 s)
        assert first is not None and first.compile_bytes == 0  # the first reading is the baseline
        deadline = time.monotonic() + 20
        second = first
        while (second.compile_bytes or 0) < 65536 and time.monotonic() < deadline:
            time.sleep(0.5)
            second = source.sample(source.clock())
        assert second is not None
        assert second.cpu_seconds > first.cpu_seconds > 0
        assert second.compilers == 1  # the cc1plus child, by its process name
        # the child's 64 KiB, from its own /proc/PID/io write_bytes (no cache walk)
        assert second.compile_bytes is not None and second.compile_bytes >= 65536
        assert second.net_rx_bytes is None  # the host's network namespace: not the server's own
        assert source.state().running
        stacks = source.stacks(lambda title: title.startswith(sys.executable) and "TRITON_CACHE_DIR" in title)
        assert [s.pid for s in stacks] == [process.pid]
        if py_spy() is not None and os.geteuid() == 0:
            assert "<module>" in stacks[0].text  # a real py-spy dump of the real process
        else:
            assert stacks[0].text.startswith("(no stack:")
    finally:
        source.close()
    process.kill()
    process.wait(timeout=10)
    assert not source.state().running


def test_a_pid_whose_output_is_not_a_file_needs_log(tmp_path):
    process = subprocess.Popen(["sleep", "30"], stdout=subprocess.PIPE)
    try:
        done = subprocess.run(
            [*KIT, "watch", "--pid", str(process.pid)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2
        assert "--log" in done.stderr and "pipe:" in done.stderr and "Traceback" not in done.stderr
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize(
    "args",
    [
        ["watch", "somecontainer", "--pid", "1"],
        ["watch", "--pid", "1", "--unit", "x"],
        ["watch", "--log", "/tmp/x.log"],
        ["watch", "--pid", "1", "--image", "sglang-0.5.23-cpu"],
        ["bundle", "create", "--pid", "1", "--last"],
        ["bundle", "create", "somecontainer", "--log", "/tmp/x.log"],
    ],
)
def test_bad_combinations_are_one_line_and_exit_2(args):
    done = subprocess.run([*KIT, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


# -- a unit, where systemd is not running ---------------------------------------------------------

FAKE_JOURNALCTL = """#!{python}
import json, sys, time
open({args!r}, "a").write(json.dumps(sys.argv[1:]) + "\\n")
lines = open({fixture!r}).read().splitlines()
last = int(json.loads(lines[-1])["__REALTIME_TIMESTAMP"])
shift = int(time.time() * 1e6) - 1_000_000 - last  # the recording, ending a second ago
for line in lines:
    entry = json.loads(line)
    entry["__REALTIME_TIMESTAMP"] = str(int(entry["__REALTIME_TIMESTAMP"]) + shift)
    print(json.dumps(entry), flush=True)
if "--follow" in sys.argv:
    time.sleep(300)
"""

FAKE_SYSTEMCTL = """#!/bin/sh
case "$1" in
  show) cat {show!r} ;;
  cat) cat {unit!r} ;;
  *) exit 1 ;;
esac
"""


@pytest.fixture
def fake_systemd(tmp_path, monkeypatch):
    """journalctl and systemctl that print recorded output; MainPID is a real process."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    main = subprocess.Popen(["sleep", "300"], stdout=subprocess.DEVNULL)
    lines = (FIXTURES / "sglang-tiny-ready.json").read_text().splitlines()
    span = (
        int(json.loads(lines[-1])["__REALTIME_TIMESTAMP"]) - int(json.loads(lines[0])["__REALTIME_TIMESTAMP"])
    ) / 1e6
    show = (FIXTURES / "sglang-tiny.show.txt").read_text()
    show = show.replace("@MAINPID@", str(main.pid))
    show = show.replace("@STARTMONO@", str(int((time.monotonic() - span - 1) * 1e6)))
    (tmp_path / "show.txt").write_text(show)
    args = tmp_path / "journalctl.args"
    journalctl = FAKE_JOURNALCTL.format(
        python=sys.executable, args=str(args), fixture=str(FIXTURES / "sglang-tiny-ready.json")
    )
    systemctl = FAKE_SYSTEMCTL.format(
        show=str(tmp_path / "show.txt"), unit=str(FIXTURES / "sglang-tiny.service")
    )
    for name, text in (("journalctl", journalctl), ("systemctl", systemctl)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "KIT_CACHE_DIR": str(tmp_path / "cache")}
    try:
        yield env, args, main.pid
    finally:
        main.kill()
        main.wait()


def test_kit_watch_unit_follows_the_journal_to_ready(fake_systemd):
    env, args, main = fake_systemd
    done = subprocess.run(
        [*KIT, "watch", "--unit", "sglang-tiny", "--target", "tiny", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    result = json.loads(done.stdout.splitlines()[-1])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (result["verdict"], result["container"]) == ("ready", "sglang-tiny.service")
    assert 60 < result["startup_s"] < 200  # the recording's own times, not the watch's
    asked = json.loads(args.read_text().splitlines()[0])
    assert asked[:2] == ["--unit", "sglang-tiny.service"] and "--since" in asked and "--follow" in asked
    assert any("journal of sglang-tiny.service" in note for note in result["notes"])
    os.kill(main, 0)  # the watched process was left alone


def test_kit_bundle_create_unit_holds_the_unit_file_and_masks_its_secret(fake_systemd, tmp_path):
    env, _, _ = fake_systemd
    out = tmp_path / "unit.tar.gz"
    done = subprocess.run(
        [*KIT, "bundle", "create", "--unit", "sglang-tiny", "--target", "tiny", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    with tarfile.open(out) as tar:
        data = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    fingerprint = json.loads(data["fingerprint.json"])
    assert fingerprint["process"]["unit"] == "sglang-tiny.service"
    assert fingerprint["process"]["restart"] == "on-failure"  # the drop-in's
    assert "ExecStart=/srv/sglang/venv/bin/python" in fingerprint["process"]["unit_file"]
    assert json.loads(data["result.json"])["verdict"] == "ready"
    assert all(b"hf_" + b"a" * 34 not in blob for blob in data.values())
