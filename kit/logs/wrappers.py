"""Pasted logs: strip what a log collector put around each SGLang line, and say what it was.

People paste from `docker compose logs` (`sglang-1  | `), `kubectl logs --prefix`, journalctl's
output modes, `docker logs -t`, Ray's driver (`(pid=123) `) and colour terminals. The parser
reads SGLang's own lines; `unwrap(text)` hands it those lines and reports the wrappers it took
off (kind, how many lines, an example) so `kit analyze` can say what it saw. The wrappers are
data (wrappers.toml); ANSI colour codes and CRLF line ends are handled here.

Cheap when there is nothing to strip (the common case, and the benchmark's): what a log carries
is decided from its head (the first lines; the first 2M characters for ANSI, CRLF and Ray's
sparse prefixes), a cost that does not grow with the log. When a wrapper is found, each kind is
one C-level `re.subn` over the text (anchored after a newline: the engine scans for that literal).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]")  # CSI sequences (colours), charset
_SAMPLE_LINES = 400  # a collector wraps every line: the first lines tell
_SAMPLE_SHARE = 0.2  # a kind on fewer sampled lines than this is text that looks like one
_SPARSE_TRIES = 1000  # hints checked for a sparse wrapper before giving up
# Detection reads the head of the log only: str.find on a non-ASCII str (tqdm's bars make most
# logs so) is no memchr, and a whole 100 MB log would cost more than its parse's few per cent.
_HEAD_CHARS = 1 << 21


@dataclass(frozen=True, slots=True)
class Wrapper:
    kind: str
    title: str
    regex: re.Pattern[str]
    example: str
    source: str
    sparse: bool = False
    hint: str = ""  # a sparse wrapper's literal, looked for in the whole log


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


@cache
def wrappers() -> tuple[Wrapper, ...]:
    raw = tomllib.loads(resources.files("kit.logs").joinpath("wrappers.toml").read_text(encoding="utf-8"))
    return tuple(
        Wrapper(
            kind=entry["kind"],
            title=entry["title"],
            regex=re.compile(entry["regex"]),
            example=entry["example"],
            source=entry["source"],
            sparse=bool(entry.get("sparse", False)),
            hint=entry.get("hint", ""),
        )
        for entry in raw["wrapper"]
    )


@cache
def _after_newline(kind: str) -> re.Pattern[str]:
    wrapper = next(w for w in wrappers() if w.kind == kind)
    return re.compile("\n" + wrapper.regex.pattern)


def peel(line: str) -> list[tuple[Wrapper, str]]:
    """The wrappers at the start of one line, outermost first (the first kind matching wins)."""
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


def _sample(text: str) -> list[str]:
    lines: list[str] = []
    start = 0
    while len(lines) < _SAMPLE_LINES and start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        if end > start:
            lines.append(text[start:end])
        start = end + 1
    return lines


def _find_sparse(text: str, wrapper: Wrapper) -> str | None:
    """The first line that starts with a sparse wrapper: its literal `hint` found with str.find
    (a C scan far cheaper than a regex over the whole log), each find checked at its line start."""
    at = text.find(wrapper.hint, 0, _HEAD_CHARS)
    for _ in range(_SPARSE_TRIES):
        if at < 0:
            return None
        start = text.rfind("\n", 0, at) + 1
        for _wrapper, matched in peel(text[start : at + 200]):
            if _wrapper is wrapper:
                return matched
        at = text.find(wrapper.hint, at + 1, _HEAD_CHARS)
    return None


def _detect(text: str) -> list[tuple[Wrapper, str]]:
    """The kinds this log carries, in stripping order (outermost first), each with an example."""
    sample = _sample(text)
    counts: dict[str, int] = {}
    depth: dict[str, int] = {}
    example: dict[str, str] = {}
    by_kind = {w.kind: w for w in wrappers()}
    for line in sample:
        for level, (wrapper, matched) in enumerate(peel(line)):
            counts[wrapper.kind] = counts.get(wrapper.kind, 0) + 1
            depth[wrapper.kind] = min(depth.get(wrapper.kind, level), level)
            example.setdefault(wrapper.kind, matched)
    enough = max(1, int(len(sample) * _SAMPLE_SHARE))
    chosen = [kind for kind, n in counts.items() if n >= enough or by_kind[kind].sparse]
    for wrapper in wrappers():  # sparse kinds (Ray workers) may start long after the sample
        if wrapper.sparse and wrapper.kind not in chosen:
            matched = _find_sparse(text, wrapper)
            if matched is not None:
                chosen.append(wrapper.kind)
                depth[wrapper.kind] = max(depth.values(), default=-1) + 1
                example[wrapper.kind] = matched
    chosen.sort(key=lambda kind: depth[kind])
    return [(by_kind[kind], example[kind]) for kind in chosen]


def unwrap(text: str) -> Unwrapped:
    """`text` with collector wrappers, ANSI codes and CR of CRLF removed; line count unchanged."""
    seen: list[WrapperSeen] = []
    head = text[:_HEAD_CHARS]
    if "\x1b" in head:
        first = _ANSI.search(text)
        text, n = _ANSI.subn("", text)
        if n:
            seen.append(
                WrapperSeen(
                    "ansi", "ANSI colour codes (a terminal's copy)", n, first.group() if first else ""
                )
            )
    if "\r\n" in head:
        n = text.count("\r\n")
        text = text.replace("\r\n", "\n")
        seen.append(WrapperSeen("crlf", "CRLF line ends (a Windows copy)", n, "\\r\\n"))
    found = _detect(text)
    if not found:
        return Unwrapped(text, tuple(seen))
    text = "\n" + text  # every line, the first included, now starts after a newline
    for wrapper, example in found:
        text, n = _after_newline(wrapper.kind).subn("\n", text)
        if n:
            seen.append(WrapperSeen(wrapper.kind, wrapper.title, n, example))
    return Unwrapped(text[1:], tuple(seen))
