"""Turn SGLang log text into `Event`s: line by line for live use, or a whole buffer at once.

Both entry points share one classifier, so they give identical events for identical input:
`parse_text(text)` equals feeding `text.split("\n")` to a `LogParser` one piece at a time and
then calling `flush()`. Both take the log's collector wrappers off first (Compose, journald,
kubectl, `docker logs -t`, Ray, ANSI, CRLF: kit/logs/wrappers.py), with one `Unwrapper` per parser
that learns them from the log's first lines, so a wrapped log followed live reads as it does offline.

The bulk path never runs Python per uninteresting line: one compiled alternation of every
pattern's scan string (patterns.toml) searches the buffer in C, and only lines that hold a scan
string are classified in Python. Tracebacks are the exception: once `Traceback (most recent
call last)` is seen, following lines are read one by one until the exception line. A bare
traceback (no prefix of its own) that follows a prefixed log line is that line's: Python's logging
prints `logger.warning(msg, exc_info=True)` as the prefixed message, then the traceback unprefixed,
so the rank, time and message come from the line before.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kit.logs.digest import ServingDigest
from kit.logs.events import Event, Milestone, Note
from kit.logs.launch import launch_fields_at
from kit.logs.patterns import (
    TRACEBACK_FRAME,
    TRACEBACK_START,
    KeyScan,
    Pattern,
    PatternSet,
    default_patterns,
    key_scan,
    key_tails,
)
from kit.logs.prefix import sglang_prefix
from kit.logs.wrappers import Unwrapper, line_body

# The last line of a traceback: an exception class name, optionally dotted, then ": message".
_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(?::(?:\s.*)?)?")
_CONTINUES, _ENDS_WITH_EXCEPTION, _FOREIGN = 0, 1, 2
_TRACEBACK_KEEP_LINES = 400  # a runaway "traceback" (indented noise) must not grow without bound


@dataclass
class _PendingTraceback:
    line_no: int
    opener: str
    lines: list[str] = field(default_factory=list)
    headless: bool = False  # a pasted tail that starts at a frame, without the opener
    context: str | None = None  # the line before a bare opener: the logging call's own message


# Texts from this size on are searched through a KeyScan (a per-text cost: a character count of a
# sample and a regex compiled per narrowed scan, a few ms each, against about 4 ns saved per
# character of an ASCII log).
_KEY_SCAN_MIN_CHARS = 1 << 20
_CHUNK_CHARS = 1 << 20  # translated a piece at a time: a copy this size, not of the whole log
_SAMPLE_SLICES, _SAMPLE_CHARS = 16, 8192
_SPARSE_CHARS = 4096  # at most one word (not a `once` one) in this many sampled characters
_LAZY_MISSES = 1024  # about 3 ms of lines searched in vain, against a 10 ms compile


class _KeyedSearch:
    """`scan.search(text, pos)` for rising `pos`, over one long text: a KeyScan of the same words
    finds the next line that may hold a hit, and only that line is searched with the scan itself.
    No hit is missed (each hit of the scan holds a key hit in its line; no word holds a newline, and
    pieces end at one), so the match is the scan's own: the same start, the same word. One per
    text: the keys and the translated piece stay while the scan narrows and widens (a log of 2,000
    restarts narrows it 14,000 times)."""

    def __init__(self, patterns: PatternSet, text: str, counts: Mapping[str, int]):
        self._patterns = patterns
        words = patterns.scan_words()
        self._tail = key_tails(words, counts)
        self._ascii = all(word.isascii() for word in words)  # else pieces not ASCII take the scan
        self._keys = "".join(sorted({tail[0] for tail in self._tail.values()}))
        self._text = text
        # Per narrowed scan (by identity: PatternSet keeps each one): its KeyScan and the `once`
        # patterns seen that narrowed it.
        self._by_scan: dict[int, tuple[re.Pattern[str], KeyScan, frozenset[Pattern]]] = {}
        self._scan = patterns.scan
        self._key_scan, self._key_seen = self._build(patterns.scan, frozenset())
        self._pending: frozenset[Pattern] | None = None  # the scan's own KeyScan is not built yet
        # Lines a key hit found with no word while a scan's own KeyScan was not built, by scan (its
        # seen patterns): a restart log comes back to the same scans at every launch.
        self._misses: dict[frozenset[Pattern], int] = {}
        self._next = -1  # the first key hit at or after the last `pos` searched (rising, so kept)
        # The piece of text being searched: [start, end), translated by the marks if ASCII.
        self._start = self._end = 0
        self._marked: str | None = None

    def use(self, scan: re.Pattern[str], seen_once: set[Pattern]) -> None:
        """Search for `scan`'s words from now on: PatternSet.scan_without(seen_once).

        A narrower scan's own KeyScan is compiled only once the wider ones used for it found
        _LAZY_MISSES lines with no word (a compile is about 10 ms; a restart log narrows through a
        dozen scans at each launch, most kept for a few lines)."""
        self._scan = scan
        entry = self._by_scan.get(id(scan))
        if entry is None:
            seen = frozenset(seen_once)
            if self._key_seen <= seen:  # the KeyScan in use finds all this scan's words, and more
                self._pending = seen
                return
            self._switch(*self._build(scan, seen))
        else:
            self._switch(entry[1], entry[2])

    def _build(self, scan: re.Pattern[str], seen: frozenset[Pattern]) -> tuple[KeyScan, frozenset[Pattern]]:
        tails = (self._tail[word] for word in self._patterns.scan_words(seen))
        built = key_scan(tails, self._keys), seen
        self._by_scan[id(scan)] = (scan, *built)
        return built

    def _switch(self, keys: KeyScan, seen: frozenset[Pattern]) -> None:
        self._pending = None
        if keys is not self._key_scan:
            self._key_scan, self._key_seen = keys, seen
            self._next = -1  # a wider KeyScan may hit before the narrower one's next hit

    def search(self, pos: int) -> re.Match[str] | None:
        text = self._text
        while True:
            if self._next < pos:
                self._next = self._key_hit(pos)
                if self._next < 0:
                    return None
            start = text.rfind("\n", pos, self._next) + 1 or pos
            end = text.find("\n", self._next)
            end = len(text) if end < 0 else end
            hit = self._scan.search(text, start, end)
            if hit is not None:
                return hit
            pos = end + 1  # a key hit with no word around it: on to the next line
            if self._pending is not None:
                misses = self._misses[self._pending] = self._misses.get(self._pending, 0) + 1
                if misses > _LAZY_MISSES:
                    self._switch(*self._build(self._scan, self._pending))

    def _key_hit(self, pos: int) -> int:
        """Where the first key hit at or after `pos` starts, or -1."""
        text = self._text
        while True:
            if pos >= self._end:  # the next piece, from pos to a line's end
                if pos >= len(text):
                    return -1
                end = text.find("\n", pos + _CHUNK_CHARS)
                self._start, self._end = pos, len(text) if end < 0 else end + 1
                piece = text[pos : self._end]
                if not piece.isascii() and self._ascii:
                    # One `?` for each other character, in its place (str.translate is 50x slower
                    # off ASCII); no word holds one, so none is lost.
                    piece = piece.encode("ascii", "replace").decode("ascii")
                self._marked = piece.translate(self._key_scan.marks) if piece.isascii() else None
            if self._marked is not None:
                key = self._key_scan.marked.search(self._marked, pos - self._start)
                if key is not None:
                    return key.start() + self._start
            else:
                key = self._scan.search(text, pos, self._end)
                if key is not None:
                    return key.start()
            pos = self._end


def _sparse_counts(text: str, patterns: PatternSet) -> Counter[str] | None:
    """How often each character occurs in slices spread over `text` (a log changes on the way:
    start-up, then serving), or None where words other than `once` ones are dense in them: in a
    restart log's start-ups (a hit every 600-800 characters) the key scan saves little scanning
    between hits and costs Python per hit (measured: 7 % slower on the real-text restart log)."""
    step = max(len(text) // _SAMPLE_SLICES, 1)
    sample = "".join(text[i : i + _SAMPLE_CHARS] for i in range(0, len(text), step))
    by_scan = patterns.by_scan
    hits = sum(1 for hit in patterns.scan.finditer(sample) if not all(p.once for p in by_scan[hit.group()]))
    return None if hits * _SPARSE_CHARS > len(sample) else Counter(sample)


def _chain(first: re.Match[str], scan: re.Pattern[str], line: str):
    """The first hit, then the hits after it."""
    yield first
    yield from scan.finditer(line, first.end())


def _is_frame(line: str) -> bool:
    return line_body(line).lstrip().startswith(TRACEBACK_FRAME)


def _traceback_step(line: str) -> int:
    body = line_body(line)
    if body[:1] in (" ", "\t"):  # frames, source lines and ^^^^ markers are indented
        return _CONTINUES
    if _EXCEPTION_LINE.fullmatch(body):
        return _ENDS_WITH_EXCEPTION
    return _FOREIGN  # another record (or a blank line): the traceback was cut off


class LogParser:
    """Stateful line parser: `feed(line)` returns the events that line completes.

    A traceback is one event, returned when its exception line arrives (or when an unrelated
    line or `flush()` shows it was cut off); it carries the opening line's number, time and rank.
    """

    def __init__(self, patterns: PatternSet | None = None, *, unwrap: bool = True):
        self._patterns = patterns or default_patterns()
        # A log's collector wrappers (Compose, journald, kubectl, ...) come off before anything is
        # read, line by line or in bulk alike; False for text that unwrap() already read.
        self.unwrapper: Unwrapper | None = Unwrapper() if unwrap else None
        self._search = self._patterns.scan.search
        self._line_no = 0
        self._pending: _PendingTraceback | None = None
        self._seen_once: set[Pattern] = set()
        self._previous: str | None = None  # the last line fed one at a time (a bare traceback's context)
        # Line tails (from the first scan hit on) already classified: ranks and restarts print
        # the same milestone text over and over. Only results that depend on the tail alone.
        self._memo: dict[str, tuple[Pattern, int, dict[str, Any]]] = {}
        # What the serving lines fed one at a time show (live); offline, analyze_text reads the whole
        # text with the same code (kit/logs/digest.py digest_text), off the bulk path.
        self.digest = ServingDigest()

    @property
    def line_no(self) -> int:
        """How many lines were read so far."""
        return self._line_no

    def feed(self, line: str) -> list[Event]:
        """Read one complete line (a trailing newline is dropped; embedded newlines split it)."""
        if line.endswith("\n"):
            line = line[:-1]
        if "\n" in line:  # the digest reads wrapped lines alike (it finds its words anywhere in a line)
            events, text = self.feed_text(line), line
        else:
            if self.unwrapper is not None:
                line = self.unwrapper.line(line)
            events, text = self._feed_one(line), line
        self.digest.add_text(text)
        self.digest.add_events(events)
        return events

    def feed_text(self, text: str) -> list[Event]:
        """Read a buffer: the same events as feeding each piece of `text.split("\\n")`."""
        if self.unwrapper is not None:
            text = self.unwrapper.text(text)
        events: list[Event] = []
        size = len(text)
        pos = 0
        counts = _sparse_counts(text, self._patterns) if size >= _KEY_SCAN_MIN_CHARS else None
        search, keyed = None, None  # keyed stands for the scan of `search` over this text
        while pos <= size:
            if self._pending is not None:  # inside a traceback: one line at a time
                end = text.find("\n", pos)
                end = size if end < 0 else end
                events.extend(self._feed_one(text[pos:end]))
                pos = end + 1
                continue
            if counts is None:
                hit = self._search(text, pos)  # narrows as `once` lines are seen
            else:
                if keyed is None:
                    keyed = _KeyedSearch(self._patterns, text, counts)
                if search is not self._search:  # a new launch, or a `once` line seen
                    search = self._search
                    keyed.use(search.__self__, self._seen_once)
                hit = keyed.search(pos)
            if hit is None:
                self._line_no += text.count("\n", pos) + 1
                break
            start = text.rfind("\n", pos, hit.start()) + 1 or pos
            self._line_no += text.count("\n", pos, start)
            end = text.find("\n", hit.start())
            end = size if end < 0 else end
            if start > 0 and hit.group() == TRACEBACK_START:  # only then is the line before needed
                self._previous = text[text.rfind("\n", 0, start - 1) + 1 : start - 1]
            events.extend(self._feed_one(text[start:end], hit.start() - start))
            pos = end + 1
        # The next buffer's first line may open a traceback: its context is this buffer's last
        # line, whether or not that line was fed one at a time (feeding by chunks == in bulk).
        last = text[text.rfind("\n") + 1 :]
        self._previous = last[:-1] if last.endswith("\r") else last
        return events

    def flush(self) -> list[Event]:
        """End of input: a traceback still open is returned as cut off (no exception line)."""
        if self._pending is None:
            return []
        return [self._finish_traceback(None)]

    # -- one line ---------------------------------------------------------------------------

    def _feed_one(self, line: str, hit: int | None = None) -> list[Event]:
        """One line; `hit` is where the scan first matched in it, when the caller already knows."""
        self._line_no += 1
        if line.endswith("\r"):
            line = line[:-1]
        previous, self._previous = self._previous, line
        events: list[Event] = []
        if self._pending is not None:
            step = _traceback_step(line)
            if step == _CONTINUES:
                if len(self._pending.lines) < _TRACEBACK_KEEP_LINES:
                    self._pending.lines.append(line)
                return events
            if step == _ENDS_WITH_EXCEPTION:
                self._pending.lines.append(line)
                return [self._finish_traceback(line_body(line).strip())]
            events.append(self._finish_traceback(None))  # cut off; this line is read normally
            hit = None
        if hit is None:
            found = self._search(line)
            if found is None:
                return events
            hit = found.start()
        if TRACEBACK_START in line:
            self._pending = _PendingTraceback(self._line_no, line, [line], context=previous)
            return events
        if TRACEBACK_FRAME in line and _is_frame(line):
            self._pending = _PendingTraceback(self._line_no, line, [line], headless=True)
            return events
        event = self._classify(line, hit)
        if event is not None:
            events.append(event)
        return events

    def _classify(self, line: str, start: int = 0) -> Event | None:
        """The first pattern that matches `line`, trying scan hits from `start` on (the first
        hit; earlier ones can only be `once` lines already seen)."""
        tail = line[start:]
        memo = self._memo.get(tail)
        if memo is not None:
            pattern, offset, fields = memo
            time, rank = sglang_prefix(line, start + offset)
            return Event(
                self._line_no, time, rank, pattern.milestone, dict(fields), line,
                pattern.note, pattern.dialect, pattern.rank0_only, pattern.fatal,
            )  # fmt: skip
        by_scan = self._patterns.by_scan
        scan = self._patterns.scan
        first = scan.match(line, start)  # the caller's hit: no iterator for the usual one-hit line
        hits = scan.finditer(line, start + 1) if first is None else _chain(first, scan, line)
        skipped = False
        for hit in hits:
            for pattern in by_scan[hit.group()]:
                if pattern.once and pattern in self._seen_once:
                    skipped = True
                    continue
                if pattern.whole_line:
                    found = pattern.regex.fullmatch(line_body(line).strip())
                else:
                    found = pattern.regex.search(line)
                if found is not None:
                    if pattern.once:
                        self._seen_once.add(pattern)
                        self._search = self._patterns.scan_without(frozenset(self._seen_once)).search
                    event = self._event(pattern, found, line, hit.start())
                    if (
                        not skipped
                        and found.start() >= start
                        and not (pattern.once or pattern.whole_line or pattern.note is Note.LAUNCH)
                        and pattern.milestone is not Milestone.ERROR
                    ):
                        if len(self._memo) > 4096:
                            self._memo.clear()
                        self._memo[tail] = (pattern, hit.start() - start, dict(event.fields))
                    return event
        return None

    def _event(self, pattern: Pattern, found: re.Match[str], line: str, at: int) -> Event:
        time, rank = sglang_prefix(line, at)
        fields: dict[str, Any] = {}
        for name, kind in pattern.groups:
            value = found.group(name)
            if value is not None:
                value = value.strip()
                try:
                    fields[name] = kind(value)
                except ValueError:
                    fields[name] = value
        if pattern.kind:
            fields["kind"] = pattern.kind
        if pattern.note is Note.LAUNCH:
            # A new launch: its arguments say which ranks to expect, and "once" lines count again.
            fields.update(launch_fields_at(line, at))
            self._seen_once.clear()
            self._search = self._patterns.scan.search
        elif pattern.milestone is Milestone.ERROR:
            hint = self._patterns.phase_of(line)
            if hint is not None:
                fields["phase_hint"] = hint.value
                _mark_over(fields, self._patterns, line)
        return Event(  # positional: a hundred thousand of these per log of restarts
            self._line_no,
            time,
            rank,
            pattern.milestone,
            fields,
            line,
            pattern.note,
            pattern.dialect,
            pattern.rank0_only,
            pattern.fatal,
        )

    def _finish_traceback(self, exception: str | None) -> Event:
        pending, self._pending = self._pending, None
        assert pending is not None
        opener = pending.opener
        at = -1 if pending.headless else opener.find(TRACEBACK_START)
        time, rank = sglang_prefix(opener, at if at >= 0 else None)
        fields: dict[str, Any] = {"kind": "traceback"}
        context = pending.context
        if at == 0 and context and not context[:1].isspace():
            # A bare opener: the logging call's message line before it says who and why.
            context_time, context_rank = sglang_prefix(context)
            if context_time is not None or context_rank is not None:
                time, rank = context_time, context_rank
                fields["message"] = line_body(context).strip()
        fatal = False
        # The opener's own words may be a fatal error line: "Scheduler hit an exception: Traceback
        # ...", "Initialization failed. warmup error: Traceback ...".
        head = self._classify(opener[:at]) if at > 0 else None
        if head is not None and head.milestone is Milestone.ERROR and head.fatal:
            fields["kind"], fatal = head.fields.get("kind", "traceback"), True
        elif exception:
            # So may its exception line: vLLM's `EngineDeadError: ...`, Ray's `ActorDiedError: ...`.
            last = self._classify(exception)
            if last is not None and last.milestone is Milestone.ERROR and last.fatal:
                fields["kind"], fatal = last.fields.get("kind", "traceback"), True
        if pending.headless:
            fields["headless"] = True
        if exception:
            fields["exception"] = exception
        fields["traceback"] = "\n".join(pending.lines)
        hint = self._patterns.phase_of(fields["traceback"])
        if hint is None and context and not _is_frame(context):
            # The logging call's message before it may name the step whose frames the tail cut
            # (vLLM's workers: 'Error executing method init_device. ...', then the traceback).
            hint = self._patterns.phase_of(line_body(context))
        if hint is not None:
            fields["phase_hint"] = hint.value
            _mark_over(fields, self._patterns, fields["traceback"])
        return Event(
            line_no=pending.line_no,
            time=time,
            rank=rank,
            milestone=Milestone.ERROR,
            fields=fields,
            text=opener,
            dialect="errors",
            fatal=fatal,
        )


def _mark_over(fields: dict[str, Any], patterns: PatternSet, text: str) -> None:
    """Mark an error whose message names the step that raised it even after a later step's
    milestone (a rule with `over_milestones`; PatternSet.phase_over). Only an error with a phase
    hint can: such a rule's message is one of the messages phase_of reads first."""
    over = patterns.phase_over(text)
    if over is not None:
        fields["phase_over"] = over.value


def parse_text(text: str, patterns: PatternSet | None = None, *, unwrap: bool = True) -> list[Event]:
    """All events of a whole log (offline use); see the module docstring for the guarantees.
    `unwrap=False` for text whose collector wrappers kit.logs.wrappers.unwrap already took off."""
    parser = LogParser(patterns, unwrap=unwrap)
    events = parser.feed_text(text)
    events.extend(parser.flush())
    return events
