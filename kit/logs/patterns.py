"""Load the per-dialect line patterns (patterns.toml) and build the one scanning regex from them.

The scan is a prefix tree of every pattern's `scan` substring compiled as a single alternation:
Python's regex engine then tries only the branches whose first character matches, in C, so a
log is searched at memory speed and only lines holding a scan string reach Python code.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from kit.logs.events import Milestone, Note, Phase
from kit.logs.wrappers import line_body

TRACEBACK_START = "Traceback (most recent call last)"
# A traceback's frame line. A paste that starts inside a traceback (no opener) is read from its
# first frame on, so a pasted tail still yields its exception.
TRACEBACK_FRAME = 'File "'


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
    # The regex's named groups with the type each is read as (int, float or str), in order.
    groups: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class ExceptionPhase:
    """Which start-up phase a traceback belongs to, from its message or its frames (one dialect)."""

    dialect: str
    phase: Phase
    messages: tuple[str, ...] = ()
    frames: tuple[str, ...] = ()
    # Read only when no rule's message or frame applies: a library's words that say what was under
    # way (torch: "... during CUDA graph capture") while the frames, where the paste has them, say
    # which step did it (a lazily captured graph while serving is serving).
    fallback_messages: tuple[str, ...] = ()
    # Its messages name the step that raised them even after a milestone of a later phase: vLLM
    # prints 'Available KV cache memory' (kv.ready) before its KV check raises (PatternSet.phase_over).
    over_milestones: bool = False


@dataclass(frozen=True)
class PatternSet:
    dialects: tuple[str, ...]  # section names in file order
    by_scan: dict[str, tuple[Pattern, ...]]  # scan substring -> patterns to try, in file order
    scan: re.Pattern[str]
    float_fields: frozenset[str]
    int_fields: frozenset[str]
    exception_phases: tuple[ExceptionPhase, ...] = ()
    _narrowed: dict[frozenset[Pattern], re.Pattern[str]] = field(default_factory=dict, compare=False)
    _phases: dict[str, Phase | None] = field(default_factory=dict, compare=False, repr=False)

    def scan_without(self, seen_once: frozenset[Pattern]) -> re.Pattern[str]:
        """The scan minus the scan strings whose patterns are all `once` and already seen.

        NCCL prints one `via P2P/` line per channel, thousands per start; once the first was
        read they need not reach Python at all. Cached per set (there are few once patterns).
        """
        if not seen_once:
            return self.scan
        narrowed = self._narrowed.get(seen_once)
        if narrowed is None:
            narrowed = self._narrowed[seen_once] = re.compile(_trie_regex(list(self.scan_words(seen_once))))
        return narrowed

    def scan_words(self, seen_once: frozenset[Pattern] = frozenset()) -> tuple[str, ...]:
        """The scan strings `scan_without(seen_once)` searches for, sorted."""
        return tuple(
            sorted(
                scan
                for scan, patterns in self.by_scan.items()
                if not patterns or not all(p.once and p in seen_once for p in patterns)
            )
        )

    def phase_of(self, text: str) -> Phase | None:
        """`_phase_of(text)`, remembered: a restarting server prints the same traceback each time."""
        memo = self._phases
        if text in memo:
            return memo[text]
        if len(memo) > 1024:
            memo.clear()
        phase = memo[text] = self._phase_of(text)
        return phase

    def _phase_of(self, text: str) -> Phase | None:
        """The phase an error's text (traceback or line) points at, or None.

        A message rule wins (`Capture cuda graph failed` is capture wherever it is raised); then
        the outermost frame naming a phase's own function: SGLang's and vLLM's start-up runs one
        function per phase (`load_model`, `init_cuda_graphs`, ...), and the frames below it are
        the helpers it called, which can belong to any phase (a pynccl all-reduce in capture);
        last a rule's fallback message (torch's "... during CUDA graph capture"), where no frame
        named the step. One regex of every message and one of every frame word say first whether any rule can
        apply: most error lines and most frames name none (a restart log has thousands).
        """
        messages, frames, called = self._phase_words
        if messages is not None and messages.search(text):
            for rule in self.exception_phases:
                if any(message in text for message in rule.messages):
                    return rule.phase
        phase = self._frame_phase(text, frames, called)
        if phase is None and self._fallback_words is not None and self._fallback_words.search(text):
            for rule in self.exception_phases:
                if any(message in text for message in rule.fallback_messages):
                    return rule.phase
        return phase

    def phase_over(self, text: str) -> Phase | None:
        """The phase a rule marked `over_milestones` names by its message in `text`, or None: the
        step that raised, even when the milestones already said a later one began."""
        for rule in self.exception_phases:
            if rule.over_milestones and any(message in text for message in rule.messages):
                return rule.phase
        return None

    def _frame_phase(
        self, text: str, frames: re.Pattern[str] | None, called: re.Pattern[str] | None
    ) -> Phase | None:
        """The phase of the outermost frame (or call under a frame) naming a rule's step."""
        if frames is None or called is None or TRACEBACK_FRAME not in text:
            return None
        lines = text.splitlines()
        for index, line in enumerate(lines):
            if TRACEBACK_FRAME not in line:  # cheap: the check below strips the line's wrappers
                continue
            stripped = line_body(line).lstrip()
            if not stripped.startswith(TRACEBACK_FRAME):  # a frame: `File "...", line N, in func`
                continue
            # The frame and the source line under it (`self.load_model()`): a tail cut right
            # after a call still names the phase it called into.
            source = lines[index + 1] if index + 1 < len(lines) else ""
            if not frames.search(stripped) and not called.search(source):
                continue
            for rule in self.exception_phases:
                if any(frame in stripped or f"{frame}(" in source for frame in rule.frames):
                    return rule.phase
        return None

    @functools.cached_property
    def _phase_words(self) -> tuple[re.Pattern[str] | None, re.Pattern[str] | None, re.Pattern[str] | None]:
        """(any rule's message, any rule's frame word, any frame word called as `word(`)."""
        messages = sorted({m for rule in self.exception_phases for m in rule.messages})
        frames = sorted({f for rule in self.exception_phases for f in rule.frames})

        def any_of(words: list[str], suffix: str = "") -> re.Pattern[str] | None:
            return re.compile("|".join(re.escape(w + suffix) for w in words)) if words else None

        return any_of(messages), any_of(frames), any_of(frames, "(")

    @functools.cached_property
    def _fallback_words(self) -> re.Pattern[str] | None:
        words = sorted({m for rule in self.exception_phases for m in rule.fallback_messages})
        return re.compile("|".join(re.escape(w) for w in words)) if words else None

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


@dataclass(frozen=True)
class KeyScan:
    """A cheaper stand-in for the scan of some words over a long text: every hit of the scan holds
    a hit of this one in the same line (LogParser.feed_text then searches that line with the scan
    itself, so which key a word gets changes speed, never events).

    The scan's regex begins with a character set of every word's first letter; Python's engine
    tests each character of the text against it (about 3 ns each) and starts the prefix tree at
    every one that belongs (on a serving log one character in ten: `n`, `T`, `s`, `[`): most of a
    parse. Here each word starts at its key, its rarest character in the log (`new_token_ratio: `
    from `_`) and the text is searched translated by `marks`, each key character to MARK, where
    every tail begins with the same literal, which the engine finds with a plain character loop,
    ten times faster than a set.
    """

    marks: dict[int, str]
    marked: re.Pattern[str]


MARK = "\x00"
_KEY_TAIL = 6


def key_tails(words: tuple[str, ...], counts: Mapping[str, int]) -> dict[str, str]:
    """Each word's tail from its key on, in a text whose `counts` say how often each character
    occurs in it."""
    last = _last_keys(words)
    return {
        word: word[min(range(last[word] + 1), key=lambda i: (counts.get(word[i], 0), i)) :] for word in words
    }


@functools.lru_cache(maxsize=8)
def _last_keys(words: tuple[str, ...]) -> dict[str, int]:
    """The last place each word's key may be. It leaves a tail of at least _KEY_TAIL characters: a
    short tail once its key characters are marked (`==` of `nccl==`) finds nearly every mark. And
    the tail is found in no other word but those holding the whole word: `kpoint shards:` of
    `Multi-thread loading pt checkpoint shards:` would find every `Loading safetensors checkpoint
    shards:` line, thousands in a restart log, after the narrowed scan dropped them."""
    last = {}
    for word in words:
        end = max(len(word) - _KEY_TAIL, 0)
        for other in words:
            if word not in other and word[end:] in other:  # a tail in `other` ends in it too
                low, high = 0, end  # word[high:] is in other; the first such start, by halves
                while low < high:
                    mid = (low + high) // 2
                    low, high = (low, mid) if word[mid:] in other else (mid + 1, high)
                end = low - 1
        last[word] = max(end, 0)
    return last


def key_scan(tails: Iterable[str], keys: str) -> KeyScan:
    """The KeyScan of some of a text's tails, where `keys` (the first characters of all its words'
    tails) are marked: one translation of the text serves each narrowed scan."""
    return _key_scan(tuple(sorted(set(tails))), keys)


@functools.lru_cache(maxsize=64)  # one per narrowed scan and character statistics of a log
def _key_scan(tails: tuple[str, ...], keys: str) -> KeyScan:
    marks = str.maketrans(dict.fromkeys(keys, MARK))
    marked = sorted({tail.translate(marks) for tail in tails})
    return KeyScan(marks, re.compile(_trie_regex(marked)))


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
            pattern = _typed_groups(_pattern(name, raw), document.get("fields", {}))
            by_scan.setdefault(pattern.scan, []).append(pattern)
    # The traceback opener and frames are scan targets too: the parser collects what follows.
    by_scan.setdefault(TRACEBACK_START, [])
    by_scan.setdefault(TRACEBACK_FRAME, [])
    fields = document.get("fields", {})
    return PatternSet(
        dialects=tuple(dialects),
        by_scan={scan: tuple(patterns) for scan, patterns in by_scan.items()},
        scan=re.compile(_trie_regex(sorted(by_scan))),
        float_fields=frozenset(fields.get("float", ())),
        int_fields=frozenset(fields.get("int", ())),
        exception_phases=tuple(_exception_phase(raw) for raw in document.get("exception_phase", [])),
    )


def _typed_groups(pattern: Pattern, fields: dict[str, Any]) -> Pattern:
    """The pattern with its named groups and their types resolved once (not per line)."""
    ints, floats = set(fields.get("int", ())), set(fields.get("float", ()))
    groups = tuple(
        (name, int if name in ints else float if name in floats else str) for name in pattern.regex.groupindex
    )
    return dataclasses.replace(pattern, groups=groups)


def _exception_phase(raw: dict[str, Any]) -> ExceptionPhase:
    where = f"patterns.toml [[exception_phase]] {raw.get('dialect')!r} {raw.get('phase')!r}"
    unknown = set(raw) - {"dialect", "phase", "messages", "frames", "fallback_messages", "over_milestones"}
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    try:
        phase = Phase(raw.get("phase"))
    except ValueError:
        raise ValueError(f"{where}: `phase` must be one of {[p.value for p in Phase]}") from None
    messages, frames = tuple(raw.get("messages", ())), tuple(raw.get("frames", ()))
    fallback = tuple(raw.get("fallback_messages", ()))
    words = (*messages, *frames, *fallback)
    if not words or not all(isinstance(w, str) and w for w in words):
        raise ValueError(f"{where}: give non-empty `messages`, `frames` and/or `fallback_messages` strings")
    over = raw.get("over_milestones", False)
    if not isinstance(over, bool) or (over and not messages):
        raise ValueError(f"{where}: `over_milestones` is true or false, and needs `messages`")
    return ExceptionPhase(str(raw.get("dialect", "")), phase, messages, frames, fallback, over)


@cache
def default_patterns() -> PatternSet:
    """The patterns shipped with the kit (kit/logs/patterns.toml), loaded once."""
    text = resources.files("kit.logs").joinpath("patterns.toml").read_text(encoding="utf-8")
    return build_pattern_set(tomllib.loads(text))
