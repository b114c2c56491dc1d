"""The checkpoint's pages in the ranks' memory: what a load moves on a real host, whatever the storage.

SGLang 0.5.23 loads safetensors through `safetensors.safe_open` (srt/model_loader/weight_utils.py
`safetensors_weights_iterator`), which maps each shard file and copies tensors out of the mapping,
one shard after another (the `Loading safetensors checkpoint shards` bar counts them). So:

- a shard already in the page cache is read without one byte of block I/O (`read_bytes` stays 0 on
  a warm start), and one on NFS or a FUSE mount never shows as block I/O at all;
- the pages of the shard being loaded appear in the rank's `/proc/PID/smaps` as resident pages
  (`Rss`) of that file's mapping, whether they came from a disk, the network or the page cache.

`read_mapped(pids)` sums, over the mapped `*.safetensors` files, the largest resident figure any of
the processes has for the file (the ranks map the same files; each touches its own part) against
the files' mapped sizes, and names the storage they are on from the process's own mount table
(`/proc/PID/mountinfo`: ext4/xfs = a local disk, nfs/nfs4/cifs = the network, overlay = the
image's layers, fuse.* = a FUSE mount). `/proc/PID/smaps` needs ptrace read access (proc(5)): the
same user, or root / CAP_SYS_PTRACE for another's; None where it cannot be read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
SUFFIX = ".safetensors"
_MAPPING = re.compile(r"^([0-9a-f]+)-([0-9a-f]+)\s+\S+\s+\S+\s+\S+\s+\d+\s+(.*)$")
# Where each file system's bytes come from, in a person's words.
_STORAGE = {
    "ext4": "a local disk",
    "xfs": "a local disk",
    "btrfs": "a local disk",
    "zfs": "a local disk",
    "nfs": "the network (NFS)",
    "nfs4": "the network (NFS)",
    "cifs": "the network (SMB)",
    "smb3": "the network (SMB)",
    "overlay": "the container's overlay (the image's layers)",
    "tmpfs": "memory (tmpfs)",
    "9p": "a host share (9p)",
    "virtiofs": "a host share (virtiofs)",
}


@dataclass(frozen=True)
class MappedReading:
    """The checkpoint files mapped now: resident bytes of them (in memory), their sizes, storage."""

    resident_bytes: int
    mapped_bytes: int
    files: int
    storage: str | None = None
    """'nfs4: the network (NFS)', 'ext4: a local disk', ...; None where the mount was not found."""


def parse_smaps(text: str, suffix: str = SUFFIX) -> dict[str, tuple[int, int]]:
    """{path: (mapped bytes, resident bytes)} of the file mappings whose path ends with SUFFIX,
    summed over a file's mappings, from one /proc/PID/smaps."""
    files: dict[str, tuple[int, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        head = _MAPPING.match(line)
        if head is not None:
            path = head.group(3).strip().removesuffix(" (deleted)")
            current = path if path.endswith(suffix) else None
            if current is not None:
                size, rss = files.get(current, (0, 0))
                files[current] = (size + int(head.group(2), 16) - int(head.group(1), 16), rss)
        elif current is not None and line.startswith("Rss:"):
            size, rss = files[current]
            files[current] = (size, rss + int(line.split()[1]) * 1024)
    return files


def storage_of(path: str, mountinfo: str) -> str | None:
    """The file system PATH lives on, from a /proc/PID/mountinfo (the longest mount point that holds
    it): 'nfs4: the network (NFS)'; None where no line holds it."""
    best: tuple[int, str] | None = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        point = fields[4].replace("\\040", " ")
        fstype = line.split(" - ", 1)[1].split()[0]
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) > best[0]):
            best = (len(point), fstype)
    if best is None:
        return None
    fstype = best[1]
    where = _STORAGE.get(fstype) or ("a FUSE mount" if fstype.startswith("fuse") else None)
    return f"{fstype}: {where}" if where else fstype


def read_mapped(pids: Iterable[int], proc: Path = PROC) -> MappedReading | None:
    """The checkpoint pages the processes hold mapped now; None where no smaps could be read."""
    best: dict[str, tuple[int, int]] = {}
    readable = False
    owner: int | None = None
    for pid in pids:
        try:
            text = (proc / str(pid) / "smaps").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        readable = True
        for path, (size, rss) in parse_smaps(text).items():
            known = best.get(path, (0, 0))
            best[path] = (max(known[0], size), max(known[1], rss))
            owner = pid if owner is None else owner
    if not readable:
        return None
    storage = None
    if best and owner is not None:
        try:
            mountinfo = (proc / str(owner) / "mountinfo").read_text(encoding="utf-8", errors="replace")
            storage = storage_of(sorted(best)[0], mountinfo)
        except OSError:
            storage = None
    return MappedReading(
        resident_bytes=sum(rss for _, rss in best.values()),
        mapped_bytes=sum(size for size, _ in best.values()),
        files=len(best),
        storage=storage,
    )
