"""The key scan (LogParser.feed_text over a long text) finds the events the plain scan finds.

Over a text of 1 MiB or more, feed_text looks for the next line that may hold a scan word with a
KeyScan (each word from its rarest character; ASCII pieces translated so that every word begins
with one mark) and searches only that line with the scan. Here the key path is forced on short
texts, in small pieces (pieces end at a line's end, so a word may sit at either edge), and held to
the plain scan: real corpus logs whole, random mixes of their lines with ASCII and non-ASCII noise,
and arbitrary text around scan words.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kit.logs import analyze_text, parse_text
from kit.logs import parser as parser_module
from kit.logs.patterns import MARK, default_patterns, key_scan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGS = sorted((FIXTURES / "sglang-logs").glob("*.log")) + sorted((FIXTURES / "kit-logs").glob("*.log"))
REAL_LINES = sorted(
    {line for path in LOGS for line in path.read_text(encoding="utf-8", errors="replace").splitlines()}
)
WORDS = sorted(default_patterns().by_scan)


@contextlib.contextmanager
def key_path(piece_chars: int):
    """The key scan for every text, translated `piece_chars` characters (to a line's end) at a time."""
    with (
        mock.patch.object(parser_module, "_KEY_SCAN_MIN_CHARS", 0),
        mock.patch.object(parser_module, "_CHUNK_CHARS", piece_chars),
    ):
        yield


def test_the_key_path_is_taken_from_the_threshold_on(monkeypatch):
    """A long text goes through _KeyedSearch, a short one not (else the tests below prove nothing)."""
    built = []
    real = parser_module._KeyedSearch

    def spy(*args):
        built.append(args)
        return real(*args)

    monkeypatch.setattr(parser_module, "_KeyedSearch", spy)
    parse_text("Init torch distributed begin.\n" * 10)
    assert built == []
    parse_text("Init torch distributed begin.\n" * 40_000)  # 1.2 MB
    assert built


@pytest.mark.parametrize("piece_chars", [1, 97, 1 << 20])
def test_real_logs_read_the_same_with_the_key_scan(piece_chars):
    for path in LOGS:
        text = path.read_text(encoding="utf-8", errors="replace")
        plain_events, plain_report = parse_text(text), analyze_text(text)
        with key_path(piece_chars):
            assert parse_text(text) == plain_events, path.name
            assert analyze_text(text) == plain_report, path.name


noise = st.text(st.characters(codec="utf-8", exclude_characters="\n"), max_size=40)
mixes = st.tuples(
    st.lists(st.one_of(st.sampled_from(REAL_LINES), noise), max_size=80).map("\n".join),
    st.sampled_from([1, 13, 200, 5000]),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixes)
def test_mixes_of_real_lines_and_noise_read_the_same(mix):
    text, piece_chars = mix
    plain = parse_text(text)
    with key_path(piece_chars):
        assert parse_text(text) == plain


# Scan words cut and glued into arbitrary text: words at a piece's edge, inside each other, split by
# a newline, next to the mark character itself.
fragments = st.one_of(
    st.sampled_from(WORDS),
    st.sampled_from(WORDS).flatmap(lambda w: st.integers(0, len(w)).map(lambda i: w[:i])),
    st.sampled_from(WORDS).flatmap(lambda w: st.integers(0, len(w)).map(lambda i: w[i:])),
    # a letter changed to another word's first: marked alike, a candidate line with no word in it
    st.tuples(st.sampled_from(WORDS), st.sampled_from(sorted({w[0] for w in WORDS})), st.integers(0, 60)).map(
        lambda p: p[0][: p[2]] + p[1] + p[0][p[2] + 1 :]
    ),
    st.sampled_from(["\n", " ", MARK, "é", "█", "[2026-12-02 13:00:00 TP0] "]),
    st.text(max_size=5),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(fragments, max_size=60).map("".join), st.sampled_from([1, 7, 64]))
def test_arbitrary_text_around_scan_words_reads_the_same(text, piece_chars):
    plain = parse_text(text)
    with key_path(piece_chars):
        assert parse_text(text) == plain


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(fragments, max_size=40).map("".join),
    st.dictionaries(st.sampled_from(sorted({ch for word in WORDS for ch in word})), st.integers(0, 9)),
    st.sampled_from([1, 5, 50]),
)
@example("Kapture cpu graph begin\nKilled", {}, 50)  # a word first in the line after a false candidate
def test_the_keyed_search_finds_the_scans_own_hits(text, counts, piece_chars):
    """Whatever key each word gets (counts at random: false candidates, a word right after one),
    the first hit from each line's start on is the scan's own."""
    scan = default_patterns().scan
    starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    with key_path(piece_chars):
        keyed = parser_module._KeyedSearch(scan, tuple(WORDS), text, counts)
        for pos in starts:
            expected, hit = scan.search(text, pos), keyed.search(pos)
            assert (hit and (hit.span(), hit.group())) == (expected and (expected.span(), expected.group()))


def test_each_marked_tail_keeps_four_characters_after_its_key():
    """Marked, a tail of one or two characters (`==` of `is using nccl==`) would match nearly every
    key character of a log: each line a candidate, searched in Python (measured: 450,000 of them on
    the 1M-line serving log, slower than no key scan at all)."""
    words = tuple(WORDS)
    counts = {ch: 100 for word in words for ch in word} | {"=": 0, ")": 0, ":": 0}  # at words' ends
    keys = key_scan(words, counts)
    for tail in keys.tails:
        assert len(tail) >= 4 or tail in words, tail
    assert keys.marked.pattern.startswith(re.escape(MARK))  # one literal first: the engine's fast loop
