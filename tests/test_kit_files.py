"""kit.files: one way to write a file (temporary beside it, renamed; a device, FIFO or folder refused)
and one way to read a log (bounded, streamed, not-text refused, UTF-16 decoded)."""

from __future__ import annotations

import codecs
import io
import os
import socket
from pathlib import Path

import pytest

import kit.files as files
from kit.errors import InputError
from kit.files import output_problem, read_log, write_atomic


def test_write_atomic_writes_and_replaces_a_regular_file(tmp_path):
    target = tmp_path / "b.tar.gz"
    write_atomic(target, b"one")
    write_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.tar.gz"]  # no temporary left


def test_a_write_that_fails_midway_leaves_the_old_file_whole(tmp_path):
    # The disk fills up (here: the process may write at most 64 KiB per file, RLIMIT_FSIZE, so the
    # write fails with EFBIG half-way): the file that was there keeps its old bytes, no temporary is
    # left, and the error is the kit's one line. A plain write would leave 64 KiB of the new data.
    import resource
    import signal

    target = tmp_path / "b.tar.gz"
    target.write_bytes(b"the old bundle")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal's kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, hard))
    try:
        with pytest.raises(InputError, match="cannot write") as info:
            write_atomic(target, b"x" * (1 << 20))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert info.value.one_line().startswith("-o: ")
    assert target.read_bytes() == b"the old bundle"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.tar.gz"]


def test_a_reader_of_the_old_file_keeps_it_whole(tmp_path):
    # Renamed over, not written into: a reader that opened the file before (kit bundle show, a
    # watcher) reads the old bytes to the end, never a mix.
    target = tmp_path / "b.tar.gz"
    target.write_bytes(b"old" * 1000)
    with open(target, "rb") as reader:
        write_atomic(target, b"new" * 10)
        assert reader.read() == b"old" * 1000
    assert target.read_bytes() == b"new" * 10


@pytest.mark.parametrize("kind", ["fifo", "folder", "socket", "symlink"])
def test_write_atomic_refuses_what_is_not_a_regular_file_and_leaves_it(tmp_path, kind):
    target = tmp_path / "x"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "folder":
        target.mkdir()
    elif kind == "symlink":
        (tmp_path / "real").write_bytes(b"keep")
        target.symlink_to(tmp_path / "real")
    else:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(target))
    before = target.lstat()
    with pytest.raises(InputError) as info:
        write_atomic(target, b"data")
    assert info.value.one_line().startswith("-o: ")
    after = target.lstat()
    assert (before.st_ino, before.st_mode) == (after.st_ino, after.st_mode)
    assert {p.name for p in tmp_path.iterdir()} <= {"x", "real"}


def test_a_character_device_is_refused():
    assert "a character device" in (output_problem(Path("/dev/null")) or "")


def test_no_folder_is_created_unless_asked(tmp_path):
    target = tmp_path / "missing" / "b.tar.gz"
    with pytest.raises(InputError, match="does not exist"):
        write_atomic(target, b"x")
    assert not (tmp_path / "missing").exists()
    write_atomic(target, b"x", parents=True)
    assert target.read_bytes() == b"x"


def test_an_empty_name_is_refused():
    assert output_problem(Path("")) is not None


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "is empty"),
        (b"\n \n", r"holds no text, only whitespace \(3 bytes, 2 line breaks\)"),
        (b"\r\n" * 4, r"holds no text, only whitespace \(8 bytes, 4 line breaks\)"),  # not "empty"
        (b"ELF\x02\x01\x00\x00", "NUL byte at offset 5"),
    ],
)
def test_what_is_not_text_is_refused(tmp_path, data, why):
    path = tmp_path / "log"
    path.write_bytes(data)
    with pytest.raises(InputError, match=why):
        read_log(path)


def test_a_folder_and_a_missing_file_are_refused(tmp_path):
    with pytest.raises(InputError, match="is a folder"):
        read_log(tmp_path)
    with pytest.raises(InputError, match="cannot read"):
        read_log(tmp_path / "nope")


def test_utf16_with_its_bom_is_decoded(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(
        codecs.BOM_UTF16_LE + "[2026-01-01 00:00:00] Init torch distributed begin.\n".encode("utf-16-le")
    )
    assert read_log(path).text == "[2026-01-01 00:00:00] Init torch distributed begin.\n"


def test_an_endless_stream_of_nul_stops_at_the_first_chunk():
    class Zero(io.RawIOBase):
        reads = 0

        def readable(self):
            return True

        def readinto(self, buffer):
            self.reads += 1
            buffer[:] = b"\0" * len(buffer)
            return len(buffer)

    zero = Zero()
    with pytest.raises(InputError, match="not text"):
        read_log(io.BufferedReader(zero), name="stdin")
    assert zero.reads < 4


def test_a_big_log_keeps_its_head_and_tail_and_counts_the_middle(monkeypatch):
    monkeypatch.setattr(files, "LOG_HEAD_BYTES", 1000)
    monkeypatch.setattr(files, "LOG_TAIL_BYTES", 1000)
    monkeypatch.setattr(files, "_CHUNK", 100)
    lines = [f"line {n:05d}\n".encode() for n in range(2000)]  # 11 bytes each
    log = read_log(io.BytesIO(b"".join(lines)), name="big")
    assert log.skipped_bytes > 0 and log.text.startswith("line 00000\n")
    assert log.text.endswith("line 01999\n")
    kept = [line for line in log.text.splitlines() if line.startswith("line ")]
    assert len(kept) + log.skipped_lines == 2000 + 1  # the head's cut line shows twice, in part
    assert "of the middle skipped" in log.text
    assert len(log.text) < 2200


@pytest.mark.parametrize("kind", ["fifo", "device", "folder", "too big"])
def test_read_bounded_reads_only_a_regular_file_under_its_bound(tmp_path, kind):
    from kit.files import read_bounded

    path = tmp_path / "b.tar.gz"
    if kind == "fifo":
        os.mkfifo(path)  # no writer: open() would block forever
    elif kind == "device":
        path = Path("/dev/zero")  # never ends
    elif kind == "folder":
        path.mkdir()
    else:
        with open(path, "wb") as handle:
            handle.truncate(2048)
    with pytest.raises(InputError):
        read_bounded(path, 1024, field="BUNDLE", fix="give a bundle")
