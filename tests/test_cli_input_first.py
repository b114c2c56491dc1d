"""`kit up` and `kit watch` check the user's input and the host before they print anything: a bad value,
a process that cannot be followed, a missing engine is one error line on stderr, no header (the title
line `kit up tiny (...)` / `kit watch pid N (...)`) on stdout, exit 2 for input (3 for the host), no
traceback, nothing started and nothing written.

Through kit.cli.main (the edge that turns errors into exit codes) inside click's CliRunner isolation,
with the engine out of reach (DOCKER_HOST points at nothing) and the kit's cache in a temporary folder.
Real host processes (`sleep`) stand for a server launched by hand.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from kit.cli import main


@pytest.fixture
def host(tmp_path, monkeypatch):
    """No engine, a private cache; returns the cache folder (nothing may be written there)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setenv("KIT_CACHE_DIR", str(cache))
    monkeypatch.delenv("KIT_RUN_LABELS", raising=False)
    from kit.runtime.engine import client

    client.cache_clear()
    yield cache
    client.cache_clear()


def kit(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`kit ARGV` in CliRunner's isolation: (exit code, stdout, stderr)."""
    with CliRunner().isolation(env=env) as (out, err, _):
        try:
            main(list(argv))
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        return code, out.getvalue().decode(), err.getvalue().decode()


def one_line(code: int, out: str, err: str, *, exit_code: int, starts: str) -> None:
    said = f"exit {code}\nstdout: {out!r}\nstderr: {err!r}"
    assert code == exit_code, said
    assert out == "", said  # no header, nothing else
    assert err.startswith(f"kit: error: {starts}") and err.count("\n") == 1, said
    assert "Traceback" not in err, said


@pytest.fixture
def piped_process():
    """A live host process whose output goes to a pipe: nothing the kit can follow without --log."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], stdout=subprocess.PIPE)
    yield proc.pid
    proc.kill()
    proc.wait()


def test_up_without_an_engine_is_one_line_before_the_header(host):
    # Before: "kit up tiny (sglang-0.5.23-cpu, 2 ranks)" was printed, then the error.
    one_line(*kit("up", "tiny"), exit_code=3, starts="no Docker engine answers")
    one_line(*kit("up", "tiny", "--serve", "--keep"), exit_code=3, starts="no Docker engine answers")
    assert not host.exists()


def test_up_with_bad_run_labels_is_usage_before_the_header(host):
    env = {"KIT_RUN_LABELS": "no-equals-sign"}
    one_line(*kit("up", "tiny", env=env), exit_code=2, starts="KIT_RUN_LABELS: 'no-equals-sign'")
    assert not host.exists()


def test_watch_of_a_process_whose_output_cannot_be_followed_is_one_line(host, piped_process):
    # Before: "kit watch pid N (default limits)" was printed, then the --log error.
    one_line(*kit("watch", "--pid", str(piped_process)), exit_code=2, starts="--log: process")
    one_line(
        *kit("watch", "--pid", str(piped_process), "--target", "tiny", "--json"),
        exit_code=2,
        starts="--log: process",
    )
    assert not host.exists()


@pytest.mark.parametrize(
    ("log", "starts"),
    [
        ("/dev/zero", "--log: /dev/zero is a device, not a log file"),  # was read for ever
        ("fifo", "--log: fifo is a FIFO, not a log file"),  # blocked the open for ever
        ("folder", "--log: folder is a folder, not a log file"),  # bundle create wrote a HUNG bundle
        ("no-such-folder/server.log", "--log: no folder no-such-folder"),
        ("", "--log: an empty file name"),
        ("a\nb.log", "--log: a control character"),
    ],
)
@pytest.mark.parametrize("command", [("watch",), ("bundle", "create", "-o", "out.tar.gz")])
def test_a_log_that_is_not_a_file_is_refused_before_anything(
    host, piped_process, tmp_path, monkeypatch, log, starts, command
):
    monkeypatch.chdir(tmp_path)
    os.mkfifo("fifo")
    os.mkdir("folder")
    before = sorted(os.listdir(tmp_path))
    one_line(*kit(*command, "--pid", str(piped_process), f"--log={log}"), exit_code=2, starts=starts)
    assert sorted(os.listdir(tmp_path)) == before  # no bundle, no runs folder


def test_watch_of_a_unit_is_one_line_whatever_systemd_says(host):
    # Without a system bus (a container, CI) ENVIRONMENT, with one an unknown unit is USAGE: either
    # way one line and no "kit watch nosuch-kit-unit.service (default limits)" before it.
    code, out, err = kit("watch", "--unit", "nosuch-kit-unit.service")
    one_line(code, out, err, exit_code=code if code in (2, 3) else -1, starts="--unit")


def test_watch_with_a_container_and_a_pid_is_one_line(host, piped_process):
    one_line(
        *kit("watch", "some-container", "--pid", str(piped_process)),
        exit_code=2,
        starts="CONTAINER: a container and --pid/--unit were both given",
    )
    one_line(
        *kit("watch", "--pid", str(piped_process), "--image", "sglang-0.5.23-cpu"),
        exit_code=2,
        starts="--image: a host process runs no kit image",
    )


def test_watch_of_a_container_without_an_engine_is_one_line(host):
    one_line(*kit("watch", "some-container"), exit_code=3, starts="no Docker engine answers")
    one_line(*kit("watch"), exit_code=2, starts="CONTAINER: nothing to watch")


@pytest.mark.parametrize(
    ("argv", "starts"),
    [
        (("up", "tiny", "--deadline", "init=nan"), "--deadline: 'nan' is not a number of seconds"),
        (("up", "tiny", "--stall", "nope=3"), "--stall: 'nope=3' is not STAGE=SECONDS"),
        (("watch", "c", "--deadline", "load=1e308"), "--deadline: 1e+308 is out of range"),
        (("watch", "--pid", "1", "--stall", "init=true"), "--stall: 'true' is not a number of seconds"),
        (("up", "tiny", "--serve", "--probe-budget", "30"), "--probe-budget: 30 s is not below"),
    ],
)
def test_limits_are_checked_as_the_command_line_is_read(host, argv, starts):
    one_line(*kit(*argv), exit_code=2, starts=starts)


@pytest.mark.parametrize(
    ("argv", "exit_code", "starts"),
    [
        # Each printed its header (`kit bisect nope: doctor -> ...`, `kit preflight tiny (...)`,
        # `kit smoke tiny (...)`) before this error.
        (("bisect", "nope"), 2, "target: unknown target 'nope'"),
        (("bisect", "qwen-base", "--fault", "hang-p2p"), 2, "--fault: faults exist only in the CPU"),
        (("bisect", "tiny", "--set", "tp=zero"), 2, "--set tp: 'zero' is not a whole number"),
        (("bisect", "tiny", "--from", "base"), 3, "no Docker engine answers"),
        (("bisect", "tiny"), 3, "no Docker engine answers"),  # not after the doctor rung's lines
        (("preflight", "qwen-base", "--tp", "8"), 2, "--tp: 8 ranks but the target has 4 GPUs"),
        (("preflight", "tiny"), 3, "no Docker engine answers"),
        (("preflight", "tiny", "--until", "p2p", "--json"), 3, "no Docker engine answers"),
        (("smoke", "tiny"), 3, "no Docker engine answers"),
        (("smoke", "tiny", "--fault", "a\nb"), 2, "--fault: a control character"),
        (("bundle", "create", "x" * 300), 2, "ref: 'xxxx"),  # was an ENAMETOOLONG traceback
    ],
)
def test_the_other_commands_with_a_header_check_first_too(host, argv, exit_code, starts):
    one_line(*kit(*argv), exit_code=exit_code, starts=starts)
    assert not host.exists()
