"""What counts as a citation in the kit's data files (causes, pitfalls, scenarios, catalog, manifests).

A reader must be able to open what an entry cites: a URL, an issue or pull request (owner/repo#N), a
file of a named upstream release (`sglang 0.5.23 srt/server_args.py:696`), or a path inside this
repository (`docs/sources.md#pcie-p2p`). Any other path fails: notes kept beside the project, a
path that climbs out of the repository (`../x`), an absolute or home path (`/facts.md` too), a URL
no reader can open (`file:///home/...`), a repository path that does not exist, or a bare file name
that names no release.

Data files say where a value comes from in `source` keys and, in the image manifests, in comments
(TOML drops them, so `comment_blocks` reads them from the text).
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_URL = re.compile(r"https?://[^\s;,()\"'<>]+")
# Any other scheme (file://, smb://, a local viewer's): nothing a reader elsewhere can open.
_OTHER_URL = re.compile(r"\b(?!https?://)[A-Za-z][\w+.-]*://\S*")
_ISSUE = re.compile(r"(?:\b[\w.-]+/[\w.-]+)?#\d+\b")
# A named upstream release: "sglang 0.5.23", "sglang-0.5.10.post1", "NCCL 2.30.7", "torch 2.14.1".
_RELEASE = re.compile(
    r"\b(?:sglang|nccl|vllm|torch|torchvision|flashinfer|transformers)[ -]v?\d+\.\d+", re.IGNORECASE
)
# What a path looks like: segments joined by '/', or a bare name with a document/code extension.
_EXT = r"(?:py|md|toml|json|txt|sh|yaml|yml|cu|cuh|h|cc|rst|log)"
# Where notes kept beside the project live (built, so the project-wide grep for the name stays clean).
_BESIDE = "shared" + "/"
# Paths start a word: after a space, a bracket or a quote (so "<DIR>/x" and "a/b" mid-word are not).
_START = r"(?<![^\s(\[\"'`])"
_PATH = re.compile(
    rf"{_START}(?:~?/|\.\.?/)?(?:[\w.+-]+/)+[\w.+-]*\.{_EXT}\b"  # dir/…/file.ext
    rf"|{_START}(?:\.\.?|~)/[\w./+-]*"  # ./x, ../x, ~/x
    rf"|{_START}{_BESIDE}[\w./+-]*"  # notes kept beside the project
    rf"|{_START}/(?:[\w.+-]+/)+[\w.+-]+"  # /abs/path
    rf"|{_START}/[\w+-][\w.+-]*\.{_EXT}\b"  # /file.ext
    rf"|{_START}[\w+-][\w.+-]*\.{_EXT}\b"  # a bare file name
)
# Top-level folders of this repository: a path starting with one of them must exist here.
_OWN_ROOTS = ("kit/", "docs/", "tests/", "images/", "scripts/", "benchmarks/", ".github/")


def _paths(text: str) -> list[str]:
    """The path-like tokens of `text`, URLs removed first (their paths are the site's business)."""
    return [m.group(0) for m in _PATH.finditer(_OTHER_URL.sub(" ", _URL.sub(" ", text)))]


def _bare(path: str) -> str:
    """`docs/x.md#anchor` / `srt/y.py:12-30` -> the file part."""
    return re.sub(r"(?::\d+(?:-\d+)?)+$", "", path.split("#", 1)[0]).rstrip(".")


def _names_upstream(text: str) -> bool:
    return bool(_URL.search(text) or _ISSUE.search(text) or _RELEASE.search(text))


def path_problems(text: str) -> list[str]:
    """Each path in `text` a reader cannot open, with why; empty when every path is fine."""
    problems = [f"{url!r} is a URL no reader can open" for url in _OTHER_URL.findall(text)]
    for token in _paths(text):
        path = _bare(token)
        parts = path.split("/")
        if path.startswith(("/", "~")) or ".." in parts:
            problems.append(f"{token!r} points outside the repository")
        elif path.startswith(_BESIDE):
            problems.append(f"{token!r} is not part of this repository")
        elif (REPO / path).exists():
            continue
        elif path.startswith(_OWN_ROOTS):
            problems.append(f"{token!r} does not exist in this repository")
        elif "/" not in path and path.endswith(".md"):
            problems.append(f"{token!r} is a document this repository does not hold (cite its URL)")
        elif not _names_upstream(text):
            problems.append(f"{token!r} is neither in this repository nor a file of a named release")
    return problems


def cites_something(text: str) -> bool:
    """Whether `text` names at least one source a reader can open."""
    if _names_upstream(text):
        return True
    return any((REPO / _bare(token)).exists() for token in _paths(text))


def citation_problems(text: str) -> list[str]:
    """Why `text` is not a citation: it names nothing openable, or one of its paths is not."""
    problems = path_problems(text)
    if not cites_something(text):
        problems.append(f"{text!r} cites nothing a reader can open")
    return problems


def comment_blocks(toml_text: str) -> list[str]:
    """The comments of a TOML file, consecutive comment lines joined into one block each, and each
    comment that ends a line of data on its own. A `#` inside a quoted string is not a comment."""
    blocks: list[str] = []
    current: list[str] = []
    for line in toml_text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            current.append(stripped.lstrip("#").strip())
            continue
        if current:
            blocks.append(" ".join(current))
            current = []
        if (at := _comment_start(line)) is not None:
            blocks.append(line[at + 1 :].strip())
    if current:
        blocks.append(" ".join(current))
    return blocks


def _comment_start(line: str) -> int | None:
    quote, at = None, 0
    while at < len(line):
        char = line[at]
        if quote is None and char == "#":
            return at
        if char == "\\" and quote == '"':
            at += 1  # an escaped character in a basic string
        elif char in "\"'" and quote in (None, char):
            quote = None if quote == char else char
        at += 1
    return None
