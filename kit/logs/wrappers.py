"""What stands in front of SGLang's words on a line: collector wrappers and record prefixes.

One table (wrappers.toml) and two readings of it:

- **Collector wrappers** (`[[wrapper]]`: `docker compose logs`' `sglang-1  | `, `kubectl logs
  --prefix`, journalctl's modes, `docker logs -t`, Ray's `(pid=123) `) are taken off every line of
  a log that carries them, with ANSI colour codes and CRLF line ends, and reported (kind, how many
  lines, an example). `Unwrapper` does it for one log, the same way whether the log is read line by
  line as it is written (`kit watch --log`, `kit up`: LogParser.feed) or as a whole pasted text
  (`kit analyze`: `unwrap(text)`, LogParser.feed_text): `text(t)` equals `line()` of each piece
  of `t.split("\\n")`, so a live log is read exactly as the same text offline.
- **Record prefixes** (`[[prefix]]`: SGLang's own `[date time TPn] `, torchrun's `[rank0]: `,
  `srun -l`, vLLM and uvicorn logging) stay on the line (the parser reads SGLang's time and rank
  from it); `line_body(line)` looks past them, and past any collector wrapper marked `per_line`,
  where the parser needs a line's own words (traceback continuation lines, whole-line patterns).

Which wrappers a log carries is learned from its own lines, causally (a live reader cannot look
ahead): a kind is adopted once it starts at least a fifth of the first lines read so far (any one
of the first few), and is then taken off every later line; a sparse kind (Ray tags only its
workers' lines) from its first line (given up after a thousand lines that only look like one);
ANSI codes and CRLF from the first line that has them. Only the log's head is searched (the first
400 lines; the first 2M characters for ANSI, CRLF and sparse kinds), so the cost does not grow
with the log: past the head, `text()` strips what was adopted with one C-level `re.subn` per
kind (anchored after a newline) and runs no Python per line.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]")  # CSI sequences (colours), charset
_CR_AT_LINE_END = re.compile(r"\r$", re.MULTILINE)
_SAMPLE_LINES = 400  # a collector wraps every line: the first lines tell
_SAMPLE_SHARE = 0.2  # a kind on fewer of the lines read than this is text that looks like one
_SPARSE_TRIES = 1000  # head lines with a sparse kind's hint but not the kind, before it is given up
# ANSI codes, CRLF and sparse kinds are looked for in the head only: str.find on a non-ASCII str
# (tqdm's bars make most logs so) is no memchr, and a whole 100 MB log would cost more than its
# parse's few per cent.
_HEAD_CHARS = 1 << 21


@dataclass(frozen=True, slots=True)
class Wrapper:
    kind: str
    title: str
    regex: re.Pattern[str]
    example: str
    source: str
    sparse: bool = False
    hint: str = ""  # a sparse wrapper's literal: a line without it cannot start with the wrapper
    per_line: bool = True  # looked past on any line by line_body, adopted or not


@dataclass(frozen=True, slots=True)
class WrapperSeen:
    kind: str
    title: str
    count: int  # lines it was stripped from (ansi: codes removed; crlf: line ends)
    example: str  # the first one, as it stood in the log


@dataclass(frozen=True, slots=True)
class Unwrapped:
    text: str
    seen: tuple[WrapperSeen, ...]


def _entries(raw: list[dict]) -> tuple[Wrapper, ...]:
    return tuple(
        Wrapper(
            kind=entry["kind"],
            title=entry["title"],
            regex=re.compile(entry["regex"]),
            example=entry["example"],
            source=entry["source"],
            sparse=bool(entry.get("sparse", False)),
            hint=entry.get("hint", ""),
            per_line=bool(entry.get("per_line", True)),
        )
        for entry in raw
    )


@cache
def _table() -> dict[str, tuple[Wrapper, ...]]:
    raw = tomllib.loads(resources.files("kit.logs").joinpath("wrappers.toml").read_text(encoding="utf-8"))
    return {
        "wrapper": _entries(raw["wrapper"]),
        "suffix": _entries(raw.get("suffix", [])),
        "prefix": _entries(raw["prefix"]),
    }


def wrappers() -> tuple[Wrapper, ...]:
    """The collector wrappers, in the order they are tried at a position."""
    return _table()["wrapper"]


def suffixes() -> tuple[Wrapper, ...]:
    """What a collector appends to some lines (Ray's deduplication note): sparse, found by its hint."""
    return _table()["suffix"]


def record_prefixes() -> tuple[Wrapper, ...]:
    """What a line of the server's own output may start with before its words."""
    return _table()["prefix"]


@cache
def _body_regex() -> re.Pattern[str]:
    # Any number of them in any order, each consuming exactly its own separator, so a traceback's
    # continuation line keeps its indentation.
    kinds = [w for w in wrappers() if w.per_line] + list(record_prefixes())
    return re.compile("(?:" + "|".join(f"(?:{w.regex.pattern})" for w in kinds) + ")*")


def line_body(line: str) -> str:
    """The line past its collector wrappers and record prefixes (SGLang's included), indentation kept."""
    return line[_body_regex().match(line).end() :]  # type: ignore[union-attr]  # `*` always matches


@cache
def _after_newline(kind: str) -> re.Pattern[str]:
    wrapper = next(w for w in wrappers() if w.kind == kind)
    return re.compile("\n" + wrapper.regex.pattern)


@cache
def _at_line_ends(kind: str) -> re.Pattern[str]:
    suffix = next(w for w in suffixes() if w.kind == kind)
    return re.compile(suffix.regex.pattern, re.MULTILINE)


def peel(line: str) -> list[tuple[Wrapper, str]]:
    """The collector wrappers at the start of one line, outermost first (the first kind matching wins)."""
    found: list[tuple[Wrapper, str]] = []
    pos = 0
    while True:
        for wrapper in wrappers():
            hit = wrapper.regex.match(line, pos)
            if hit is not None and hit.end() > pos:
                found.append((wrapper, hit.group()))
                pos = hit.end()
                break
        else:
            return found


class Unwrapper:
    """Takes one log's collector wrappers off, line by line (`line`) or a buffer at a time (`text`)."""

    def __init__(self) -> None:
        self._order: list[Wrapper] = []  # adopted kinds, in stripping order (outermost first)
        self._depth: dict[str, int] = {}  # the shallowest level each kind was seen at
        self._sightings: dict[str, int] = {}  # lines of the sample each kind started
        self._stripped: dict[str, int] = {}
        self._example: dict[str, str] = {}
        self._pending_sparse = [w for w in wrappers() if w.sparse]
        self._pending_suffixes = list(suffixes())  # looked for in the head, by hint, like sparse kinds
        self._suffixes: list[Wrapper] = []  # adopted suffixes
        self._sparse_misses = 0
        self._stripping = False  # something was adopted
        self._settled = False  # past the sample and the head: nothing more can be adopted
        self._ansi_only = False
        self._lines = 0  # pieces read
        self._sampled = 0  # non-empty pieces among the first _SAMPLE_LINES
        self._chars = 0  # characters read before the next piece (its line end counted)
        self._ansi = self._crlf = False
        self._ansi_count = self._crlf_count = 0
        self._ansi_example = ""

    @property
    def seen(self) -> tuple[WrapperSeen, ...]:
        """What was taken off so far: ANSI codes, CRLF, then each kind in stripping order."""
        found: list[WrapperSeen] = []
        if self._ansi_count:
            found.append(
                WrapperSeen(
                    "ansi", "ANSI colour codes (a terminal's copy)", self._ansi_count, self._ansi_example
                )
            )
        if self._crlf_count:
            found.append(WrapperSeen("crlf", "CRLF line ends (a Windows copy)", self._crlf_count, "\\r\\n"))
        for wrapper in (*self._order, *self._suffixes):
            if self._stripped.get(wrapper.kind):
                found.append(
                    WrapperSeen(
                        wrapper.kind, wrapper.title, self._stripped[wrapper.kind], self._example[wrapper.kind]
                    )
                )
        return tuple(found)

    def line(self, line: str) -> str:
        """One piece of the log (no `\\n`) without its wrappers."""
        if self._settled:  # past the sample and the head: only what was adopted is taken off
            if self._ansi_only:  # a colour terminal's log, the usual case among wrapped ones
                return self._strip(line) if "\x1b" in line else line
            return self._strip(line) if self._stripping else line
        head = self._chars < _HEAD_CHARS
        self._chars += len(line) + 1
        self._lines += 1
        if "\x1b" in line and not self._ansi and head:
            first = _ANSI.search(line)
            if first is not None:
                self._ansi, self._ansi_example = True, first.group()
        if line.endswith("\r") and head:
            self._crlf = True
        if self._lines <= _SAMPLE_LINES:
            bare = self._strip_codes(line)  # the sample is read as it will be stripped
            if bare:
                self._learn(bare, peel(bare))
        elif head and self._pending_sparse:
            bare = self._strip_codes(line)
            for wrapper in [w for w in self._pending_sparse if w.hint in bare]:
                found = [matched for w, matched in peel(bare) if w is wrapper]
                if found:
                    self._adopt(wrapper, found[0], max(self._depth.values(), default=-1) + 1)
                else:
                    self._sparse_misses += 1
            if self._sparse_misses >= _SPARSE_TRIES:  # `pid=` in the server's own words, not Ray's
                self._pending_sparse = []
        if head and self._pending_suffixes:
            for suffix in [w for w in self._pending_suffixes if w.hint in line]:
                found = suffix.regex.search(self._strip_codes(line))
                if found is not None:
                    self._example[suffix.kind] = found.group()
                    self._suffixes.append(suffix)
                    self._pending_suffixes.remove(suffix)
        self._stripping = bool(self._ansi or self._crlf or self._order or self._suffixes)
        self._settled = self._lines >= _SAMPLE_LINES and self._chars >= _HEAD_CHARS
        self._ansi_only = self._ansi and not (self._crlf or self._order or self._suffixes)
        return self._strip(line) if self._stripping else line

    def _strip_codes(self, line: str) -> str:
        """ANSI codes and a CRLF's CR, once adopted; counted when the line is stripped for good."""
        if self._ansi and "\x1b" in line:
            line = _ANSI.sub("", line)
        if self._crlf and line.endswith("\r"):
            line = line[:-1]
        return line

    def _strip(self, line: str) -> str:
        """What this log was found to carry, taken off one line (and counted)."""
        if self._ansi and "\x1b" in line:
            line, n = _ANSI.subn("", line)
            self._ansi_count += n
        if self._crlf and line.endswith("\r"):
            self._crlf_count += 1
            line = line[:-1]
        pos = 0
        for wrapper in self._order:
            hit = wrapper.regex.match(line, pos)
            if hit is not None:
                pos = hit.end()
                self._stripped[wrapper.kind] = self._stripped.get(wrapper.kind, 0) + 1
        line = line[pos:] if pos else line
        for suffix in self._suffixes:
            hit = suffix.regex.search(line)
            if hit is not None:
                line = line[: hit.start()]
                self._stripped[suffix.kind] = self._stripped.get(suffix.kind, 0) + 1
        return line

    def _learn(self, line: str, peeled: list[tuple[Wrapper, str]]) -> None:
        self._sampled += 1
        enough = max(1, int(self._sampled * _SAMPLE_SHARE))
        for level, (wrapper, matched) in enumerate(peeled):
            kind = wrapper.kind
            self._sightings[kind] = self._sightings.get(kind, 0) + 1
            self._depth[kind] = min(self._depth.get(kind, level), level)
            self._example.setdefault(kind, matched)
        for wrapper in wrappers():
            n = self._sightings.get(wrapper.kind, 0)
            if n and (wrapper.sparse or n >= enough) and wrapper not in self._order:
                self._adopt(wrapper, self._example[wrapper.kind], self._depth[wrapper.kind])

    def _adopt(self, wrapper: Wrapper, example: str, depth: int) -> None:
        self._depth[wrapper.kind] = depth
        self._example[wrapper.kind] = example
        after = [w for w in self._order if self._depth[w.kind] <= depth]
        self._order.insert(len(after), wrapper)
        if wrapper in self._pending_sparse:
            self._pending_sparse.remove(wrapper)

    def text(self, text: str) -> str:
        """A buffer of pieces: the same as `line()` on each piece of `text.split("\\n")`."""
        size = len(text)
        out: list[str] = []
        changed = False
        pos = 0
        found: dict[str, int] = {}  # each candidate's next position in this buffer (-1: none in the head)
        before = self._tally()
        while pos <= size:
            event = self._next_event(text, pos, found)
            if event is None:  # nothing left that could change what is stripped
                if pos > 0:
                    whole = self._whole(text, pos, "".join(out), before)
                    if whole is not None:
                        return whole
                rest = text[pos:] if pos else text
                stripped = self._bulk(rest, last=True)
                out.append(stripped)
                changed = changed or stripped is not rest
                break
            if event > pos:
                chunk = text[pos:event]
                stripped = self._bulk(chunk, last=False)
                out.append(stripped)
                changed = changed or stripped is not chunk
            end = text.find("\n", event)
            end = size if end < 0 else end
            piece = text[event:end]
            stripped = self.line(piece)
            out.append(stripped if end == size else stripped + "\n")
            changed = changed or stripped is not piece
            pos = end + 1
        return "".join(out) if changed else text

    def _whole(self, text: str, pos: int, done: str, before: tuple) -> str | None:
        """`text` stripped in one pass when its lines up to `pos` (its head, read line by line and
        in chunks as the state changed) came out as that pass makes them: the usual case, a wrapper
        adopted on the line where it first stands. Else None. Saves copying a large log twice (a
        slice and a join); the counts stay those of the lines one by one."""
        head, *head_counts = self._in_bulk(text[:pos])
        if head != done or head_counts != self._gained(before):
            return None
        whole, ansi, crlf, kinds = self._in_bulk(text)
        self._chars += len(text) - pos + 1
        self._ansi_count += ansi - head_counts[0]
        self._crlf_count += crlf - head_counts[1]
        for kind, n in kinds.items():
            self._stripped[kind] = self._stripped.get(kind, 0) + n - head_counts[2].get(kind, 0)
        return whole

    def _tally(self) -> tuple[int, int, dict[str, int]]:
        return self._ansi_count, self._crlf_count, dict(self._stripped)

    def _gained(self, before: tuple[int, int, dict[str, int]]) -> list:
        ansi, crlf, kinds = before
        return [
            self._ansi_count - ansi,
            self._crlf_count - crlf,
            {k: n - kinds.get(k, 0) for k, n in self._stripped.items() if n != kinds.get(k, 0)},
        ]

    def _next_event(self, text: str, pos: int, found: dict[str, int]) -> int | None:
        """The start of the next line that `line()` must read itself (it may adopt something), or
        None. `found` keeps each literal's next position across calls on one buffer, so a log with
        many near misses (`pid=` in SGLang's own words) is still scanned once."""
        if self._lines < _SAMPLE_LINES:
            return pos
        room = _HEAD_CHARS - self._chars  # lines starting before pos + room are in the head
        if room <= 0:
            return None
        limit = pos + room  # the same for every call on one buffer: _chars grows as pos does
        head_end = text.find("\n", limit)
        head_end = len(text) if head_end < 0 else head_end
        wanted: list[str] = []
        if not self._ansi:
            wanted.append("\x1b")
        if not self._crlf:
            wanted.append("\r\n")
        wanted.extend(w.hint for w in self._pending_sparse)
        wanted.extend(w.hint for w in self._pending_suffixes)
        at = -1
        for literal in wanted:
            hit = found.get(literal)
            if hit is None or 0 <= hit < pos:
                hit = found[literal] = text.find(literal, pos, head_end)
            if hit >= 0 and (at < 0 or hit < at):
                at = hit
        if (
            not self._crlf
            and text.endswith("\r")
            and head_end == len(text)
            and (at < 0 or len(text) - 1 < at)
        ):
            at = len(text) - 1  # the last piece ends with a CR of its own
        if at < 0:
            return None
        start = text.rfind("\n", pos, at) + 1 or pos
        return start if start < limit else None

    def _bulk(self, chunk: str, *, last: bool) -> str:
        """Whole lines (ending in `\\n` unless `last`) that cannot change this reader's state."""
        if not chunk and not last:
            return chunk
        self._chars += len(chunk) + (1 if last else 0)  # past the sample: _lines no longer matters
        text, ansi, crlf, kinds = self._in_bulk(chunk)
        self._ansi_count += ansi
        self._crlf_count += crlf
        for kind, n in kinds.items():
            self._stripped[kind] = self._stripped.get(kind, 0) + n
        return text

    def _in_bulk(self, chunk: str) -> tuple[str, int, int, dict[str, int]]:
        """Whole lines stripped of what was adopted, and what was taken off (nothing is counted)."""
        text, ansi, crlf, kinds = chunk, 0, 0, {}
        if self._ansi:
            text, ansi = _ANSI.subn("", text)
        if self._crlf:
            text, crlf = _CR_AT_LINE_END.subn("", text)
        if self._order:
            text = "\n" + text  # every line, the first included, now starts after a newline
            for wrapper in self._order:
                text, n = _after_newline(wrapper.kind).subn("\n", text)
                if n:
                    kinds[wrapper.kind] = n
            text = text[1:]
        for suffix in self._suffixes:
            text, n = _at_line_ends(suffix.kind).subn("", text)
            if n:
                kinds[suffix.kind] = n
        return (chunk if text is not chunk and text == chunk else text), ansi, crlf, kinds


def unwrap(text: str) -> Unwrapped:
    """`text` with its collector wrappers, ANSI codes and CR of CRLF removed; line count unchanged."""
    reader = Unwrapper()
    return Unwrapped(reader.text(text), reader.seen)
