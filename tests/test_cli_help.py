"""Every command's --help, read through click's own command tree (in-process): the exit codes it lists
are rows of the one table (kit.errors.EXITS), it says what --json prints, no TEXT metavars, the
test-only --fault is hidden but taken; and the behaviour behind a few of those lines (an unknown
target is USAGE, `logs --tail` is an integer, smoke exits as up does on each verdict)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from kit.cli import _register, cli, main
from kit.cli.exits import DOCUMENT, JSON_SAYS, LINES
from kit.errors import EXIT_BY_WORD, EXITS, ExitCode
from kit.logs.analyze import EXIT_CODES
from kit.logs.verdicts import Crashed, Deadline, Hung, Ready, VerdictKind
from kit.testing.checks import CheckResult
from kit.testing.smoke import SmokeReport

_register()
ROOT = Path(__file__).parents[1]
ROW = re.compile(r"^\s+(\d+)\s+([A-Z]+)\s+(\S.*)$")
# The commands whose --json is a stream (JSON lines, the result last); every other one prints one document.
STREAMS = {"up", "watch", "repro", "preflight", "bisect"}


def _commands(command: click.Command = cli, path: tuple[str, ...] = ()):
    yield path, command
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            yield from _commands(command.commands[name], (*path, name))


COMMANDS = {" ".join(path) or "kit": (path, command) for path, command in _commands()}


def _help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(cli, [*path, "--help"], prog_name="kit", terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def _rows(text: str) -> list[tuple[int, str, str]]:
    after = text.split("Exit codes", 1)[1].split("\n\n", 1)[0]
    return [(int(m[1]), m[2], m[3].strip()) for m in map(ROW.match, after.splitlines()[1:]) if m]


def _run(*argv: str) -> tuple[int, str, str]:
    """`kit ARGV` through main() (the edge that turns errors into exit codes), in-process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as info:
        main(list(argv))
    return int(info.value.code or 0), out.getvalue(), err.getvalue()


def test_every_command_module_the_cli_imports_exists():
    # _register imports each one and lets no ModuleNotFoundError pass: a module named here that does
    # not exist (kit.cli.watch did) is a broken kit, not a command "not written yet".
    import importlib.util

    from kit.cli import _COMMAND_MODULES

    assert [m for m in _COMMAND_MODULES if importlib.util.find_spec(m) is None] == []
    assert len(set(_COMMAND_MODULES)) == len(_COMMAND_MODULES)


def test_the_walk_finds_every_command():
    assert {"up", "watch", "analyze", "smoke", "repro", "bundle create", "check", "doctor"} <= set(COMMANDS)
    assert len(COMMANDS) > 35


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_lists_exit_codes_that_are_rows_of_the_one_table(name):
    path, _ = COMMANDS[name]
    text = _help(path)
    assert "Exit codes" in text, f"kit {name} --help lists no exit codes"
    rows = _rows(text)
    table = {(int(row.code), row.word, row.meaning) for row in EXITS}
    assert rows and set(rows) <= table, f"kit {name}: {set(rows) - table}"
    assert [code for code, _, _ in rows] == sorted(code for code, _, _ in rows)
    words = [word for _, word, _ in rows]
    assert len(words) == len(set(words))
    assert "USAGE" in words  # click's own usage errors exit 2 on every command
    before = text.split("Exit codes", 1)[0]  # the table is the only place a code is given
    assert not re.search(r"\bexit(s|ed)?( code)?:? \d", before, re.IGNORECASE), before


def test_the_start_up_commands_list_the_same_verdict_codes():
    verdicts = {("READY", 0), ("CRASHED", 1), ("HUNG", 4), ("DEADLINE", 5)}
    for name in ("up", "watch", "repro"):
        listed = {(word, code) for code, word, _ in _rows(_help(COMMANDS[name][0]))}
        assert verdicts <= listed, name
    smoke = {(word, code) for code, word, _ in _rows(_help(("smoke",)))}
    assert verdicts - {("READY", 0)} <= smoke and ("OK", 0) in smoke
    analyze = {(word, code) for code, word, _ in _rows(_help(("analyze",)))}
    assert {("READY", 0), ("CRASHED", 1), ("HUNG", 4)} <= analyze


def test_one_vocabulary_the_verdicts_exit_with_their_rows():
    defaults = {
        cls: cls.__dataclass_fields__["exit_code"].default for cls in (Ready, Crashed, Hung, Deadline)
    }
    by_kind = {cls.__dataclass_fields__["kind"].default: code for cls, code in defaults.items()}
    for kind in VerdictKind:
        assert EXIT_BY_WORD[kind.value.upper()].code == by_kind[kind]
    for outcome, code in EXIT_CODES.items():  # kit analyze's outcomes
        assert EXIT_BY_WORD[outcome.upper()].code == code


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_says_what_json_prints(name):
    path, command = COMMANDS[name]
    flat = " ".join(_help(path).split())
    has_json = any("--json" in getattr(p, "opts", ()) for p in command.params)
    said = {kind for kind, text in JSON_SAYS.items() if " ".join(text.split()) in flat}
    if not has_json:
        assert not said and "--json prints" not in flat
    else:
        assert said == {LINES if path[-1] in STREAMS else DOCUMENT}, name


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_no_text_metavars(name):
    assert not re.search(r"\bTEXT\b", _help(COMMANDS[name][0]))


@pytest.mark.parametrize("name", ["up", "smoke", "preflight", "bisect"])
def test_fault_is_hidden_from_help_and_still_taken(name):
    command = COMMANDS[name][1]
    assert "--fault" not in _help((name,))
    (fault,) = [p for p in command.params if p.name == "fault"]
    assert fault.hidden
    ctx = command.make_context(name, ["tiny", "--fault", "hang-init:rank=1"])
    assert ctx.params["fault"] == "hang-init:rank=1"
    assert not [n for n, (_, c) in COMMANDS.items() for p in c.params if p.name == "fault" and not p.hidden]


def test_up_and_watch_take_the_same_first_token_flag():
    flags = {}
    for name in ("up", "watch"):
        (flag,) = [p for p in COMMANDS[name][1].params if p.name == "first_token"]
        assert (flag.opts, flag.secondary_opts) == (["--first-token"], ["--no-first-token"])
        flags[name] = flag.default
        on = COMMANDS[name][1].make_context(name, ["x", "--first-token"]).params["first_token"]
        off = COMMANDS[name][1].make_context(name, ["x", "--no-first-token"]).params["first_token"]
        assert (on, off) == (True, False)
    assert flags == {"up": True, "watch": False}  # watch sends nothing to a server it did not start
    assert "default: --first-token" in " ".join(_help(("up",)).split())
    assert "default: --no-first-token" in " ".join(_help(("watch",)).split())


@pytest.mark.parametrize("bad", ["abc", "-1", "1.5"])
def test_logs_tail_is_a_count(bad):
    code, out, err = _run("logs", "kit-nothing", "--tail", bad)
    assert code == ExitCode.USAGE and not out
    assert len(err.strip().splitlines()) == 1 and "--tail" in err and "Traceback" not in err
    assert COMMANDS["logs"][1].make_context("logs", ["c", "--tail", "5"]).params["tail"] == 5


@pytest.mark.parametrize(
    "argv", [("check",), ("validate",), ("doctor",), ("render", "docker"), ("model", "verify")]
)
def test_an_unknown_target_is_usage_as_help_says(argv):
    code, _, err = _run(*argv, "no-such-target")
    assert code == ExitCode.USAGE, err
    assert "unknown target" in err and len(err.strip().splitlines()) == 1
    assert (2, "USAGE") in {(c, w) for c, w, _ in _rows(_help(argv))}


def test_smoke_exits_as_up_does_on_each_verdict():
    passed = (CheckResult("server ready", True, ""),)
    failed = (CheckResult("init within deadline", False, "late"),)
    up_codes = {cls.__dataclass_fields__["kind"].default: cls.__dataclass_fields__["exit_code"].default
                for cls in (Ready, Crashed, Hung, Deadline)}  # fmt: skip
    for kind, code in up_codes.items():
        report = SmokeReport("tiny", "img", kind.value, failed, startup_exit_code=code)
        assert report.exit_code == (ExitCode.FAILED if kind is VerdictKind.READY else code), kind
    assert SmokeReport("tiny", "img", "ready", passed).exit_code == ExitCode.OK


def test_docs_show_the_one_table():
    text = (ROOT / "docs" / "cli.md").read_text()
    rows = re.findall(r"^\| (\d+) \| `?([A-Z]+)`? \| (.+?) \|$", text, re.MULTILINE)
    assert {(int(c), w, m) for c, w, m in rows} == {(int(r.code), r.word, r.meaning) for r in EXITS}
    for name in STREAMS:
        assert re.search(rf"`kit {name}`[^\n]*JSON lines", text), name


def test_docs_list_each_command_as_its_help_does():
    text = (ROOT / "docs" / "cli.md").read_text()
    rows = dict(re.findall(r"^\| `kit ([a-z -]+)` \| ([^|]+) \| [^|]+ \|$", text, re.MULTILINE))
    assert set(rows) == set(COMMANDS) - {"kit"}
    for name, listed in rows.items():
        shown = [f"{code} {word}" for code, word, _ in _rows(_help(COMMANDS[name][0]))]
        assert listed.strip() == ", ".join(shown), name


_OPTION = re.compile(r"--[a-z][a-z-]*")


def readme_commands(cell: str) -> list[tuple[tuple[str, ...], set[str]]]:
    """Each `kit ...` in a README table cell: the commands it names (`render sglang/docker/lws` and
    `cache show / clear` name several) and the --options it shows for them."""
    found = []
    for code in re.findall(r"`kit ([^`]+)`", cell):
        tokens = code.replace("\\|", " ").split()
        group: click.Command = cli
        paths: list[tuple[str, ...]] = [()]
        while isinstance(group, click.Group) and tokens:
            names: list[str] = []
            while tokens and (parts := [n for n in tokens[0].split("/") if n]) is not None:
                if tokens[0] != "/" and not all(n in group.commands for n in parts):
                    break
                names += parts
                tokens.pop(0)
            if not names:
                break
            paths = [(*path, name) for path in paths for name in names]
            group = group.commands[names[0]]
        found += [(path, set(_OPTION.findall(" ".join(tokens)))) for path in paths]
    return found


def test_readme_shows_each_command_only_options_it_takes():
    # README's table listed --gpus for `render sglang/lws`, which refuse it (no such option).
    rows = [line.split(" | ")[0] for line in (ROOT / "README.md").read_text().splitlines()]
    named = [item for row in rows if row.startswith("| `kit ") for item in readme_commands(row)]
    assert len(named) > 30 and {("render", "lws"), ("cache", "clear"), ("up",)} <= {p for p, _ in named}
    wrong = {}
    for path, options in named:
        command = COMMANDS[" ".join(path)][1]
        takes = {o for p in command.params for o in (*p.opts, *getattr(p, "secondary_opts", ()))}
        if options - takes:
            wrong[" ".join(path)] = sorted(options - takes)
    assert wrong == {}


def test_the_help_table_is_every_command_with_its_own_first_paragraph():
    """`kit --help` prints kit/cli/commands.toml without importing the commands: it must say what they say."""
    from kit.cli import _listed

    own = {
        name: " ".join((command.short_help or (command.help or "").partition("\n\n")[0]).split())
        for name, command in cli.commands.items()
    }
    assert _listed() == own


def test_top_level_help_imports_no_command_module():
    import subprocess
    import sys

    code = "import sys; from kit.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
    heavy = ("kit.cli.", "kit.logs", "kit.output", "rich", "pydantic", "docker")
    code += f"print(sorted(m for m in sys.modules if m.startswith({heavy!r})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] in ("['kit.cli.exits']", "[]"), done.stdout[-500:]
