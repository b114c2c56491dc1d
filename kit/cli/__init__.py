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
from kit.errors import EXITS, ExitCode, KitError
from kit.output import err_console

# Each command module registers itself on `cli`; the list is explicit so `kit --help` is stable.
_COMMAND_MODULES = (
    "kit.cli.up",
    "kit.cli.model",
    "kit.cli.bundle",  # bundle create/show/diff
    "kit.cli.repro",
    "kit.cli.image",
    "kit.cli.catalog",
    "kit.cli.watch",
    "kit.cli.smoke",
    "kit.cli.analyze",
    "kit.cli.scenario",
    "kit.cli.pivot",
    "kit.cli.host",  # cache show/clear
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="sglang-kit", prog_name="kit")
def cli() -> None:
    """Reproducible SGLang serving: pinned images, checked profiles, live start-up phases, hang verdicts."""


# `kit --help` shows the whole table; each command shows the rows it can end with (kit/cli/exits.py).
cli.epilog = epilog(tuple(row.word for row in EXITS)).replace(
    "Exit codes:", "Exit codes (each command lists its own):"
)


def _register() -> None:
    import importlib

    for name in _COMMAND_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a command module not written yet
            if exc.name != name:
                raise


# click 8.2 renamed NoArgsIsHelp to NoArgsIsHelpError; a bare `kit` or `kit image` prints help.
try:
    from click.exceptions import NoArgsIsHelpError as _NO_ARGS_IS_HELP
except ImportError:  # click < 8.2
    from click.exceptions import NoArgsIsHelp as _NO_ARGS_IS_HELP  # type: ignore[no-redef]


def _fail(message: str, code: int) -> None:
    err_console().print(f"kit: error: {message}", markup=False, highlight=False)
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
    _register()
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
