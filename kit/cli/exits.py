"""Every command's --help ends with its exit codes, as rows of kit.errors.EXITS, and with what its
--json prints: `@exits("READY", "CRASHED", ..., json=LINES)` above `@cli.command()`.

One table: tests/test_cli_help.py walks every command's --help and
holds what it lists to kit.errors.EXITS, and docs/cli.md to the same rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import click

from kit.errors import EXIT_BY_WORD, EXITS, Exit

JsonKind = Literal["lines", "document"]
LINES: JsonKind = "lines"
DOCUMENT: JsonKind = "document"

JSON_SAYS: dict[JsonKind, str] = {
    "lines": "--json prints JSON lines: one object per event as it happens, the last with "
    '"type": "result" (the verdict and exit_code).',
    "document": "--json prints one JSON document when the command ends.",
}

# Commands that list only these two: groups, and quick commands that read or print.
PLAIN = ("OK", "USAGE")


def exit_rows(words: tuple[str, ...]) -> tuple[Exit, ...]:
    """The table's rows for these words, in code order (an unknown word is a KeyError: a bug). A code
    may show two rows where both happen: smoke exits 1 on a crash and on a failed check."""
    if len(set(words)) != len(words):
        raise ValueError(f"a word twice: {words}")
    return tuple(sorted((EXIT_BY_WORD[word] for word in words), key=EXITS.index))  # the table's order


def epilog(words: tuple[str, ...], json: JsonKind | None = None) -> str:
    # "\b" keeps click from rewrapping the rows into one paragraph.
    lines = ["\b", "Exit codes:"]
    lines += [f"  {row.code:<4} {row.word:<12} {row.meaning}" for row in exit_rows(words)]
    text = "\n".join(lines)
    if json is not None:
        text += f"\n\n{JSON_SAYS[json]}"
    return text


def exits(*words: str, json: JsonKind | None = None) -> Callable[[click.Command], click.Command]:
    """Set the command's epilog: its exit codes (words of kit.errors.EXITS) and what --json prints."""

    def decorate(command: click.Command) -> click.Command:
        command.epilog = epilog(words, json)
        return command

    return decorate
