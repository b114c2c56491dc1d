"""The checkpoint's pages in a process's mappings (kit/runtime/mapped.py): read from this host's real
/proc for a real mapping, and from recorded smaps and mountinfo text for the storage kinds this
machine has none of (NFS)."""

from __future__ import annotations

import mmap
import os

from kit.runtime.mapped import parse_smaps, read_mapped, storage_of

PAGE = mmap.PAGESIZE


def test_the_resident_pages_of_a_mapped_shard_are_what_this_process_touched(tmp_path):
    """As safetensors.safe_open maps a shard and the loader copies tensors out of it: only the pages
    read are resident in the mapping, whether they came from disk or the page cache."""
    shard = tmp_path / "model-00001-of-00002.safetensors"
    shard.write_bytes(b"\0" * (256 * PAGE))
    with shard.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        before = read_mapped([os.getpid()])
        assert before is not None and before.files == 1 and before.mapped_bytes == 256 * PAGE
        total = sum(mapped[i * PAGE] for i in range(64))  # touch a quarter of the pages
        after = read_mapped([os.getpid()])
    assert total == 0
    assert 64 * PAGE <= after.resident_bytes <= 256 * PAGE  # at least the pages read, at most the file
    assert after.storage is not None  # this host's own mount table names the file system
    assert read_mapped([os.getpid()]).files == 0  # the mapping closed: nothing of the checkpoint mapped
    assert read_mapped([2**22 + 12345]) is None  # no such process: nothing could be read


SHARD = "/root/.cache/huggingface/hub/models--Qwen--Qwen3.5-122B-A10B/snapshots/dc4d/model-00003.safetensors"
SMAPS = f"""\
7f2a00000000-7f2a80000000 r--s 00000000 00:2f 1234 {SHARD}
Size:            2097152 kB
Rss:              524288 kB
Pss:              131072 kB
7f2b00000000-7f2b00001000 r--p 00000000 08:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
Size:                  4 kB
Rss:                   4 kB
"""
MOUNTINFO = """\
22 1 0:21 / / rw,relatime - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/AB
31 22 0:47 /hf /root/.cache/huggingface rw,relatime - nfs4 nas:/export/hf rw,vers=4.2
32 22 8:1 /data /data rw,relatime - ext4 /dev/nvme0n1p2 rw
"""


def test_recorded_smaps_and_mountinfo_name_the_shard_and_its_network_storage():
    files = parse_smaps(SMAPS)
    [(path, (size, rss))] = files.items()
    assert path.endswith("model-00003.safetensors") and (size, rss) == (2 << 30, 512 << 20)
    assert storage_of(path, MOUNTINFO) == "nfs4: the network (NFS)"
    assert storage_of("/opt/kit/models/qwen-tiny/model.safetensors", MOUNTINFO).startswith("overlay: ")
    assert storage_of("/data/x.safetensors", MOUNTINFO) == "ext4: a local disk"
    assert storage_of("/x", "garbage") is None
