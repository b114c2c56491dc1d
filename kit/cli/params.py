"""The CLI's one input layer: click types that check every option value as the command line is read.

A bad value fails here, before any engine, network or file is touched, as one line naming the
option, what is wrong and the syntax with an example (exit 2, kit/cli/__init__.py prints it):

    FiniteFloat   seconds and budgets: a finite number in bounds (no nan, inf, 1e308, true)
    StrictInt     a whole number in bounds (no true, 1.0, 1_000)
    Pid           a running host process: a positive number that exists now
    LimitValue    --deadline/--stall STAGE=SECONDS (kit.logs.limits.parse_limit_overrides, the one parser)
    SetValue      --set KEY=VALUE, the key and the value's type checked against the profile schema
    InputFile     a file read whole (a CA bundle): regular, not empty, bounded
    Line          one line of printable text (names, paths): nothing a rendered file would split on
    ContainerRef  a container's name or id, as Docker allows them (before the engine is asked)
    LogFile       --log FILE of a host server: a regular file, or none yet in a folder that exists
    OutputFile    -o FILE: a regular file or nothing yet, in a folder that exists (kit.files)
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import click

from kit.errors import InputError
from kit.spec import MAX_SECONDS, seconds_written

WEEK_S = MAX_SECONDS  # the one bound on seconds (kit/spec.py), shared with the catalog and limits
_WHOLE = re.compile(r"^[+-]?[0-9]+$")
NAME_MAX = 255  # bytes in one part of a path (Linux's NAME_MAX)


def refuse(param: click.Parameter | None, problem: str, fix: str) -> None:
    """The kit's one-line input error, naming the option as typed: `--budget: ... (e.g. ...)`."""
    name = param.opts[0] if param is not None and param.opts else (param.name if param else "value")
    raise InputError(str(name).upper() if param is not None and not param.opts else str(name), problem, fix)


def control_character(text: str) -> str | None:
    """The first character that is not printable text (newline, tab, escape, NUL), as repr."""
    bad = next((c for c in text if not c.isprintable()), None)
    return None if bad is None else repr(bad)


class Line(click.ParamType):
    """One line of printable text: a name, a path. A newline or an escape in a value that is
    rendered into a file (a unit, Compose, docker args) or printed would be a line of its own."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        bad = control_character(text)
        if bad:
            refuse(param, f"a control character ({bad}) in {text!r}", "give one line of printable text")
        if any(len(part.encode("utf-8", "surrogateescape")) > NAME_MAX for part in text.split("/")):
            # No file, folder, container or unit has such a name; the OS would say ENAMETOOLONG.
            refuse(
                param, f"'{text[:40]}...' is too long for a name", f"at most {NAME_MAX} bytes between slashes"
            )
        return text


class FiniteFloat(click.ParamType):
    """A finite number in (low, high]: seconds and budgets. `nan` compares false with everything,
    so a plain `> 0` test lets it through; `inf` never ends."""

    name = "seconds"

    def __init__(
        self, low: float = 0.0, high: float = WEEK_S, *, example: str = "600", low_open: bool = True
    ):
        self.low, self.high, self.example, self.low_open = low, high, example, low_open

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float) and math.isfinite(value):
            number = value
        else:
            written = seconds_written(str(value))
            number = math.nan if written is None else written
            if not math.isfinite(number):
                refuse(
                    param, f"'{value}' is not a number of seconds", f"a finite number, e.g. {self.example}"
                )
        above = number > self.low if self.low_open else number >= self.low
        if not above or number > self.high:
            low = f"more than {self.low:g}" if self.low_open else f"at least {self.low:g}"
            refuse(
                param, f"{number:g} is out of range", f"{low} and at most {self.high:g}, e.g. {self.example}"
            )
        return number


class StrictInt(click.ParamType):
    """A whole number in [low, high], written as digits (no `true`, `1.0`, `1_000`)."""

    name = "integer"

    def __init__(self, low: int | None = None, high: int | None = None, *, example: str = "1"):
        self.low, self.high, self.example = low, high, example

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif _WHOLE.match(str(value).strip()):
            number = int(str(value).strip())
        else:
            refuse(param, f"'{value}' is not a whole number", f"e.g. {self.example}")
        if (self.low is not None and number < self.low) or (self.high is not None and number > self.high):
            bounds = f"{'' if self.low is None else self.low}..{'' if self.high is None else self.high}"
            refuse(param, f"{number} is out of range {bounds}", f"e.g. {self.example}")
        return number


class Pid(StrictInt):
    """A host process that runs now: positive, and there (psutil, no signal sent)."""

    name = "pid"

    def __init__(self) -> None:
        super().__init__(1, 2**22, example="--pid 12345, from 'pgrep -f sglang.launch_server'")

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        pid = super().convert(value, param, ctx)
        import psutil

        if not psutil.pid_exists(pid):
            refuse(param, f"no process {pid} on this host", f"e.g. {self.example}")
        return pid


class LimitValue(click.ParamType):
    """NAME=SECONDS for --deadline and --stall: checked as the command line is read by the one parser,
    kit.logs.limits.parse_limit_overrides, over the stages it knows (or preflight's steps); the value
    is kept as given and parsed again by the command, which then cannot fail."""

    name = "stage=seconds"

    def __init__(self, names: tuple[str, ...] | None = None, *, kind: str = "stage"):
        self.names, self.kind = names, kind
        self.name = f"{kind}=seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from kit.logs.limits import STAGES, parse_limit_overrides

        option = param.opts[0] if param is not None and param.opts else "--deadline"
        parse_limit_overrides([str(value)], option, self.names or STAGES, kind=self.kind)
        return str(value)


class SetValue(click.ParamType):
    """--set KEY=VALUE: the key exists in the profile schema and the value has its type, strictly
    (kit.catalog.check_override); the item is kept as given for the catalog to apply."""

    name = "key=value"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from kit.catalog import check_override

        check_override(str(value))  # an InputError naming `--set KEY`
        return str(value)


class OutputFile(click.ParamType):
    """-o FILE: where a command writes its one file. Refused: an empty name, something that is
    there and is not a regular file (a device, a FIFO, a folder, a socket), a folder that is not
    there (commands create no folders for -o). kit.files.write_atomic writes it."""

    name = "file"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        from kit.files import output_problem

        text = str(value)
        bad = control_character(text)
        problem = f"a control character ({bad}) in the name" if bad else output_problem(Path(text))
        if not text.strip():
            problem = "an empty file name"
        if problem:
            refuse(param, problem, "e.g. -o ./bundle.tar.gz")
        return Path(text)


class InputFile(click.ParamType):
    """A file the command reads whole (a CA bundle): a regular, non-empty file under a size bound
    (no device, FIFO or folder, which would block or never end)."""

    name = "file"

    def __init__(self, max_bytes: int = 16 << 20, *, example: str):
        self.max_bytes, self.example = max_bytes, example

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        import stat

        path = Path(str(value))
        try:
            info = path.stat()
        except OSError as exc:
            refuse(param, f"cannot read {str(value)!r}: {exc.strerror or exc}", f"e.g. {self.example}")
        if not stat.S_ISREG(info.st_mode):
            refuse(param, f"{value} is not a regular file", f"e.g. {self.example}")
        if not 0 < info.st_size <= self.max_bytes:
            size = "empty" if not info.st_size else f"{info.st_size} bytes, over {self.max_bytes}"
            refuse(param, f"{value} is {size}", f"e.g. {self.example}")
        return path


class LogFile(Line):
    """--log FILE of a server on this host: a regular file, or none yet in a folder that exists (it is
    followed like tail -F). A device, FIFO or folder is refused: /dev/zero would be read for ever, a
    FIFO blocks the open, a folder is no log."""

    name = "file"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        import stat

        text = super().convert(value, param, ctx)
        example = "e.g. --log /var/log/sglang.log, the file the server writes"
        if not text.strip():
            refuse(param, "an empty file name", example)
        path = Path(text)
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            if not path.parent.is_dir():
                refuse(param, f"no folder {path.parent}", example)
            return text
        except OSError as exc:
            refuse(param, f"cannot read {text!r}: {exc.strerror or exc}", example)
        if not stat.S_ISREG(mode):
            kinds = {stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a FIFO", stat.S_ISCHR: "a device"}
            what = next((word for test, word in kinds.items() if test(mode)), "not a regular file")
            refuse(param, f"{text} is {what}, not a log file", example)
        return text


# Docker's rule for container names (moby daemon/names/names.go, RestrictedNamePattern
# `^/?[a-zA-Z0-9][a-zA-Z0-9_.-]+$`); an id or its prefix (hex) fits it too, from one character.
_CONTAINER = re.compile(r"/?[a-zA-Z0-9][a-zA-Z0-9_.-]*")


class ContainerRef(click.ParamType):
    """A container's name or id: what Docker allows in one, checked before the engine is asked (a
    name with a space, a slash or an escape is no container's, whether an engine answers or not)."""

    name = "container"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not _CONTAINER.fullmatch(text) or len(text) > NAME_MAX:
            refuse(
                param,
                f"{text!r} is not a container name or id",
                "letters, digits, '_', '.' and '-', as 'kit ps' or 'docker ps' shows it",
            )
        return text


LINE = Line()
CONTAINER = ContainerRef()
LOG_FILE = LogFile()
SET_VALUE = SetValue()
LIMIT_VALUE = LimitValue()
PID = Pid()
OUTPUT_FILE = OutputFile()


def resolver_timeout(tool: str):
    """--timeout for a command that runs a resolver per image (pip for resolve, uv for lock)."""
    return click.option(
        "--timeout",
        "timeout_s",
        type=FiniteFloat(30, 24 * 3600, example="900", low_open=False),
        default=900,
        show_default=True,
        help=f"Seconds {tool} may take per image.",
    )
