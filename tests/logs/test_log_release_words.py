"""Conformance of the log patterns to each release's own words (tests/fixtures/release-words.toml).

Each entry is a string as an SGLang release's code writes it (the file at that release; the
templates were found in the releases' wheels by scripts/release_words.py). Rendered with sample
values and printed under SGLang's prefix, it must read as the milestone, note or error named.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from kit.logs import parse_text

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "release-words.toml"
ENTRIES = tomllib.loads(DATA.read_text(encoding="utf-8"))["line"]
_PLACEHOLDER = re.compile(r"\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}|%s")


def render(template: str, values: dict[str, str]) -> str:
    """The line the code prints: each `{expr[!c][:spec]}` (or `%s`) replaced by its sample value,
    `values[expr]` (or `values[expr!c]`) where given, else a number of the spec's shape."""

    def value(match: re.Match[str]) -> str:
        inner = match.group(1)
        if inner is None:  # logging's %s
            return values.get("%s", "HTTP server did not become ready")
        if inner in values:
            return values[inner]
        expr, _, spec = inner.partition(":")
        if expr in values:
            return values[expr]
        bare = expr.split("!")[0]
        if bare in values:
            return values[bare]
        return "12.34" if spec.endswith("f") else "3"

    return _PLACEHOLDER.sub(value, template)


@pytest.mark.parametrize(
    "entry", ENTRIES, ids=[f"{e['release']}-{e['expect']}-{e['template'][:40]}" for e in ENTRIES]
)
def test_each_release_line_reads_as_its_milestone_note_or_error(entry):
    line = "[2026-12-05 10:00:00 TP0] " + render(entry["template"], entry.get("values", {}))
    events = parse_text(line)
    assert len(events) == 1, (line, events)
    [event] = events
    expect = entry["expect"]
    if ":" in expect:
        what, kind = expect.split(":")
        got = "error" if event.is_error else event.note and event.note.value
        assert (got, event.fields.get("kind")) == (what, kind), line
    elif event.note is not None:
        assert event.note.value == expect, line
    else:
        assert event.milestone is not None and event.milestone.value == expect, line


def test_the_data_covers_every_draft_capture_wording_from_0_4_to_0_5_23():
    drafts = {e["release"] for e in ENTRIES if "draft" in e["template"] or "eagle_worker" in e["file"]}
    assert {"0.4.3", "0.4.6", "0.4.9", "0.5.9", "0.5.13", "0.5.15", "0.5.23"} <= drafts
