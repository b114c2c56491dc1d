"""Checks of a model folder that need nothing but its files: which shards the index names, whether
each is there, as large as it should be, and whether its safetensors header reads.

Standard library only: the same file runs on the host and, copied into an image, with the image's
own Python (`python files.py FOLDER [SIZES_JSON]` prints the rows as JSON), which is how the CPU
rehearsal's model, generated inside its image, is verified.

A safetensors file is an 8-byte little-endian header length, a JSON header giving every tensor's
byte range, then the data: so a shard's full size is known from its first bytes, and a truncated
shard is found even when no hub listing is at hand.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from dataclasses import asdict, dataclass

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
CONFIG = "config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
# One of these holds the vocabulary (fast tokenizer, sentencepiece, BPE vocab, tiktoken).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")
MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit

OK, MISSING, TRUNCATED, TOO_LARGE, CORRUPT = "ok", "missing", "truncated", "too large", "corrupt header"


@dataclass(frozen=True)
class FileCheck:
    name: str
    kind: str
    """config, tokenizer, index, shard or file (another file the hub listing names)."""
    status: str
    size: int | None = None
    expected: int | None = None
    """Bytes it should have: the hub's listing, else what its safetensors header says."""
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == OK


class HeaderError(ValueError):
    pass


def read_header(path: str) -> tuple[int, dict]:
    """(header length, header) of a safetensors file; HeaderError says what is wrong."""
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise HeaderError(f"{len(head)} bytes, not even a header length")
        (length,) = struct.unpack("<Q", head)
        if length == 0 or length > MAX_HEADER_BYTES:
            raise HeaderError(f"header length {length} is not plausible")
        raw = handle.read(length)
    if len(raw) < length:
        raise HeaderError(f"header cut short ({len(raw)} of {length} bytes)")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HeaderError(f"header is not JSON ({exc.__class__.__name__})") from exc
    if not isinstance(header, dict):
        raise HeaderError("header is not a JSON object")
    return length, header


def size_from_header(length: int, header: dict) -> int:
    """The file size a safetensors header implies: header, then the end of the last tensor."""
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            raise HeaderError(f"tensor {name!r} has no valid data_offsets")
        if offsets[0] > offsets[1]:
            raise HeaderError(f"tensor {name!r} ends before it starts")
        end = max(end, offsets[1])
    return 8 + length + end


def shard_names(folder: str) -> list[str]:
    """Every shard the index names (sorted), or the single model.safetensors; [] if neither is there."""
    index = os.path.join(folder, INDEX)
    if os.path.exists(index):
        with open(index, encoding="utf-8") as handle:
            weight_map = json.load(handle).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise HeaderError(f"{INDEX} has no weight_map")
        return sorted(set(weight_map.values()))
    return [SINGLE] if os.path.exists(os.path.join(folder, SINGLE)) else []


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size  # follows the snapshot's symlink to the blob
    except OSError:
        return None


def check_shard(path: str, name: str, expected: int | None, *, deep: bool) -> FileCheck:
    size = _size(path)
    if size is None:
        return FileCheck(name, "shard", MISSING, None, expected)
    if expected is not None and size != expected:
        status = TRUNCATED if size < expected else TOO_LARGE
        return FileCheck(name, "shard", status, size, expected, f"{size} of {expected} bytes")
    if not deep:
        return FileCheck(name, "shard", OK, size, expected)
    try:
        implied = size_from_header(*read_header(path))
    except (OSError, HeaderError) as exc:
        return FileCheck(name, "shard", CORRUPT, size, expected, str(exc))
    if implied != size:
        status = TRUNCATED if size < implied else TOO_LARGE
        return FileCheck(
            name, "shard", status, size, implied, f"header implies {implied} bytes, file has {size}"
        )
    return FileCheck(name, "shard", OK, size, expected or implied)


def _plain(folder: str, name: str, kind: str, expected: int | None) -> FileCheck:
    size = _size(os.path.join(folder, name))
    if size is None:
        return FileCheck(name, kind, MISSING, None, expected)
    if expected is not None and size != expected:
        return FileCheck(
            name,
            kind,
            TRUNCATED if size < expected else TOO_LARGE,
            size,
            expected,
            f"{size} of {expected} bytes",
        )
    return FileCheck(name, kind, OK, size, expected)


def check_folder(folder: str, sizes: dict[str, int] | None = None, *, deep: bool = True) -> list[FileCheck]:
    """Rows for config, tokenizer, index and every shard (and every other file `sizes` lists).

    sizes: the hub's listing (name -> bytes) when known; deep=False skips reading headers (stat only).
    """
    sizes = sizes or {}
    rows = [_plain(folder, CONFIG, "config", sizes.get(CONFIG))]
    rows.append(_plain(folder, TOKENIZER_CONFIG, "tokenizer", sizes.get(TOKENIZER_CONFIG)))
    vocab = [n for n in TOKENIZER_FILES if n in sizes or os.path.exists(os.path.join(folder, n))]
    for name in vocab or [TOKENIZER_FILES[0]]:
        rows.append(_plain(folder, name, "tokenizer", sizes.get(name)))
    try:
        shards = shard_names(folder)
    except (OSError, ValueError) as exc:
        rows.append(FileCheck(INDEX, "index", CORRUPT, _size(os.path.join(folder, INDEX)), None, str(exc)))
        shards = []
    else:
        if os.path.exists(os.path.join(folder, INDEX)) or INDEX in sizes:
            rows.append(_plain(folder, INDEX, "index", sizes.get(INDEX)))
        elif not shards:
            listed = sorted(n for n in sizes if n.endswith(".safetensors"))
            rows.append(FileCheck(INDEX, "index", MISSING, detail="no index and no model.safetensors"))
            shards = listed
    for name in sorted(set(shards) | {n for n in sizes if n.endswith(".safetensors")}):
        rows.append(check_shard(os.path.join(folder, name), name, sizes.get(name), deep=deep))
    seen = {row.name for row in rows}
    for name in sorted(set(sizes) - seen):
        rows.append(_plain(folder, name, "file", sizes[name]))
    return rows


def main(argv: list[str]) -> int:
    folder = argv[0]
    sizes = json.loads(argv[1]) if len(argv) > 1 else None
    rows = check_folder(folder, sizes)
    print(json.dumps([asdict(row) for row in rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
