"""Two images compared file by file: `kit image diff A B --files`.

    entries_of_tar(stream) -> {path: Entry}     every member of a filesystem tar, each file hashed
    compare_files(a, b, may_differ) -> FilesDiff  what differs, the documented exceptions apart
    image_entries(ref)                          the adapter: `docker create` + `docker export`, streamed

An entry is what decides whether two builds made the same file: its type, mode, owner, size and
sha256 (a link's target). Times are not compared: the engine's classic builder stamps every file a
RUN step writes with the time of that build (docs/images.md says what is normalized and what is
not). The paths that may differ are data (may_differ.toml), each with its reason; they are counted
apart, never silently dropped.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import io
import tarfile
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

MAY_DIFFER_FILE = Path(__file__).with_name("may_differ.toml")
_CHUNK = 1 << 20

_KINDS = {
    tarfile.REGTYPE: "file",
    tarfile.AREGTYPE: "file",
    tarfile.DIRTYPE: "dir",
    tarfile.SYMTYPE: "symlink",
    tarfile.LNKTYPE: "hardlink",
    tarfile.CHRTYPE: "char",
    tarfile.BLKTYPE: "block",
    tarfile.FIFOTYPE: "fifo",
}


@dataclass(frozen=True)
class Entry:
    path: str
    """Absolute, as the image has it: /usr/bin/python3.11."""
    kind: str
    """file, dir, symlink, hardlink, char, block, fifo."""
    mode: str
    """Permission bits in octal, setuid/setgid/sticky included: 0755."""
    owner: str
    """uid:gid."""
    size: int
    content: str
    """sha256:<hex> of a file's bytes, '-> target' for a link, '' for the rest."""


@dataclass(frozen=True)
class MayDiffer:
    pattern: str
    reason: str


@dataclass(frozen=True)
class Difference:
    path: str
    what: tuple[str, ...]
    """'only in A', 'content', 'size 10 -> 12', 'mode 0644 -> 0755', 'owner 0:0 -> 1:1', 'kind ...'."""
    reason: str = ""
    """Why it may differ (from may_differ.toml), or '' for a difference that counts."""


@dataclass(frozen=True)
class FilesDiff:
    a: str
    b: str
    paths_a: int
    paths_b: int
    paths: int
    """Paths in A or B."""
    differing: int
    """Paths that differ outside the documented list."""
    documented: int
    """Paths that differ inside it."""
    differences: list[Difference] = field(default_factory=list)
    """Every difference, the counting ones first, each sorted by path."""

    @property
    def same(self) -> bool:
        return self.differing == 0


def _absolute(name: str) -> str:
    """'./etc/hosts', 'etc/hosts/' and '/etc/hosts' -> '/etc/hosts' (never lstrip('./'): '.dockerenv')."""
    name = name.removeprefix("./").strip("/")
    return "/" + ("" if name == "." else name)


def _entry(member: tarfile.TarInfo, content: str) -> Entry:
    return Entry(
        path=_absolute(member.name),
        kind=_KINDS.get(member.type, f"type {member.type!r}"),
        mode=f"{member.mode & 0o7777:04o}",
        owner=f"{member.uid}:{member.gid}",
        size=member.size if member.isfile() else 0,
        content=content,
    )


def entries_of_tar(stream: IO[bytes]) -> dict[str, Entry]:
    """Every member of an uncompressed tar stream, read once front to back (`docker export` is
    gigabytes), each regular file hashed as it passes."""
    entries: dict[str, Entry] = {}
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            content = ""
            if member.isfile():
                digest = hashlib.sha256()
                handle = tar.extractfile(member)
                assert handle is not None  # a regular file always has a body
                while chunk := handle.read(_CHUNK):
                    digest.update(chunk)
                content = "sha256:" + digest.hexdigest()
            elif member.issym() or member.islnk():
                content = "-> " + (member.linkname if member.issym() else _absolute(member.linkname))
            entry = _entry(member, content)
            entries[entry.path] = entry
    return entries


@functools.cache
def may_differ() -> tuple[MayDiffer, ...]:
    data = tomllib.loads(MAY_DIFFER_FILE.read_text(encoding="utf-8"))
    return tuple(MayDiffer(p["pattern"], p["reason"]) for p in data["path"])


def _what(a: Entry | None, b: Entry | None) -> tuple[str, ...]:
    if a is None:
        return ("only in B",)
    if b is None:
        return ("only in A",)
    what = []
    if a.kind != b.kind:
        what.append(f"kind {a.kind} -> {b.kind}")
    if a.mode != b.mode:
        what.append(f"mode {a.mode} -> {b.mode}")
    if a.owner != b.owner:
        what.append(f"owner {a.owner} -> {b.owner}")
    if a.size != b.size:
        what.append(f"size {a.size} -> {b.size}")
    if a.content != b.content:
        what.append("target" if a.content.startswith("->") else "content")
    return tuple(what)


def _reason(path: str, allowed: Iterable[MayDiffer]) -> str:
    return next((m.reason for m in allowed if fnmatch.fnmatchcase(path, m.pattern)), "")


def compare_files(
    a: Mapping[str, Entry],
    b: Mapping[str, Entry],
    allowed: Iterable[MayDiffer] = (),
    *,
    a_name: str = "A",
    b_name: str = "B",
) -> FilesDiff:
    """Every path whose entry differs from A to B; those matching `allowed` are counted apart."""
    allowed = tuple(allowed)
    counting, documented = [], []
    for path in sorted(a.keys() | b.keys()):
        what = _what(a.get(path), b.get(path))
        if not what:
            continue
        reason = _reason(path, allowed)
        (documented if reason else counting).append(Difference(path, what, reason))
    return FilesDiff(
        a=a_name,
        b=b_name,
        paths_a=len(a),
        paths_b=len(b),
        paths=len(a.keys() | b.keys()),
        differing=len(counting),
        documented=len(documented),
        differences=counting + documented,
    )


# -- the adapter -------------------------------------------------------------------------------------


class _Chunks(io.RawIOBase):
    """A binary stream over an iterator of byte chunks (the engine's export), for tarfile's 'r|'."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks, self._left = chunks, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        while not self._left:
            try:
                self._left = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._left))
        buffer[:n], self._left = self._left[:n], self._left[n:]
        return n


def image_entries(ref: str, *, label_image: str = "") -> dict[str, Entry]:
    """The image's filesystem as `docker export` of a created (never started) container gives it,
    streamed and hashed; the container is removed afterwards."""
    from kit.images.inspect import created_container
    from kit.runtime.engine import translated

    with translated(f"exporting the files of {ref}"), created_container(ref, label_image=label_image) as box:
        stream = io.BufferedReader(_Chunks(iter(box.export(chunk_size=_CHUNK))), _CHUNK)
        return entries_of_tar(stream)


def diff_image_files(ref_a: str, ref_b: str, *, a_name: str = "A", b_name: str = "B") -> FilesDiff:
    """`kit image diff A B --files`: both filesystems exported and compared (the documented paths apart)."""
    return compare_files(
        image_entries(ref_a), image_entries(ref_b), may_differ(), a_name=a_name, b_name=b_name
    )
