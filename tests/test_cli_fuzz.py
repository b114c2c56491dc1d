"""Bad input never hurts: every command and every option of the click tree (flags included), each a
case of its own under a timeout, in-process through kit.cli.main (the real CLI, the real parser and
error edge).

For each value-taking parameter, the values its type or meaning makes invalid (INVALID) end with exit
2: one line on stderr naming the option (or the argument, or the value), nothing on stdout. Then every
value of a fixed list of bad text and bad files (SWEEP, the same for all) ends with exit 2 or a code
the command's --help lists, no traceback, at most one error line (for exit 2 the only line: input is
checked before anything runs; a later ENVIRONMENT may follow a progress line such as `building ...`),
no control character echoed raw, no new file outside the named output, and no container (the engine
is out of reach: DOCKER_HOST points at nothing, so a value the kit wrongly accepted ends in
ENVIRONMENT, never a start). A flag given a value is refused (exit 2); given alone, on otherwise
sensible arguments, it ends in a documented code. A few real subprocess runs of the issues' cases.
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

from kit.cli import _register, cli, main
from kit.cli.params import FiniteFloat, InputFile, LimitValue, Line, LogFile, OutputFile, SetValue, StrictInt

_register()

# Each case gets this long (pytest-timeout): a hang in a command stalls one case, not CI.
CASE_TIMEOUT_S = 60
pytestmark = pytest.mark.timeout(CASE_TIMEOUT_S)

ESC = "a\x1b]0;title\x07\x1b[2Jb"
SWEEP = [
    "", " ", "-1", "0", "nan", "inf", "-inf", "1e308", "true", "1.5", "0x10", "§é漢", "a\nb", "a\r\nb",
    ESC, "x" * 5000, "../../etc/passwd", "=", "init=nan", "launch=inf", "tp=true",
    "env.A=1\nExecStartPre=/bin/true", "nosuch=1", "tp=0", "--", "-",
    "empty", "binary", "huge", "/dev/zero", "/dev/null", "folder", "unicode-§.log", "crlf.log",
    "crlf-only.log", "missing",
]  # fmt: skip
# A sensible value for each positional the tested parameter does not replace: one the command accepts,
# so what it refuses is the tested value (a bundle made in the sandbox, a log, a real target).
SENSIBLE = {
    "target": "tiny", "targets": "tiny", "container": "kit-fuzz-none", "containers": "kit-fuzz-none",
    "name": "sglang-0.5.23-cpu", "names": "sglang-0.5.23-cpu", "logfile": "crlf.log",
    "path": "bundle.tar.gz", "ref": "kit-fuzz-none",
}  # fmt: skip
SENSIBLE_IN = {
    ("bundle", "diff"): {"a": "bundle.tar.gz", "b": "bundle.tar.gz"},
    ("image", "diff"): {"a": "sglang-0.5.23-cpu", "b": "sglang-0.5.23-cpu"},
    ("scenario", "run"): {"name": "cold-load"},
    ("render", "lws"): {"target": "qwen-base"},
    ("model", "fetch"): {"target": "qwen-base"},  # tiny's model is generated in its image
    ("model", "verify"): {"target": "qwen-base"},
}
# Options every case of a command carries: `kit check` without --in-image builds its parser venv
# (tens of seconds of pip, failing offline), which tests/check covers; with it, the engine is asked.
ALWAYS = {("check",): ["--in-image"]}
# What no value of an argument's meaning can be, by (command, name) or name.
BAD_TARGET = ["nosuch", ESC, ""]
INVALID_BY_NAME: dict[object, list[str]] = {
    "target": BAD_TARGET,
    "targets": ["nosuch", ESC],
    "container": [ESC, "a b", "../x"],
    "containers": [ESC, "a b"],
    "logfile": ["missing", "empty", "crlf-only.log", "/dev/zero", "folder", "binary"],
    "path": ["missing", "empty", "binary", "folder"],
    ("bundle", "diff", "a"): ["missing", "binary", "folder"],
    ("bundle", "diff", "b"): ["missing", "binary", "folder"],
    ("image", "diff", "a"): [ESC],
    ("image", "diff", "b"): [ESC],
    "name": ["nosuch", ESC],
    "names": ["nosuch", ESC],
    ("scenario", "run", "name"): ["nosuch", ESC],
    "gpus": ["a,b", "-1", "0,0"],
    "revision": [ESC],
    "pass_env": ["1BAD", "A=B", ESC],
    "build_context": [ESC, "a\nb"],
    "from_bundle": ["missing", "empty"],
    "wheel_dirs": ["missing", "empty"],
}
_ROW = re.compile(r"^\s+(\d+)\s+[A-Z]+\s", re.M)


def _commands(group: click.Group = cli, path: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def _is_flag(param: click.Parameter) -> bool:
    return bool(getattr(param, "is_flag", False))


PARAMS = [(path, command, param) for path, command in _commands() for param in command.params]
CASES = [
    pytest.param(path, command, param, id=f"{' '.join(path)} {param.opts[0] if param.opts else param.name}")
    for path, command, param in PARAMS
]
VALUED = [case for case in CASES if not _is_flag(case.values[2])]
FLAGS = [case for case in CASES if _is_flag(case.values[2])]


def invalid_values(path: tuple[str, ...], param: click.Parameter) -> list[str]:
    """Values PARAM must refuse with exit 2: from its type, else from what its argument names."""
    kind = param.type
    if isinstance(kind, click.Choice):
        return ["nosuch", ESC]
    if isinstance(kind, (StrictInt, click.types.IntParamType)):
        low = getattr(kind, "low", None) if isinstance(kind, StrictInt) else getattr(kind, "min", None)
        return ["x", "1.5", "true", "nan", *(["-1"] if low is not None and low >= 0 else [])]
    if isinstance(kind, FiniteFloat):
        return ["nan", "inf", "x", "1e308", *(["-1"] if kind.low >= 0 else [])]
    if isinstance(kind, LimitValue):
        return ["garbage", "init=nan", "nosuch=1", ESC]
    if isinstance(kind, SetValue):
        return ["nosuch=1", "tp=true", "=", ESC]
    if isinstance(kind, LogFile):
        return ["folder", "/dev/null", "missing/x.log", ESC]
    if isinstance(kind, OutputFile):
        return ["folder", "/dev/null", "missing/x.tar.gz", ""]
    if isinstance(kind, InputFile):
        return ["missing", "folder", "empty", "/dev/zero"]
    if isinstance(kind, Line):
        return ["a\nb", ESC, "x" * 300]
    found = INVALID_BY_NAME.get((*path, param.name)) or INVALID_BY_NAME.get(param.name or "")
    assert found, f"kit {' '.join(path)} {param.name}: no invalid values known: add them to INVALID_BY_NAME"
    return found


def documented_codes(command: click.Command) -> set[int]:
    return {int(code) for code in _ROW.findall(command.epilog or "")} | {2}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A working folder holding the bad files and one good bundle; the engine, the network (every
    proxy variable names a closed port) and the cache kept away."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "empty").write_bytes(b"")
    (root / "binary").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    with open(root / "huge", "wb") as handle:  # sparse: 3 GB of NUL that takes no disk
        handle.truncate(3 << 30)
    (root / "folder").mkdir()
    os.mkfifo(root / "fifo")
    (root / "unicode-§.log").write_text(
        "[2026-01-01 00:00:00] §é漢 server_args=ServerArgs(\n", encoding="utf-8"
    )
    (root / "crlf.log").write_bytes(b"[2026-01-01 00:00:00] Init torch distributed begin.\r\n" * 3)
    (root / "crlf-only.log").write_bytes(b"\r\n" * 3)
    with pytest.MonkeyPatch.context() as patch, _isolated(root, patch):
        made = run_in_process(
            ["bundle", "create", "--from-log", "crlf.log", "--target", "tiny", "-o", "bundle.tar.gz"]
        )
    assert made[0] == 0, made
    return root


@contextlib.contextmanager
def _isolated(root: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(root)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{root}/no-engine.sock")
    monkeypatch.setenv("KIT_CACHE_DIR", str(root / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_RETRIES", "0")  # the unreachable index refuses at once, not after 5 tries
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # a manifest's own index (PyPI) stays out of reach
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
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


def _argv(
    path: tuple[str, ...], command: click.Command, tested: click.Parameter, value: str | None
) -> list[str]:
    """The command line: sensible positionals, the tested one replaced by VALUE; an option given VALUE
    (`--opt=VALUE` where it starts with '-'); a flag alone (None) or given a value."""
    argv = list(path)
    sensible = {**SENSIBLE, **SENSIBLE_IN.get(path, {})}
    for param in command.params:
        if isinstance(param, click.Argument):
            if param is tested:
                argv.append(value if value is not None else "")
            elif param.required or param.name in SENSIBLE_IN.get(path, {}):
                argv.append(sensible.get(param.name or "", "tiny"))
    argv += [extra for extra in ALWAYS.get(path, []) if extra not in tested.opts]
    if isinstance(tested, click.Option):
        if value is None:
            argv.append(tested.opts[0])
        elif _is_flag(tested) or value.startswith("-"):
            argv.append(f"{tested.opts[-1]}={value}")
        else:
            argv += [tested.opts[0], value]
    return argv


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if "cache" not in p.relative_to(root).parts}


# Commands that print a header (`kit up tiny (...)`) before they start something: every check of the
# input and of the host (engine, image) comes before it, so an error there is the only output.
HEADED = {("up",), ("watch",), ("smoke",), ("preflight",), ("bisect",)}


def _run(sandbox, monkeypatch, argv: list[str]) -> tuple[int, str, str, set[str]]:
    with _isolated(sandbox, monkeypatch):
        before = _listing(sandbox)
        code, out, err = run_in_process(argv)
        made = _listing(sandbox) - before
    return code, out, err, made


def _said(argv: list[str], code: int, out: str, err: str) -> str:
    return f"kit {' '.join(argv)!r:.200}: exit {code}\nstdout: {out[-300:]!r}\nstderr: {err[-600:]!r}"


def _check_safe(path, command, argv, code, out, err, made, named) -> None:
    said = _said(argv, code, out, err)
    assert made <= named, f"{said}\nleft {made}"
    assert "Traceback" not in err and "Traceback" not in out, said
    assert "\x1b" not in err and "\x07" not in err, said  # a control character echoed raw
    assert code in documented_codes(command), said
    errors = [line for line in err.splitlines() if line.startswith("kit: error: ")]
    assert len(errors) <= 1 and (not errors or err.strip().splitlines()[-1] == errors[0]), said
    if code == 2:  # bad input: that one line and nothing before it (checked before anything runs)
        assert err.startswith("kit: error: ") and err.count("\n") == 1, said
        assert out == "", said
    if errors and tuple(path) in HEADED:  # no header before an error found before the start
        assert out == "", said


def _names_it(param: click.Parameter, value: str, err: str) -> bool:
    """Does the error line name the option as typed (or the argument: its name or metavar), or the
    value itself (a file: `missing: cannot read it`), as the line shows it (escaped)?"""
    line = err.lower()
    if isinstance(param, click.Option):
        words = set(param.opts)
    else:
        words = {param.name or "", param.human_readable_name, param.metavar or ""}
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in value)
    named = any(w and w.lower().strip("[].") in line for w in words)
    return named or (len(shown) >= 4 and shown.lower() in line)


@pytest.mark.parametrize(("path", "command", "param"), VALUED)
def test_an_invalid_value_is_refused_in_one_line_naming_it(sandbox, monkeypatch, path, command, param):
    for value in invalid_values(path, param):
        argv = _argv(path, command, param, value)
        code, out, err, made = _run(sandbox, monkeypatch, argv)
        said = _said(argv, code, out, err)
        assert (code, out, made) == (2, "", set()), said
        assert err.startswith("kit: error: ") and err.count("\n") == 1, said
        assert "\x1b" not in err, said
        assert _names_it(param, value, err), f"the error does not name {param.name}: {said}"


@pytest.mark.parametrize(("path", "command", "param"), VALUED)
def test_any_value_is_answered_safely(sandbox, monkeypatch, path, command, param):
    for value in SWEEP:
        if value == "--" and isinstance(param, click.Argument) and param.nargs == -1:
            value = (
                "-"  # `--` ends the options: `kit image lock --` is `kit image lock`, every image relocked
            )
        argv = _argv(path, command, param, value)
        code, out, err, made = _run(sandbox, monkeypatch, argv)
        named = {value} if param.name == "output" else set()
        _check_safe(path, command, argv, code, out, err, made, named)


@pytest.mark.parametrize(("path", "command", "param"), FLAGS)
def test_a_flag_given_a_value_is_refused_and_alone_ends_in_a_documented_code(
    sandbox, monkeypatch, path, command, param
):
    argv = _argv(path, command, param, "yes")
    code, out, err, made = _run(sandbox, monkeypatch, argv)
    assert (code, out, made) == (2, "", set()), _said(argv, code, out, err)
    assert "does not take a value" in err and err.count("\n") == 1, _said(argv, code, out, err)
    argv = _argv(path, command, param, None)
    code, out, err, made = _run(sandbox, monkeypatch, argv)
    _check_safe(path, command, argv, code, out, err, made, set())


def test_the_cases_are_every_parameter_of_every_command():
    commands = list(_commands())
    assert len(PARAMS) == sum(len(command.params) for _, command in commands) > 150
    assert len(FLAGS) > 50 and len(VALUED) > 100
    # every command is run by some case, those that take nothing but flags too (targets, ps, ...)
    assert {path for path, _, _ in PARAMS} == {path for path, command in commands if command.params}
    assert all(command.params for _, command in commands)


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
        (["analyze", "crlf-only.log"], None, "kit: error: LOGFILE: crlf-only.log holds no text"),
        (["up", "a\x1b[2Jb"], None, "kit: error: target: unknown target 'a\\x1b[2Jb'"),
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


def test_no_option_takes_a_number_through_clicks_ranges_which_let_nan_through():
    # click.FloatRange compares `value < min`, false for nan, so `--timeout nan` reached the code (the
    # fuzz found `kit image lock --timeout nan`); every number of seconds goes through FiniteFloat.
    loose = [
        f"kit {' '.join(path)} {param.name}"
        for path, _, param in PARAMS
        if isinstance(param.type, click.FloatRange)
    ]
    assert loose == []
