"""LogParser: tracebacks as one event, line numbers, and live feeding versus bulk parsing."""

from __future__ import annotations

from kit.logs import LogParser, Milestone, Rank, parse_text

OPENER = "[2024-10-22 06:31:49 TP0] Traceback (most recent call last):"
FRAMES = [
    '  File "/sglang/srt/model_executor/cuda_graph_runner.py", line 162, in __init__',
    "    self.capture()",
    "    ^^^^^^^^^^^^^^",
]


def _feed_all(lines: list[str]) -> list:
    parser = LogParser()
    events = [e for line in lines for e in parser.feed(line)]
    return events + parser.flush()


def test_traceback_is_one_error_event_with_its_exception():
    lines = ["[2024-10-22 06:31:49 TP0] Memory pool end. avail mem=8.38 GB", OPENER, *FRAMES]
    lines += ["Exception: Capture cuda graph failed: BatchDecodeWithPagedKVCache failed", "after"]
    kv, error = parse_text("\n".join(lines))
    assert kv.milestone is Milestone.KV_READY
    assert error.milestone is Milestone.ERROR
    assert (error.line_no, error.rank, error.text) == (2, Rank(tp=0), OPENER)
    assert (
        error.fields["exception"]
        == "Exception: Capture cuda graph failed: BatchDecodeWithPagedKVCache failed"
    )
    assert error.fields["traceback"].splitlines() == lines[1:6]
    assert error.fields["kind"] == "traceback"
    assert not error.fatal  # a bare traceback may be survived; the tracker decides


def test_scheduler_exception_traceback_is_fatal():
    text = "[2026-02-25 16:41:56 TP9] Scheduler hit an exception: Traceback (most recent call last):\n"
    text += (
        "\n".join(FRAMES) + "\nRuntimeError: NCCL error: remote process exited or there was a network error\n"
    )
    [error] = parse_text(text)
    assert error.fatal and error.fields["kind"] == "scheduler_exception"
    assert error.fields["exception"].startswith("RuntimeError: NCCL error")
    assert error.rank == Rank(tp=9)


def test_traceback_cut_off_by_another_record_is_kept_and_the_record_still_counts():
    text = "\n".join([OPENER, *FRAMES, "[2024-10-22 06:31:50 TP1] Load weight begin. avail mem=1 GB"])
    error, load = parse_text(text)
    assert "exception" not in error.fields
    assert error.fields["traceback"].splitlines() == [OPENER, *FRAMES]
    assert (load.milestone, load.line_no) == (Milestone.LOAD_BEGIN, 5)


def test_traceback_cut_off_at_the_end_of_input_comes_out_on_flush():
    parser = LogParser()
    assert [e for line in [OPENER, *FRAMES] for e in parser.feed(line)] == []
    [error] = parser.flush()
    assert error.line_no == 1 and "exception" not in error.fields
    assert parser.flush() == []


def test_chained_tracebacks_give_one_event_each():
    text = "\n".join(
        [
            "Traceback (most recent call last):",
            *FRAMES,
            "KeyError: 'x'",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            *FRAMES,
            "ValueError: y",
        ]
    )
    first, second = parse_text(text)
    assert (first.fields["exception"], second.fields["exception"]) == ("KeyError: 'x'", "ValueError: y")
    assert (first.line_no, second.line_no) == (1, 9)


def test_traceback_under_docker_timestamps_and_torchrun_prefixes():
    text = "\n".join(
        f"2026-12-02T13:46:15.1Z [rank0]: {line}" for line in ["Traceback (most recent call last):", *FRAMES]
    )
    text += "\n2026-12-02T13:46:15.2Z [rank0]: torch.OutOfMemoryError: CUDA out of memory."
    [error] = parse_text(text)
    assert error.fields["exception"] == "torch.OutOfMemoryError: CUDA out of memory."
    assert len(error.fields["traceback"].splitlines()) == 5


def test_exception_line_inside_a_traceback_is_not_a_second_event():
    text = "\n".join(
        ["Traceback (most recent call last):", *FRAMES, "RuntimeError: CUDA error: out of memory"]
    )
    assert len(parse_text(text)) == 1


def test_line_numbers_count_every_line():
    text = "noise\n\nmore noise\n[2026-12-02 13:46:15 TP0] Init parallel begin.\nx\n"
    text += "[t] The server is fired up and ready to roll!\n"
    assert [e.line_no for e in parse_text(text)] == [4, 6]


def test_feed_accepts_trailing_newlines_crlf_and_multi_line_chunks():
    parser = LogParser()
    assert (
        parser.feed("[2026-12-02 13:46:15 TP0] Init parallel begin.\r\n")[0].milestone is Milestone.INIT_BEGIN
    )
    assert parser.line_no == 1
    both = parser.feed("[2026-12-02 13:46:16 TP0] Init parallel ends. elapsed=1 s\nnoise\nKilled")
    assert [e.milestone for e in both] == [Milestone.INIT_END, Milestone.ERROR]
    assert [e.line_no for e in both] == [2, 4]
    assert both[0].text.endswith("elapsed=1 s")


def test_feed_and_parse_text_agree_on_every_fixture_log():
    from pathlib import Path

    log = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-logs"
    for path in sorted(log.glob("*.log")):
        text = path.read_text(encoding="utf-8", errors="replace")
        assert _feed_all(text.split("\n")) == parse_text(text), path.name


def test_a_runaway_indented_block_after_a_traceback_is_bounded():
    text = "Traceback (most recent call last):\n" + "  x\n" * 5000 + "ValueError: end\n"
    [error] = parse_text(text)
    assert len(error.fields["traceback"].splitlines()) <= 401
    assert error.fields["exception"] == "ValueError: end"


def test_a_traceback_opening_a_buffer_takes_the_last_line_of_the_buffer_before_as_context():
    # Found by hypothesis: a reader that is handed "...\n    frame(" and then "Traceback ..." must
    # not give the traceback the rank and time of an older prefixed line (bulk parsing does not).
    first = "[2026-12-02 13:46:12 TP1] Init parallel begin.\n    scheduler = Scheduler("
    second = "Traceback (most recent call last):\n[2026-12-02 13:46:12 TP1] Init parallel begin."
    parser = LogParser()
    chunked = parser.feed_text(first) + parser.feed_text(second) + parser.flush()
    assert chunked == parse_text(first + "\n" + second)
    [traceback] = [e for e in chunked if e.fields.get("kind") == "traceback"]
    assert traceback.rank is None and "message" not in traceback.fields
