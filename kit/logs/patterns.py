"""Load the per-dialect line patterns (patterns.toml) and build the one scanning regex from them.

The scan is a prefix tree of every pattern's `scan` substring compiled as a single alternation:
Python's regex engine then tries only the branches whose first character matches, in C, so a
log is searched at memory speed and only lines holding a scan string reach Python code.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from kit.logs.events import Milestone, Note

TRACEBACK_START = "Traceback (most recent call last)"


@dataclass(frozen=True, slots=True)
class Pattern:
    """One line wording of one dialect (see the header of patterns.toml for the keys)."""

    dialect: str
    scan: str
    regex: re.Pattern[str]
    milestone: Milestone | None = None
    note: Note | None = None
    kind: str | None = None
    rank0_only: bool = False
    fatal: bool = False
    whole_line: bool = False
    once: bool = False


@dataclass(frozen=True)
class PatternSet:
    dialects: tuple[str, ...]  # section names in file order
    by_scan: dict[str, tuple[Pattern, ...]]  # scan substring -> patterns to try, in file order
    scan: re.Pattern[str]
    float_fields: frozenset[str]
    int_fields: frozenset[str]

    @staticmethod
    def dialect_rank(dialect: str | None) -> tuple[int, ...]:
        """Newer releases rank higher; sections that are not versions ("any", "errors") lowest."""
        parts = (dialect or "").split(".")
        return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else (-1,)


def _trie_regex(words: list[str]) -> str:
    """An alternation of literal words factored by common prefix: `Init (?:nccl|parallel) begin`."""
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        ends_here = "" in node
        branches = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        if len(branches) == 1 and not ends_here:
            return branches[0]
        return "(?:" + "|".join(branches) + ")" + ("?" if ends_here else "")

    return emit(root)


def _pattern(dialect: str, raw: dict[str, Any]) -> Pattern:
    where = f"patterns.toml [{dialect}] {raw.get('scan')!r}"
    scan = raw.get("scan")
    if not isinstance(scan, str) or not scan or "\n" in scan:
        raise ValueError(f"{where}: `scan` must be a non-empty one-line string")
    if scan[0].isspace():  # the scan would be tried at every blank of every line
        raise ValueError(f"{where}: `scan` must not start with whitespace")
    if ("milestone" in raw) == ("note" in raw):
        raise ValueError(f"{where}: give exactly one of `milestone` or `note`")
    regex = re.compile(raw.get("regex") or re.escape(scan))
    unknown = set(raw) - {
        "milestone",
        "note",
        "scan",
        "regex",
        "kind",
        "rank0_only",
        "fatal",
        "whole_line",
        "once",
    }
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    return Pattern(
        dialect=dialect,
        scan=scan,
        regex=regex,
        milestone=Milestone(raw["milestone"]) if "milestone" in raw else None,
        note=Note(raw["note"]) if "note" in raw else None,
        kind=raw.get("kind"),
        rank0_only=bool(raw.get("rank0_only", False)),
        fatal=bool(raw.get("fatal", False)),
        whole_line=bool(raw.get("whole_line", False)),
        once=bool(raw.get("once", False)),
    )


def build_pattern_set(document: dict[str, Any]) -> PatternSet:
    """Validate a parsed patterns document and compile it (separate from I/O so tests can feed one)."""
    by_scan: dict[str, list[Pattern]] = {}
    dialects: list[str] = []
    for section in document.get("dialect", []):
        name = str(section["name"])
        dialects.append(name)
        for raw in section.get("pattern", []):
            pattern = _pattern(name, raw)
            by_scan.setdefault(pattern.scan, []).append(pattern)
    # The traceback opener is a scan target too: the parser collects the lines that follow it.
    by_scan.setdefault(TRACEBACK_START, [])
    fields = document.get("fields", {})
    return PatternSet(
        dialects=tuple(dialects),
        by_scan={scan: tuple(patterns) for scan, patterns in by_scan.items()},
        scan=re.compile(_trie_regex(sorted(by_scan))),
        float_fields=frozenset(fields.get("float", ())),
        int_fields=frozenset(fields.get("int", ())),
    )


@cache
def default_patterns() -> PatternSet:
    """The patterns shipped with the kit (kit/logs/patterns.toml), loaded once."""
    text = resources.files("kit.logs").joinpath("patterns.toml").read_text(encoding="utf-8")
    return build_pattern_set(tomllib.loads(text))
