"""Files the kit writes and the untrusted text it reads, each one way.

Writing: a temporary file beside the target, renamed over it when complete, so a failure leaves
nothing half-written; something at the target that is not a regular file (a device, a FIFO, a
folder, a socket) is refused, never replaced; folders are created only where the caller says so.

Reading a log: a size bound, streamed (the head and the tail of a bigger file, the middle counted
and skipped), refused when it is not text (empty, NUL bytes), UTF-16 decoded when it starts with
its byte order mark.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import stat
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from kit.errors import InputError

# What a log reader keeps: the first HEAD bytes (launch, arguments, every rank's first lines) and
# the last TAIL bytes (how the last attempt ended). Resident memory stays ~0.25 GB whatever the size
# (measured: 1 GB of the corpus logs repeated, kit analyze --json).
LOG_HEAD_BYTES = 8 << 20
LOG_TAIL_BYTES = 24 << 20
_CHUNK = 1 << 20
# The end of the one line that stands for a skipped middle: what follows it is the tail.
SKIPPED_MARK = "of the middle skipped: read the head and tail]\n"
_SNIFF = 64 << 10


def output_problem(path: Path) -> str | None:
    """Why PATH cannot be written as a file (None when it can be tried)."""
    if not str(path).strip():
        return "an empty file name"
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if mode is not None and not stat.S_ISREG(mode):
        return f"{path} is {_kind(mode)}, not a regular file; name a new file"
    parent = path.parent
    if not parent.is_dir():
        return f"the folder {parent} does not exist (create it first)"
    return None


def _kind(mode: int) -> str:
    for test, word in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return word
    return "not a regular file"


def write_atomic(path: Path, data: bytes, *, field: str = "-o", parents: bool = False) -> Path:
    """Write DATA to PATH through a temporary file beside it; refuse a PATH that is there and is
    not a regular file; create missing folders only with parents=True (the kit's own cache)."""
    path = Path(path)
    if parents:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
    problem = output_problem(path)
    if problem:
        raise InputError(field, problem, "name a file in a folder that exists, e.g. -o ./bundle.tar.gz")
    temporary = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        with open(temporary, "xb") as handle:  # x: never through a link or over something there
            handle.write(data)
        problem = output_problem(path)  # something appeared meanwhile: leave it alone
        if problem:
            raise InputError(field, problem, "name a new file")
        os.replace(temporary, path)
    except OSError as exc:
        raise InputError(
            field, f"cannot write {path}: {exc.strerror or exc}", "name a writable file"
        ) from exc
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink()
    return path


def read_bounded(path: str | Path, max_bytes: int, *, field: str, fix: str, name: str | None = None) -> bytes:
    """A whole file of at most MAX_BYTES: a regular file (a device never ends, a FIFO may block
    forever), read with the bound applied while reading (a file that grows meanwhile is cut off)."""
    name = name or str(path)
    try:
        mode = os.stat(path).st_mode  # before open(): opening a FIFO blocks until a writer comes
        if not stat.S_ISREG(mode):
            raise InputError(field, f"{name} is {_kind(mode)}, not a file", fix)
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(field, f"cannot read {name} ({exc.strerror or exc})", fix) from exc
    if len(data) > max_bytes:
        raise InputError(field, f"{name} has more than {max_bytes} bytes", fix)
    return data


@dataclass(frozen=True)
class LogText:
    """A log's text as read: whole, or its head and tail with the middle skipped (counted)."""

    text: str
    size: int  # bytes read in all
    skipped_bytes: int = 0
    skipped_lines: int = 0
    encoding: str = "utf-8"


_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def _refuse_binary(chunk: bytes, offset: int, field: str, name: str) -> None:
    nul = chunk.find(b"\0")
    if nul >= 0:
        raise InputError(
            field,
            f"{name} is not text (a NUL byte at offset {offset + nul}: a binary file?)",
            "give the server's log as text (UTF-8, or UTF-16 with its byte order mark)",
        )


SkippedLines = Callable[[str], None]


def read_log(
    source: str | Path | BinaryIO,
    *,
    field: str = "LOGFILE",
    name: str | None = None,
    on_skipped: SkippedLines | None = None,
) -> LogText:
    """Read a log with a bounded memory: all of it up to LOG_HEAD_BYTES + LOG_TAIL_BYTES, else its
    head and tail, streamed (a pipe or /dev/zero never fills memory). Not text is an InputError.
    `on_skipped` is handed the skipped middle as it streams past, whole lines at a time (what the
    reader counts there, such as launch lines, without keeping it)."""
    if isinstance(source, (str, Path)):
        name = name or str(source)
        try:
            mode = os.stat(source).st_mode
        except OSError as exc:
            raise InputError(field, f"cannot read {name}: {exc.strerror or exc}", "give a log file") from exc
        if stat.S_ISDIR(mode):
            raise InputError(field, f"{name} is a folder", "give a log file in it")
        try:
            with open(source, "rb") as stream:
                return _read_stream(stream, field, name, on_skipped)
        except OSError as exc:
            raise InputError(field, f"cannot read {name}: {exc.strerror or exc}", "give a log file") from exc
    return _read_stream(source, field, name or "stdin", on_skipped)


class _Lines:
    """Bytes in, whole lines of text out to `sink` (a line cut between two chunks waits for its end)."""

    def __init__(self, sink: SkippedLines | None, encoding: str):
        self.sink, self.encoding, self.partial = sink, encoding, b""

    def feed(self, data: bytes, *, last: bool = False) -> None:
        if self.sink is None or self.encoding != "utf-8":  # UTF-16 lines are not cut on b"\n"
            return
        data = self.partial + data
        end = len(data) if last else data.rfind(b"\n") + 1
        self.partial = data[end:]
        if end:
            self.sink(data[:end].decode("utf-8", errors="replace"))


def _read_stream(stream: BinaryIO, field: str, name: str, on_skipped: SkippedLines | None = None) -> LogText:
    head = bytearray()
    utf16 = False
    while len(head) < LOG_HEAD_BYTES:
        chunk = stream.read(min(_CHUNK, LOG_HEAD_BYTES - len(head)))
        if not chunk:
            break
        if not head:
            utf16 = chunk.startswith(_BOMS)
        if not utf16:
            _refuse_binary(chunk, len(head), field, name)
        head += chunk
    if not head:
        raise InputError(field, f"{name} is empty: nothing to analyse", "give the server's log")
    if not head.strip():  # CRLF or blank lines only: not empty, but no line of text either
        breaks = head.count(b"\n")
        raise InputError(
            field,
            f"{name} holds no text, only whitespace ({len(head)} bytes, {breaks} line breaks): "
            "nothing to analyse",
            "give the server's log",
        )
    tail: deque[bytes] = deque()
    kept = skipped = skipped_lines = 0
    middle = _Lines(on_skipped, "utf-16" if utf16 else "utf-8")
    while True:
        chunk = stream.read(_CHUNK)
        if not chunk:
            break
        if not utf16:
            _refuse_binary(chunk, len(head) + kept + skipped, field, name)
        tail.append(chunk)
        kept += len(chunk)
        while kept - len(tail[0]) >= LOG_TAIL_BYTES:
            dropped = tail.popleft()
            kept -= len(dropped)
            skipped += len(dropped)
            skipped_lines += dropped.count(b"\n")
            middle.feed(dropped)
    rest = b"".join(tail)
    tail.clear()
    encoding = "utf-16" if utf16 else "utf-8"
    if not skipped:
        data = bytes(head) + rest
        return LogText(data.decode(encoding, errors="replace"), len(data), encoding=encoding)
    cut = rest.find(b"\n") + 1  # the tail starts at a line's beginning
    if utf16:
        cut += cut % 2
    skipped += cut
    skipped_lines += rest[:cut].count(b"\n")
    middle.feed(rest[:cut], last=True)
    rest = rest[cut:]
    body = (
        rest.decode("utf-16-le" if head.startswith(codecs.BOM_UTF16_LE) else "utf-16-be", errors="replace")
        if utf16
        else rest.decode("utf-8", errors="replace")
    )
    marker = f"\n[kit: {skipped} bytes ({skipped_lines} lines) {SKIPPED_MARK}"
    text = bytes(head).decode(encoding, errors="replace") + marker + body
    return LogText(text, len(head) + len(rest) + skipped, skipped, skipped_lines, encoding)
