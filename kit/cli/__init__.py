"""The `kit` command: a few lines per command over library functions.

Errors are translated here and only here: a KitError becomes one line on stderr and its exit
code; click's usage errors become one line and exit 2; Ctrl-C exits 130. No tracebacks for
anything the user can fix.
"""

from __future__ import annotations

import contextlib
import sys

import click

from kit.cli.exits import epilog
from kit.errors import EXITS, ExitCode, KitError, printable_line

# Each command module registers itself on `cli`; the list is explicit so `kit --help` is stable.
_COMMAND_MODULES = (
    "kit.cli.up",  # up, watch
    "kit.cli.model",
    "kit.cli.bundle",  # bundle create/show/diff
    "kit.cli.repro",
    "kit.cli.image",  # with image lock (kit.cli.image_lock)
    "kit.cli.catalog",
    "kit.cli.smoke",
    "kit.cli.analyze",
    "kit.cli.scenario",
    "kit.cli.pivot",
    "kit.cli.host",  # cache show/clear
)


def _listed() -> dict[str, str]:
    """The command table `kit --help` prints (kit/cli/commands.toml): name -> its help's first paragraph."""
    import tomllib
    from pathlib import Path

    return tomllib.loads((Path(__file__).with_name("commands.toml")).read_text(encoding="utf-8"))["commands"]


class _LazyGroup(click.Group):
    """The top-level group: a command's module is imported when the command is named, so `kit --help`
    (and `kit --version`) import no command module, only the table of names and first lines."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(_listed()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            _register()
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        listed = _listed()
        if not listed:
            return
        limit = formatter.width - 6 - max(len(name) for name in listed)
        rows = [(name, _short(text, limit)) for name, text in sorted(listed.items())]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _short(text: str, limit: int) -> str:
    """click's own short help of TEXT (what `get_short_help_str` prints for a command with that help)."""
    return click.Command("-", help=text).get_short_help_str(limit)


@click.group(
    cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.version_option(package_name="sglang-kit", prog_name="kit")
def cli() -> None:
    """Reproducible SGLang serving: pinned images, checked profiles, live start-up phases, hang verdicts."""


# `kit --help` shows the whole table; each command shows the rows it can end with (kit/cli/exits.py).
cli.epilog = epilog(tuple(row.word for row in EXITS)).replace(
    "Exit codes:", "Exit codes (each command lists its own):"
)


def _register() -> None:
    import importlib

    for name in _COMMAND_MODULES:  # every one exists: a missing one is a broken kit, said loudly
        importlib.import_module(name)


# click 8.2 renamed NoArgsIsHelp to NoArgsIsHelpError; a bare `kit` or `kit image` prints help.
try:
    from click.exceptions import NoArgsIsHelpError as _NO_ARGS_IS_HELP
except ImportError:  # click < 8.2
    from click.exceptions import NoArgsIsHelp as _NO_ARGS_IS_HELP  # type: ignore[no-redef]


def _fail(message: str, code: int) -> None:
    from kit.output import err_console  # rich: only when there is an error to print

    # click's messages quote the value as given: control characters are escaped here, the one edge.
    err_console().print(f"kit: error: {printable_line(message)}", markup=False, highlight=False)
    sys.exit(code)


def _forgiving_output() -> None:
    """A terminal or pipe that cannot encode a character (PYTHONIOENCODING=ascii and a '§' in a
    log) gets '?', not a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):  # not a text stream
                reconfigure(errors="replace")


def main(argv: list[str] | None = None) -> None:
    _forgiving_output()
    try:
        rv = cli.main(args=argv, prog_name="kit", standalone_mode=False)
    except KitError as exc:
        _fail(exc.one_line(), int(exc.exit_code))
    except _NO_ARGS_IS_HELP as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else "")
        sys.exit(ExitCode.USAGE)
    except click.UsageError as exc:
        where = f" (see 'kit {exc.ctx.command_path.split(' ', 1)[-1]} --help')" if exc.ctx else ""
        if exc.ctx and exc.ctx.command_path == "kit":
            where = " (see 'kit --help')"
        _fail(f"{exc.format_message()}{where}", ExitCode.USAGE)
    except click.exceptions.Abort:
        _fail("interrupted", ExitCode.INTERRUPTED)
    except click.ClickException as exc:
        _fail(exc.format_message(), exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", ExitCode.INTERRUPTED)
    except BrokenPipeError:  # `kit ... | head` closed the pipe: not an error worth a traceback
        sys.stderr.close()
        sys.exit(ExitCode.OK)
    sys.exit(rv if isinstance(rv, int) else 0)
