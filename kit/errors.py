"""The kit's one error family, and the exit codes the CLI maps it to.

    KitError                  exit 1: something the kit tried failed
    ├── InputError            exit 2: bad input; names the field and the fix
    ├── EnvironmentProblem    exit 3: the machine lacks something (engine, image, GPU)
    └── CheckFailed           exit 1: a check ran and said no (drift, verdict)

Library code raises these; only the CLI edge turns them into a line on stderr and an exit code.
Third-party errors (docker, pydantic, httpx) are translated where they happen, `from exc`.

EXITS is the one table of exit codes: every command's --help prints its rows (kit/cli/exits.py),
docs/cli.md shows all of them, and tests/test_cli_help.py holds both to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    ENVIRONMENT = 3
    HUNG = 4
    DEADLINE = 5
    INTERRUPTED = 130


@dataclass(frozen=True)
class Exit:
    """One row of the table: a code, the one word help and docs print for it, what it means."""

    code: ExitCode
    word: str
    meaning: str


# Start-up verdicts (READY, CRASHED, HUNG, DEADLINE) are the words `kit up`, `kit watch`, `kit analyze`,
# `kit smoke`, `kit repro` and bundles print; 0 and 1 carry a second word for commands that judge
# no start-up. A command prints one word per code.
EXITS: tuple[Exit, ...] = (
    Exit(ExitCode.OK, "READY", "start-up reached ready (and answered the first token when asked)"),
    Exit(ExitCode.OK, "OK", "done: what the command checks passed"),
    Exit(ExitCode.FAILED, "CRASHED", "the server crashed before ready, or the first token failed"),
    Exit(ExitCode.FAILED, "FAILED", "a check ran and said no, or what the kit tried failed"),
    Exit(ExitCode.USAGE, "USAGE", "bad input: one line names the field and the fix"),
    Exit(
        ExitCode.ENVIRONMENT, "ENVIRONMENT", "the machine lacks something: engine, image, GPU, tool, network"
    ),
    Exit(ExitCode.HUNG, "HUNG", "start-up stopped before ready, no crash (quiet, or the log ends there)"),
    Exit(ExitCode.DEADLINE, "DEADLINE", "a start-up phase ran past its deadline while still moving"),
    Exit(ExitCode.INTERRUPTED, "INTERRUPTED", "Ctrl-C or SIGTERM; what the command started is removed"),
)

EXIT_BY_WORD: dict[str, Exit] = {row.word: row for row in EXITS}


def printable_line(text: str) -> str:
    """TEXT as one line a terminal prints as it is: line breaks become spaces, and any other control
    character (an ESC of a name given on the command line, a BEL) is written as its escape, `\\x1b`,
    never sent raw (an escape sequence in an error would redraw or retitle the user's terminal)."""
    text = " ".join(text.split())
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class KitError(Exception):
    exit_code: int = ExitCode.FAILED

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        text = " ".join(self.message.split())
        return printable_line(f"{text} ({self.hint})" if self.hint else text)


class InputError(KitError):
    """Bad input: a field, what is wrong with it, and how to fix it."""

    exit_code = ExitCode.USAGE

    def __init__(self, field: str, problem: str, fix: str | None = None):
        super().__init__(f"{field}: {problem}", hint=fix)
        self.field = field
        self.problem = problem


class EnvironmentProblem(KitError):
    """The machine lacks something the command needs (engine, image, GPU, tool)."""

    exit_code = ExitCode.ENVIRONMENT


class CheckFailed(KitError):
    """A check ran to the end and its answer is no."""

    exit_code = ExitCode.FAILED

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int = ExitCode.FAILED):
        super().__init__(message, hint=hint)
        self.exit_code = exit_code
