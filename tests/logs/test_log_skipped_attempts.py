"""A restart log too big to read whole (kit.files.read_log keeps its head and tail) is still numbered
right: the launches in the skipped middle are counted as they stream past (LaunchCounter), so the last
attempt of a 300-launch log is attempt 300 of 300, not the count of the part read, the earlier rows
after the middle move up with it, and the judged attempt's first line is the file's line."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import kit.files as files
from kit.logs.analyze import analyze_path
from kit.logs.attempts import LaunchCounter, across_skipped

READY = Path(__file__).resolve().parents[1] / "fixtures" / "kit-logs" / "sglang-0.5.23-cpu-tiny-tp2-ready.log"
LAUNCHES = 300


@pytest.fixture
def restart_log(tmp_path, monkeypatch) -> tuple[Path, int]:
    """300 launches of the rehearsal's ready start-up, the last cut after its launch line (a hang); the
    reader's bounds made small (64 KiB head and tail, 4 KiB chunks) so the middle is skipped."""
    monkeypatch.setattr(files, "LOG_HEAD_BYTES", 64 << 10)
    monkeypatch.setattr(files, "LOG_TAIL_BYTES", 64 << 10)
    monkeypatch.setattr(files, "_CHUNK", 4 << 10)
    lines = READY.read_text(encoding="utf-8").splitlines(keepends=True)
    launch = next(i for i, line in enumerate(lines) if "server_args=" in line)
    text = "".join(lines) * (LAUNCHES - 1) + "".join(lines[: launch + 1])
    path = tmp_path / "restarts.log"
    path.write_text(text, encoding="utf-8")
    last_launch = text.count("\n")  # the file's last line is the last launch line
    assert path.stat().st_size > 10 * (128 << 10)
    return path, last_launch


def test_the_last_of_300_launches_is_attempt_300_though_the_middle_was_skipped(restart_log):
    path, last_launch = restart_log
    report = analyze_path(path)
    assert report.skipped is not None and report.skipped.lines > 20_000
    attempt = report.attempt
    assert (attempt.number, attempt.count) == (LAUNCHES, LAUNCHES)
    assert attempt.summary.startswith(f"attempt {LAUNCHES} of {LAUNCHES} (")
    assert "launches in the skipped middle, not judged); in the part read, " in attempt.summary
    assert attempt.first_line == last_launch
    # The rows read: the head's first attempts, then those after the middle, numbered past it.
    numbers = [row.number for row in attempt.earlier]
    assert numbers[0] == 1 and numbers[-1] == LAUNCHES - 1 and numbers == sorted(set(numbers))
    assert any(b - a > 200 for a, b in itertools.pairwise(numbers))
    assert report.outcome == "hung"


def test_the_counter_takes_the_most_of_any_launch_kind():
    counter = LaunchCounter()
    counter("[x] server_args=ServerArgs(model_path='m')\nvLLM API server version 0.6.0\n")
    counter("INFO args: Namespace(model='m')\nvLLM API server version 0.6.0\nargs: Namespace(x=1)\n")
    assert counter.counts["server_args"] == 1 and counter.launches == 2
    assert across_skipped(3, 3, "attempt 3 of 3", 0) == (3, 3, "attempt 3 of 3")
