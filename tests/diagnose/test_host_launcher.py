"""A PID that wraps the server leads to the SGLang launcher under it, with real process trees.

Each test starts a real wrapper on this host (a shell with `-c`, a pipe, a Python wrapper as `conda
run` is) around a real Python whose argv is the launcher's (`python -m sglang.launch_server ...`,
from a folder on PYTHONPATH holding a `sglang` package and its dist-info). The fingerprint, the
bundle and the version read come from that launcher, never from the wrapper; an sglang whose
release cannot be read leaves the dialect unknown.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import psutil
import pytest

from kit.diagnose.fact_sources import HostProcessFacts
from kit.diagnose.fingerprint import build, is_unknown
from kit.diagnose.host_record import bundle_of_host
from kit.dialects import dialect_for
from kit.logs import PhaseLimits
from kit.runtime.processes import find_launcher, sglang_launcher_argv

LAUNCH = "-m sglang.launch_server --model-path Qwen/Qwen3-0.6B --port 31999"


def _site(tmp_path: Path, version: str | None) -> Path:
    site = tmp_path / "site-packages"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    # The launcher's stand-in: says it started, then waits (as a hung server would).
    (site / "sglang" / "launch_server.py").write_text(
        "import time\nprint('[2026-12-04 21:53:13] server_args=ServerArgs(...)', flush=True)\n"
        "time.sleep(120)\n"
    )
    if version:
        meta = site / f"sglang-{version}.dist-info"
        meta.mkdir()
        (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n\n")
    return site


WRAPPERS = {
    # a shell that does not exec its last command (`; true`): bash stays the parent
    "bash-c": lambda py: ["bash", "-c", f"cd / && {py} {LAUNCH}; true"],
    # its output piped through cat: stdout is a pipe
    "sh-pipe": lambda py: ["sh", "-c", f"{py} {LAUNCH} | cat"],
    # a Python that runs another (conda run, uv run): its own argv names the launcher too
    "python-wrapper": lambda py: [
        py,
        "-c",
        "import subprocess, sys; subprocess.run(sys.argv[1:])",
        py,
        *LAUNCH.split(),
    ],
}


@pytest.fixture
def wrapped(tmp_path, request):
    procs: list[subprocess.Popen] = []

    def start(kind: str, version: str | None = "0.5.23") -> tuple[int, int]:
        site = _site(tmp_path, version)
        proc = subprocess.Popen(
            WRAPPERS[kind](sys.executable),
            env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        procs.append(proc)
        proc.stdout.readline()  # the launcher is up
        [launcher] = [
            p for p in psutil.Process(proc.pid).children(recursive=True) if sglang_launcher_argv(p.cmdline())
        ]
        return proc.pid, launcher.pid

    yield start
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.parametrize("kind", WRAPPERS)
def test_the_launcher_under_a_wrapper_is_found_and_its_versions_read(wrapped, kind):
    wrapper, launcher = wrapped(kind)
    assert find_launcher(wrapper) == launcher
    assert find_launcher(launcher) == launcher
    built = build(HostProcessFacts(wrapper, None, unit=None, gpus=None, by="test"), PhaseLimits())
    fingerprint, argv = built.fingerprint, built.raw_argv
    assert fingerprint["process"]["pid"] == launcher and fingerprint["process"]["given_pid"] == wrapper
    assert fingerprint["versions"]["sglang"] == "0.5.23"
    assert fingerprint["launch"]["dialect"] == dialect_for("0.5.23").name
    assert argv[1:3] == ["-m", "sglang.launch_server"]


def test_an_unreadable_release_leaves_the_dialect_unknown(wrapped):
    wrapper, _ = wrapped("bash-c", version=None)
    fingerprint = build(
        HostProcessFacts(wrapper, None, unit=None, gpus=None, by="test"), PhaseLimits()
    ).fingerprint
    assert is_unknown(fingerprint["launch"]["dialect"])
    assert "could not be read" in fingerprint["launch"]["dialect"]["unknown"]


def test_no_launcher_under_a_plain_process():
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        assert find_launcher(sleeper.pid) is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_piped_server_still_gets_a_bundle_that_says_the_log_is_missing(wrapped, tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "cache"))
    wrapper, launcher = wrapped("sh-pipe")
    time.sleep(0.2)
    bundle = bundle_of_host(pid=wrapper, out=tmp_path / "b.tar.gz")
    assert bundle.is_file()
    [folder] = (tmp_path / "cache" / "runs").iterdir()
    result = json.loads((folder / "result.json").read_text())
    [missing] = result["missing"]
    assert missing.startswith("log: process") and "pipe" in missing and "--log FILE" in missing
    assert f"followed pid {launcher}, the SGLang launcher under pid {wrapper}" in result["notes"]
    assert {row["pid"] for row in result["processes"]} >= {wrapper, launcher}
    fingerprint = json.loads((folder / "fingerprint.json").read_text())
    assert fingerprint["versions"]["sglang"] == "0.5.23"
    assert (fingerprint["process"]["pid"], fingerprint["process"]["given_pid"]) == (launcher, wrapper)
    with tarfile.open(bundle) as tar:
        summary = next(m for m in tar.getmembers() if m.name.endswith("/summary.md"))
        text = tar.extractfile(summary).read().decode()
    assert "## Missing" in text and "--log FILE" in text
