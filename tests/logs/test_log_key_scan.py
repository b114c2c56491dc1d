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
from kit.logs.patterns import MARK, _last_keys, build_pattern_set, default_patterns, key_scan, key_tails

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGS = sorted((FIXTURES / "sglang-logs").glob("*.log")) + sorted((FIXTURES / "kit-logs").glob("*.log"))
REAL_LINES = sorted(
    {line for path in LOGS for line in path.read_text(encoding="utf-8", errors="replace").splitlines()}
)
WORDS = sorted(default_patterns().by_scan)


@contextlib.contextmanager
def key_path(piece_chars: int, lazy_misses: int = 1):
    """The key scan for every text, translated `piece_chars` characters (to a line's end) at a time,
    a narrowed scan's own KeyScan built after `lazy_misses` lines found in vain by a wider one."""
    with (
        mock.patch.object(parser_module, "_KEY_SCAN_MIN_CHARS", 0),
        mock.patch.object(parser_module, "_SPARSE_CHARS", 0),
        mock.patch.object(parser_module, "_CHUNK_CHARS", piece_chars),
        mock.patch.object(parser_module, "_LAZY_MISSES", lazy_misses),
    ):
        yield


def test_the_key_path_is_taken_from_the_threshold_on(monkeypatch):
    """A long text with few words goes through _KeyedSearch; a short one, or one dense with words, not."""
    built = []
    real = parser_module._KeyedSearch

    def spy(*args):
        built.append(args)
        return real(*args)

    monkeypatch.setattr(parser_module, "_KeyedSearch", spy)
    sparse = "[2026-12-02 13:00:00 TP0] Decode batch. #running-req: 1, #token: 0\n" * 20_000  # 1.3 MB
    parse_text(sparse[:10_000])
    assert built == []
    parse_text(sparse + "Killed\n")
    assert len(built) == 1
    parse_text("Init torch distributed begin.\n" * 40_000)  # 1.2 MB, a word on every line: not taken
    assert len(built) == 1


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
        keyed = parser_module._KeyedSearch(default_patterns(), text, counts)
        for pos in starts:
            expected, hit = scan.search(text, pos), keyed.search(pos)
            assert (hit and (hit.span(), hit.group())) == (expected and (expected.span(), expected.group()))


def test_each_tail_keeps_six_characters_and_is_in_no_other_word():
    """Marked, a tail of one or two characters (`==` of `is using nccl==`) would match nearly every
    key character of a log: each line a candidate, searched in Python (measured: 450,000 of them on
    the 1M-line serving log, slower than no key scan at all); one of four (`SHM/` of `via SHM/`)
    found NCCL's `CUMEM/` lines. A tail another word holds (`kpoint shards:` in `Loading safetensors
    checkpoint shards:`) finds that word's lines after the narrowed scan dropped them."""
    last = _last_keys(tuple(WORDS))  # the last place a key may be
    for word in WORDS:
        tail = word[last[word] :]  # the shortest tail a key can leave
        assert len(tail) >= min(len(word), 6), tail
        assert not any(tail in other and word not in other for other in WORDS), tail
    counts = {ch: 100 for word in WORDS for ch in word} | {"=": 0, ")": 0, ":": 0, "/": 0}  # at words' ends
    tails = key_tails(tuple(WORDS), counts)
    assert all(word.endswith(tail) and len(tail) >= len(word[last[word] :]) for word, tail in tails.items())
    keys = key_scan(tails.values(), "".join({tail[0] for tail in tails.values()}))
    assert keys.marked.pattern.startswith(re.escape(MARK))  # one literal first: the engine's fast loop


def test_a_scan_the_key_scan_in_use_does_not_cover_gets_its_own_at_once():
    """A KeyScan in use may stand for a narrower scan (its own is built lazily) only if it looks
    for all that scan's words: after `Decode batch` was dropped, a scan that has it again (a new
    launch, then another `once` line read in the same step) must not search with the old one."""
    patterns = default_patterns()
    decode, p2p = patterns.by_scan["Decode batch"][0], patterns.by_scan["via P2P/"][0]
    text = "noise\n[2026-12-02 13:00:00 TP0] Decode batch. #running-req: 1\n"
    keyed = parser_module._KeyedSearch(patterns, text, {})
    without_decode = patterns.scan_without(frozenset({decode}))
    keyed.use(without_decode, {decode})
    keyed._switch(*keyed._build(without_decode, frozenset({decode})))
    keyed.use(patterns.scan_without(frozenset({p2p})), {p2p})
    hit = keyed.search(0)
    assert hit is not None and hit.group() == "Decode batch"


def test_a_wider_key_scan_forgets_the_narrower_ones_next_hit():
    """At a new launch the scan widens again: a line the narrower KeyScan skipped may hold a hit."""
    patterns = default_patterns()
    decode = patterns.by_scan["Decode batch"][0]
    text = "Decode batch. #running-req: 1\nInit torch distributed begin.\n"
    keyed = parser_module._KeyedSearch(patterns, text, {})
    without_decode = patterns.scan_without(frozenset({decode}))
    keyed.use(without_decode, {decode})
    keyed._switch(*keyed._build(without_decode, frozenset({decode})))
    assert keyed.search(0).group() == "Init torch distributed begin"
    keyed.use(patterns.scan, set())
    assert keyed.search(0).group() == "Decode batch"


def test_a_narrowed_scan_gets_its_own_key_scan_after_lines_found_in_vain():
    """Until then the wider KeyScan finds every line of the dropped word (thousands of NCCL channel
    lines, every decode line of a serving log), each searched in Python."""
    patterns = default_patterns()
    decode = patterns.by_scan["Decode batch"][0]
    text = "[2026-12-02 13:00:00 TP0] Decode batch. #running-req: 1\n" * 5 + "Killed\n"
    keyed = parser_module._KeyedSearch(patterns, text, {})
    keyed.use(patterns.scan_without(frozenset({decode})), {decode})
    with mock.patch.object(parser_module, "_LAZY_MISSES", 3):
        assert keyed.search(0).group() == "Killed"
    assert keyed._key_seen == {decode}


def test_a_word_off_ascii_is_found_in_pieces_off_ascii():
    """With such a word, a piece that is not ASCII is searched with the scan itself (its `?` in
    place of each other character would hide the word)."""
    patterns = build_pattern_set(
        {
            "dialect": [
                {
                    "name": "0.9",
                    "pattern": [
                        {"milestone": "init.begin", "scan": "Démarrage distribué"},
                        {"milestone": "load.begin", "scan": "Load weight begin"},
                    ],
                }
            ]
        }
    )
    text = "█ 1/2\n[2026-12-02 13:00:00 TP0] Démarrage distribué\nLoad weight begin\n" * 3
    plain = parse_text(text, patterns)
    assert len(plain) == 6
    with key_path(20):
        assert parse_text(text, patterns) == plain
