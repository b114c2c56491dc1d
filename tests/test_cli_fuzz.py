"""Bad input never hurts: every command and every option of the click tree, given generated bad values
and bad files, ends with exit 2 or a code its --help lists, no traceback, at most one error line on
stderr (for exit 2 the only line: input is checked before anything runs; a later ENVIRONMENT may
follow a progress line such as `building ...`),
no new file outside the named output, and no container (the engine is out of reach: DOCKER_HOST
points at nothing, so a value the kit wrongly accepted ends in ENVIRONMENT, never a start).

In-process through kit.cli.main (the real CLI, the real parser and error edge) for speed, plus a few
real subprocess runs of the issue's cases. Bounded: a few hundred examples, about a minute on 2 cores.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.cli import _register, cli, main

_register()

BAD_TEXT = [
    "", " ", "-1", "0", "nan", "inf", "-inf", "1e308", "true", "1.5", "0x10", "§é漢", "a\nb", "a\r\nb",
    "\x1b]0;title\x07\x1b[2J", "x" * 5000, "../../etc/passwd", "=", "init=nan", "launch=inf", "tp=true",
    "env.A=1\nExecStartPre=/bin/true", "nosuch=1", "tp=0", "--", "-",
]  # fmt: skip
BAD_FILES = [
    "empty",
    "binary",
    "huge",
    "/dev/zero",
    "/dev/null",
    "folder",
    "unicode-§.log",
    "crlf.log",
    "missing",
]
# A sensible value for each positional the tested option does not replace.
SENSIBLE = {
    "target": "tiny", "targets": "tiny", "container": "kit-fuzz-none", "containers": "kit-fuzz-none",
    "name": "sglang-0.5.23-cpu", "names": "sglang-0.5.23-cpu", "a": "sglang-0.5.23-cpu",
    "b": "sglang-0.5.23-cpu", "logfile": "crlf.log", "path": "crlf.log", "ref": "kit-fuzz-none",
}  # fmt: skip
_ROW = re.compile(r"^\s+(\d+)\s+[A-Z]+\s", re.M)


def _commands(group: click.Group = cli, path: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def _valued(command: click.Command) -> list[click.Parameter]:
    return [p for p in command.params if not getattr(p, "is_flag", False) and p.name not in ("help",)]


CASES = [(path, command, param) for path, command in _commands() for param in _valued(command)]


def documented_codes(command: click.Command) -> set[int]:
    return {int(code) for code in _ROW.findall(command.epilog or "")} | {2}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A working folder holding the bad files; the engine, the network and the cache kept away."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "empty").write_bytes(b"")
    (root / "binary").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    with open(root / "huge", "wb") as handle:  # sparse: 3 GB of NUL that takes no disk
        handle.truncate(3 << 30)
    (root / "folder").mkdir()
    (root / "fifo").parent.mkdir(exist_ok=True)
    os.mkfifo(root / "fifo")
    (root / "unicode-§.log").write_text(
        "[2026-01-01 00:00:00] §é漢 server_args=ServerArgs(\n", encoding="utf-8"
    )
    (root / "crlf.log").write_bytes(b"[2026-01-01 00:00:00] Init torch distributed begin.\r\n" * 3)
    return root


@contextlib.contextmanager
def _isolated(root: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(root)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{root}/no-engine.sock")
    monkeypatch.setenv("KIT_CACHE_DIR", str(root / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    from kit.runtime.engine import client

    client.cache_clear()  # an engine client cached by an earlier test would reach the real engine
    try:
        yield
    finally:
        client.cache_clear()


def run_in_process(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as info:
        main(argv)
    code = info.value.code
    return (code if isinstance(code, int) else (0 if code is None else 1)), out.getvalue(), err.getvalue()


def _argv(path: tuple[str, ...], command: click.Command, tested: click.Parameter, value: str) -> list[str]:
    argv = list(path)
    for param in command.params:
        if isinstance(param, click.Argument):
            if param is tested:
                argv.append(value)
            elif param.required:
                argv.append(SENSIBLE.get(param.name or "", "tiny"))
    if isinstance(tested, click.Option):
        argv += [tested.opts[0], value] if not value.startswith("-") else [f"{tested.opts[0]}={value}"]
    return argv


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if "cache" not in p.relative_to(root).parts}


# Commands that print a header (`kit up tiny (...)`) before they start something: every check of the
# input and of the host (engine, image) comes before it, so an error there is the only output.
HEADED = {("up",), ("watch",), ("smoke",), ("preflight",), ("bisect",)}


def _check(path, command, param, value, root, code, out, err) -> None:
    said = f"kit {' '.join(path)} {param.name}={value!r:.80}: exit {code}\nstdout: {out[-300:]!r}"
    said += f"\nstderr: {err[-600:]!r}"
    assert "Traceback" not in err and "Traceback" not in out, said
    assert code in documented_codes(command), said
    errors = [line for line in err.splitlines() if line.startswith("kit: error: ")]
    assert len(errors) <= 1 and (not errors or err.strip().splitlines()[-1] == errors[0]), said
    if code == 2:  # bad input: that one line and nothing before it (checked before anything runs)
        assert err.startswith("kit: error: ") and err.count("\n") == 1, said
        assert out == "", said
    if errors and tuple(path) in HEADED:  # no header before an error found before the start
        assert out == "", said


@settings(
    max_examples=int(os.environ.get("KIT_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    case=st.sampled_from(CASES),
    value=st.one_of(st.sampled_from(BAD_TEXT), st.sampled_from(BAD_FILES), st.text(max_size=12)),
)
def test_every_option_refuses_bad_values_in_one_line(sandbox, monkeypatch, case, value):
    path, command, param = case
    if value == "--" and isinstance(param, click.Argument) and param.nargs == -1:
        value = "-"  # `--` ends the options: `kit image lock --` is `kit image lock`, every image relocked
    if "\x00" in value:
        value = value.replace("\x00", "")  # no argv can hold a NUL
    with _isolated(sandbox, monkeypatch):
        before = _listing(sandbox)
        code, out, err = run_in_process(_argv(path, command, param, value))
        made = _listing(sandbox) - before
    named = {value} if param.name == "output" else set()
    assert made <= named, f"kit {' '.join(path)} {param.name}={value!r} left {made}"
    _check(path, command, param, value, sandbox, code, out, err)


@pytest.mark.parametrize("target", ["fifo", "/dev/null", "folder", "", "/proc/x.tar.gz", "missing/x.tar.gz"])
def test_bundle_create_never_replaces_what_is_at_o(sandbox, monkeypatch, target):
    with _isolated(sandbox, monkeypatch):
        before = {p: os.lstat(p) for p in ("fifo", "/dev/null", "folder") if os.path.lexists(p)}
        code, out, err = run_in_process(
            ["bundle", "create", "--from-log", "crlf.log", "--target", "tiny", "-o", target]
        )
        after = {p: os.lstat(p) for p in before}
    assert (code, out) == (2, "") and err.startswith("kit: error: -o: ") and err.count("\n") == 1, err
    assert all((before[p].st_ino, before[p].st_mode) == (after[p].st_ino, after[p].st_mode) for p in before)
    assert not (sandbox / "missing").exists()


KIT = [sys.executable, "-m", "kit"]


@pytest.mark.parametrize(
    ("argv", "stdin", "starts"),
    [
        (["analyze", "/dev/zero"], None, "kit: error: LOGFILE: /dev/zero is not text"),
        (["analyze", "-"], "/dev/zero", "kit: error: LOGFILE: stdin is not text"),
        (["analyze", "empty"], None, "kit: error: LOGFILE: empty is empty"),
        (["analyze", "/bin/ls"], None, "kit: error: LOGFILE: /bin/ls is not text"),
        (["bundle", "create", "--from-log", "/bin/ls", "--target", "tiny"], None, "kit: error: --from-log:"),
        (["watch", "--pid", "-1"], None, "kit: error: --pid: -1 is out of range"),
        (["bundle", "create", "--pid", "-1"], None, "kit: error: --pid: -1 is out of range"),
        (["bisect", "tiny", "--budget", "nan", "--plan"], None, "kit: error: --budget: 'nan'"),
        (["up", "tiny", "--set", "tp=true"], None, "kit: error: --set tp: 'true' is not a whole number"),
        (["repro", "B", "--set", "nosuch=1"], None, "kit: error: --set nosuch: unknown key"),
        (["watch", "C", "--deadline", "garbage"], None, "kit: error: --deadline: 'garbage' is not STAGE"),
        (
            ["render", "systemd", "qwen-base", "--set", "env.A=1\nExecStartPre=/bin/true"],
            None,
            "kit: error: --set env.A",
        ),
    ],
)
def test_the_issues_cases_as_real_processes(sandbox, argv, stdin, starts):
    env = {
        **os.environ,
        "DOCKER_HOST": f"unix://{sandbox}/no-engine.sock",
        "KIT_CACHE_DIR": str(sandbox / "cache"),
    }
    with open(stdin or os.devnull, "rb") as given:
        run = subprocess.run(
            KIT + argv, stdin=given, capture_output=True, text=True, timeout=60, cwd=sandbox, env=env
        )
    assert (run.returncode, run.stdout) == (2, ""), run.stderr
    assert run.stderr.startswith(starts) and run.stderr.count("\n") == 1, run.stderr


def test_an_ascii_terminal_gets_question_marks_not_a_crash(sandbox):
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "KIT_CACHE_DIR": str(sandbox / "cache")}
    log = sandbox / "crash-§.log"
    log.write_text(
        "[2026-01-01 00:00:00] Traceback (most recent call last):\nRuntimeError: § broke\n", encoding="utf-8"
    )
    run = subprocess.run([*KIT, "analyze", str(log)], capture_output=True, text=True, timeout=60, env=env)
    assert "Traceback" not in run.stderr and "UnicodeEncodeError" not in run.stderr, run.stderr
    assert run.returncode in (1, 4) and "?" in run.stdout


def test_analyze_prints_no_terminal_control_sequence(sandbox, monkeypatch):
    log = sandbox / "escapes.log"
    log.write_text(
        "[2026-01-01 00:00:00] Init torch distributed begin.\n"
        "[2026-01-01 00:00:01] RuntimeError: \x1b]0;owned\x07\x1b[2J boom\n",
        encoding="utf-8",
    )
    with _isolated(sandbox, monkeypatch):
        code, out, _err = run_in_process(["analyze", str(log)])
    assert code in (1, 4) and "\x1b" not in out and "\x07" not in out, out


def test_the_fuzz_reaches_every_command_kit_help_lists():
    # kit --help lists kit/cli/commands.toml; each command (or a subcommand of a group) has a case
    # for each free value it takes, and one that takes none is named here.
    import tomllib

    table = Path(__file__).parents[1] / "kit" / "cli" / "commands.toml"
    listed = tomllib.loads(table.read_text(encoding="utf-8"))["commands"]
    reached = {path[0] for path, _, _ in CASES}
    takes_none = {path[0] for path, command in _commands() if not _valued(command)} - reached
    assert set(listed) - reached == takes_none == {"cache", "ps", "targets"}, (
        set(listed) - reached,
        takes_none,
    )


def test_no_option_takes_a_number_through_clicks_ranges_which_let_nan_through():
    # click.FloatRange compares `value < min`, false for nan, so `--timeout nan` reached the code (the
    # fuzz found `kit image lock --timeout nan`); every number of seconds goes through FiniteFloat.
    loose = [
        f"kit {' '.join(path)} {param.name}"
        for path, _, param in CASES
        if isinstance(param.type, click.FloatRange)
    ]
    assert loose == []
