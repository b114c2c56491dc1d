"""A host server's output: a file followed like `tail -F` (rotation, truncation, `\\r`, history with its
own times) and the journal's JSON entries (a recorded `journalctl -o json` stream)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.runtime.journal import journal_argv, parse_entry
from kit.runtime.logfile import FileFollower, HistoryTimes, record_wall_time

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "journal"


class Clock:
    def __init__(self) -> None:
        self.mono, self.wall = 1000.0, 1_800_000_000.0

    def tick(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


def follower(path: Path, clock: Clock, since_wall: float | None = None) -> FileFollower:
    return FileFollower(path, since_wall=since_wall, clock=lambda: clock.mono, wall=lambda: clock.wall)


def texts(lines):
    return [text for _, text in lines]


def test_tail_follows_appends_carriage_returns_and_waits_for_the_file(tmp_path):
    clock, log = Clock(), tmp_path / "server.log"
    tail = follower(log, clock)
    assert tail.take() == []  # not there yet: waited for, like tail -F
    log.write_bytes(b"")
    assert tail.take() == []
    with log.open("ab") as out:
        out.write(b"[2026-12-03 07:55:21] server_args=ServerArgs(...)\nLoad")
        out.flush()
        assert texts(tail.take()) == ["[2026-12-03 07:55:21] server_args=ServerArgs(...)"]
        out.write(b"ing shards: 0/2\rLoading shards: 1/2\r")
        out.flush()
        clock.tick(2)
        got = tail.take()
        assert texts(got) == ["Loading shards: 0/2", "Loading shards: 1/2"]  # redraws count while drawn
        assert all(t == clock.mono for t, _ in got)
    assert "Loading shards: 1/2" in tail.text()


def test_tail_reads_a_rotated_file_to_its_end_then_the_new_one(tmp_path):
    clock, log = Clock(), tmp_path / "server.log"
    log.write_text("first\n")
    tail = follower(log, clock)
    assert texts(tail.take()) == ["first"]
    with log.open("a") as out:
        out.write("last of the old file\n")
    os.rename(log, tmp_path / "server.log.1")  # logrotate's create: move, then a new file
    assert texts(tail.take()) == ["last of the old file"]  # moved away, not yet recreated
    log.write_text("first of the new file\n")
    assert texts(tail.take()) == ["first of the new file"]
    assert tail.rotations == 1


def test_tail_reads_a_truncated_file_again_from_its_start(tmp_path):
    clock, log = Clock(), tmp_path / "server.log"
    log.write_text("a long first line that fills the file\n")
    tail = follower(log, clock)
    tail.take()
    log.write_text("short\n")  # copytruncate / `: > log` then a new write, shorter than before
    assert texts(tail.take()) == ["short"]
    assert tail.truncations == 1


def test_history_keeps_its_own_times_and_skips_an_earlier_run(tmp_path):
    """What was in the file before the watch: each record at its own [stamp], lines without one at
    the record before them; records from before the watched process started are another run's."""
    clock, log = Clock(), tmp_path / "server.log"
    start = record_wall_time("[2026-12-03 07:55:00] x")
    assert start is not None
    clock.wall, clock.mono = start + 100, 5000.0
    log.write_text(
        "[2026-12-03 07:40:00] server_args=ServerArgs(old run)\n"
        "Traceback of the old run\n"
        "[2026-12-03 07:55:21] server_args=ServerArgs(this run)\n"
        "  a continuation line\n"
        "[2026-12-03 07:55:31 TP0] Init parallel begin.\n"
    )
    got = follower(log, clock, since_wall=start).take()
    assert texts(got) == [
        "[2026-12-03 07:55:21] server_args=ServerArgs(this run)",
        "  a continuation line",
        "[2026-12-03 07:55:31 TP0] Init parallel begin.",
    ]
    offset = clock.mono - clock.wall
    assert [t for t, _ in got] == pytest.approx(
        [start + 21 + offset, start + 21 + offset, start + 31 + offset]
    )


@given(
    st.lists(
        st.sampled_from(["[2026-12-03 07:55:21] a", "b", "[2026-12-03 07:59:59 TP1] c", "[bad"]), max_size=20
    )
)
def test_history_times_never_run_backwards_or_past_now(lines):
    now = 10_000.0
    times = HistoryTimes(lambda wall: wall - 1_700_000_000 + 5000, since_wall=None, now_mono=now)
    seen = [t for line in lines if (t := times.time_of(line)) is not None]
    assert all(t <= now for t in seen)


def test_recorded_journal_entries_parse_text_and_byte_messages():
    entries = [parse_entry(line) for line in (FIXTURES / "sglang-tiny-ready.json").read_text().splitlines()]
    assert all(e is not None for e in entries)
    messages = [m for _, m in entries]
    assert messages[0].startswith("Started sglang-tiny.service")
    assert any("server_args=" in m for m in messages)
    bar = next(m for m in messages if "Loading safetensors checkpoint shards" in m)
    assert "\r" in bar and bar.endswith("\ufffd")  # a glyph cut mid-character, stored as bytes
    walls = [w for w, _ in entries]
    assert walls == sorted(walls)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"MESSAGE":"hi","__REALTIME_TIMESTAMP":"1764748521000000"}', (1764748521.0, "hi")),
        ('{"MESSAGE":[104,105]}', (None, "hi")),
        ('{"MESSAGE":["a","b"]}', (None, "a\nb")),  # a field with two values
        ('{"MESSAGE":null}', None),  # over 4096 bytes without --all
        ('{"PRIORITY":"6"}', None),
        ("not json", None),
        ("[1, 2]", None),
    ],
)
def test_journal_entry_shapes(line, expected):
    assert parse_entry(line) == expected


@given(st.text(max_size=200))
def test_any_line_is_an_entry_or_none(line):
    parsed = parse_entry(line)
    assert parsed is None or isinstance(parsed[1], str)


def test_journalctl_is_asked_for_the_unit_since_its_start_in_json_with_every_field_whole():
    argv = journal_argv("sglang-qwen.service", since_wall=1764748521.5)
    assert argv[:3] == ["journalctl", "--unit", "sglang-qwen.service"]
    assert {"--all", "--follow"} <= set(argv) and "json" in argv and "@1764748521.500000" in argv
    assert json.dumps(argv)  # plain strings only
