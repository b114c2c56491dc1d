"""The kit's one error family, and the exit codes the CLI maps it to.

    KitError                  exit 1: something the kit tried failed
    ├── InputError            exit 2: bad input; names the field and the fix
    ├── EnvironmentProblem    exit 3: the machine lacks something (engine, image, GPU)
    └── CheckFailed           exit 1: a check ran and said no (drift, verdict)

Library code raises these; only the CLI edge turns them into a line on stderr and an exit code.
Third-party errors (docker, pydantic, httpx) are translated where they happen, `from exc`.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    ENVIRONMENT = 3
    HUNG = 4
    DEADLINE = 5
    INTERRUPTED = 130


class KitError(Exception):
    exit_code: int = ExitCode.FAILED

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        text = " ".join(self.message.split())
        return f"{text} ({self.hint})" if self.hint else text


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
