"""SGLang's own line prefix in each form, under each collector's wrapper."""

from __future__ import annotations

from datetime import datetime

import pytest

from kit.logs import Milestone, Rank, parse_text
from kit.logs.prefix import first_time, sglang_prefix
from kit.logs.wrappers import line_body

BODY = "Load weight begin. avail mem=21.30 GB"
WHEN = datetime(2026, 12, 2, 13, 46, 15)


@pytest.mark.parametrize(
    ("prefix", "rank", "label"),
    [
        ("[2026-12-02 13:46:15 TP1] ", Rank(tp=1), "TP1"),
        ("[2026-12-02 13:46:15 DP0 TP1] ", Rank(tp=1, dp=0), "DP0 TP1"),
        ("[2026-12-02 13:46:15 TP3 EP3] ", Rank(tp=3, ep=3), "TP3 EP3"),
        ("[2026-12-02 13:46:15 PP1 TP0] ", Rank(tp=0, pp=1), "PP1 TP0"),
        ("[2026-12-02 13:46:15 DP1 PP0 TP2 EP2] ", Rank(tp=2, dp=1, pp=0, ep=2), "DP1 PP0 TP2 EP2"),
        ("[2026-12-02 13:46:15] ", None, "main"),
    ],
)
def test_sglang_prefix_rank_forms(prefix, rank, label):
    [event] = parse_text(prefix + BODY)
    assert event.rank == rank
    assert event.rank_label == label
    assert event.time == WHEN
    assert event.milestone is Milestone.LOAD_BEGIN


def test_milliseconds_are_kept():
    [event] = parse_text("[2026-12-02 13:46:15.042 TP0] " + BODY)
    assert event.time == WHEN.replace(microsecond=42_000)


def test_rank_key_separates_replicas_that_reuse_tp_numbers():
    assert Rank(tp=0, dp=1).key != Rank(tp=0, dp=0).key
    assert Rank(tp=0, pp=1).key == "PP1 TP0"
    assert Rank(tp=2, ep=2).key == "TP2"  # EP follows TP: same process
    assert Rank().key is None


@pytest.mark.parametrize(
    "wrapper",
    [
        "2026-12-02T13:46:15.123456789Z ",  # docker logs --timestamps
        "2026-12-02T13:46:15+01:00 ",  # kubectl logs --timestamps with an offset
        "2025-02-04 21:21:40 ",  # Docker Desktop
        "3: ",  # srun -l
        " 12: ",  # srun -l, padded
        "(SchedulerActor pid=123) ",  # Ray
        "(SchedulerActor pid=123, ip=10.0.0.2) ",  # Ray, multi-node
        "[pod/sglang-0/server] ",  # kubectl logs --prefix
        "[rank0]: ",  # torchrun
        "INFO:     ",  # uvicorn style logging
        "INFO 12-02 13:46:15 launcher.py:12] ",  # vLLM-style logging
    ],
)
def test_wrappers_keep_milestone_rank_and_time(wrapper):
    line = wrapper + "[2026-12-02 13:46:15 TP2] " + BODY
    [event] = parse_text(line)
    assert (event.milestone, event.rank, event.time) == (Milestone.LOAD_BEGIN, Rank(tp=2), WHEN)
    assert line_body(line) == BODY


def test_wrappers_stack_in_any_order():
    line = '[pod/x/c] 2026-12-02T13:46:15Z 3: [2026-12-02 13:46:15 TP2]   File "x.py", line 1'
    assert line_body(line) == '  File "x.py", line 1'


def test_wrapper_keeps_the_indentation_of_the_line_it_wraps():
    assert line_body("2026-12-02T13:46:15.1Z     self.capture()") == "    self.capture()"


@pytest.mark.parametrize(
    ("line", "rank", "time"),
    [
        (
            "[22:30:52 TP0] Load weight begin.",
            Rank(tp=0),
            datetime(1900, 1, 1, 22, 30, 52),
        ),  # 0.2: clock only
        ("[gpu_id=1] Load weight begin.", Rank(tp=1), None),  # 0.2: one scheduler per GPU
        ("Load weight begin.", None, None),
    ],
)
def test_old_and_missing_prefixes(line, rank, time):
    [event] = parse_text(line)
    assert (event.rank, event.time) == (rank, time)


def test_record_glued_onto_a_tqdm_bar_is_found_with_its_own_prefix():
    line = (
        "  0%|          | 0/13 [00:00<?, ?it/s][2025-03-08 12:29:21 TP1] Capture cuda graph begin."
        " This can take up to several minutes. avail mem=1.45 GB"
    )
    [event] = parse_text(line)
    assert (event.milestone, event.rank) == (Milestone.CAPTURE_BEGIN, Rank(tp=1))


def test_prefix_before_the_match_wins_over_later_brackets():
    line = "[2026-12-02 13:46:15 TP4] Load weight begin. [2030-01-01 00:00:00 TP9] noise"
    assert sglang_prefix(line, line.index("Load")) == (WHEN, Rank(tp=4))


def test_impossible_dates_give_no_time_instead_of_an_error():
    [event] = parse_text("[2026-13-45 25:61:99 TP0] " + BODY)
    assert event.time is None and event.rank == Rank(tp=0)


def test_first_time_skips_bars_and_finds_the_first_stamp():
    text = "Loading: 10% [00:01<00:09]\n[2026-12-02 13:46:01] server_args=...\n[2026-12-02 13:46:15 TP0] x\n"
    assert first_time(text) == datetime(2026, 12, 2, 13, 46, 1)
    assert first_time("no stamps here") is None
