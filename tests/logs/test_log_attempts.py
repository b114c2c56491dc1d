"""Launch attempts: a log of several starts is split at each launch line and the last one judged.

The multi-start logs here are built from the kit's own real CPU log (tests/fixtures/kit-logs):
one full ready start, then the first lines of a second start that stops in init, as journald of
a unit with Restart=always shows when the restart hangs. They are constructed test inputs, not
corpus logs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.cli import main
from kit.logs import (
    Attempts,
    Hung,
    LogParser,
    Milestone,
    Phase,
    PhaseLimits,
    Ready,
    Tracker,
    analyze_text,
    parse_text,
)
from kit.logs.schema import validate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
READY = (FIXTURES / "kit-logs" / "sglang-0.5.23-cpu-tiny-tp2-ready.log").read_text()
LINES = READY.splitlines()
# The restart: the same launcher, up to both ranks' "Init parallel begin." and no further.
_INIT = next(i for i, line in enumerate(LINES) if "TP0] Init parallel begin" in line)
HANGS_IN_INIT = "\n".join(LINES[: _INIT + 1])
SIGQUIT = "[2026-12-02 13:46:13] Received sigquit from a child process. It usually means the child failed."


def _later(text: str, minutes: int) -> str:
    """The same lines stamped `minutes` later (a restart happens after the first run)."""
    assert 0 < minutes < 13
    return text.replace("[2026-12-02 13:46:", f"[2026-12-02 13:{46 + minutes}:")


def test_a_ready_start_followed_by_a_hanging_restart_is_hung_in_init_attempt_2_of_2():
    report = analyze_text(READY + _later(HANGS_IN_INIT, 5) + "\n")
    assert (report.outcome, report.phase, report.last_milestone) == ("hung", Phase.INIT, Milestone.INIT_BEGIN)
    assert (report.attempt.number, report.attempt.count) == (2, 2)
    assert report.attempt.summary == "attempt 2 of 2; attempt 1 READY"
    assert [(a.number, a.outcome) for a in report.attempt.earlier] == [(1, "ready")]
    assert report.attempt.first_line == len(LINES) + 14  # the restart's server_args line
    # Its own ranks, on its own clock: seconds in init, not the time since the first start.
    assert [(r.rank, r.phase) for r in report.ranks] == [("TP0", "init"), ("TP1", "init")]
    assert all(row.in_phase_s is not None and row.in_phase_s < 60 for row in report.ranks if row.phase)
    assert report.stuck == ["TP0", "TP1"]
    assert report.startup_s is None
    validate(report.model_dump(mode="json"), "analyze")


def test_the_same_log_in_the_cli_exits_4_and_says_which_attempt(capsys, tmp_path):
    log = tmp_path / "journal.log"
    log.write_text(READY + _later(HANGS_IN_INIT, 5) + "\n")
    with pytest.raises(SystemExit) as exited:
        main(["analyze", str(log)])
    assert exited.value.code == 4
    out = capsys.readouterr().out
    assert out.startswith("HUNG in phase init")
    assert "attempt 2 of 2; attempt 1 READY" in out


def test_crashed_attempts_are_summarised_in_runs():
    crash = (
        HANGS_IN_INIT
        + "\n[2026-12-02 13:46:13] Received sigquit from a child process. It usually means the child failed."
    )
    text = "\n".join([_later(crash, 1), _later(crash, 2), READY])
    report = analyze_text(text)
    assert report.outcome == "ready"
    assert report.attempt.summary == "attempt 3 of 3; attempts 1-2 CRASHED in init"


def test_a_draft_worker_repeating_init_is_not_a_new_attempt():
    events = parse_text(READY)
    launches = [e for e in events if e.note is not None and e.note.value == "launch"]
    assert len(launches) == 1
    # The MTP/EAGLE draft worker prints init.begin again inside the same launch.
    replayed = Attempts.start().observe_events(events, 0.0)
    again = replayed.observe_event(next(e for e in events if e.milestone is Milestone.INIT_BEGIN), 1.0)
    assert again.count == 1


def test_live_feeding_line_by_line_splits_the_same_way():
    parser = LogParser()
    attempts = Attempts.start(PhaseLimits(), 0.0)
    for t, line in enumerate((READY + _later(HANGS_IN_INIT, 5)).splitlines()):
        attempts = attempts.observe_line(float(t), line).observe_events(parser.feed(line), float(t))
    assert attempts.count == 2
    assert isinstance(attempts.earlier[0].outcome, str) and attempts.earlier[0].outcome == "ready"
    verdict = attempts.verdict(10_000.0)
    assert isinstance(verdict, Hung) and verdict.phase is Phase.INIT
    assert attempts.current.phase is Phase.INIT and attempts.phase is Phase.INIT  # reads pass through
    assert isinstance(attempts.current, Tracker)
    assert attempts.stage == "init" and attempts.stuck_ranks() == ("TP0", "TP1")


def test_observing_many_at_once_equals_one_by_one():
    events = parse_text(READY + _later(HANGS_IN_INIT, 5))
    timed = [(e, float(i)) for i, e in enumerate(events)]
    batch = Attempts.start().observe_timed(timed)
    single = Attempts.start()
    for event, t in timed:
        single = single.observe_event(event, t)
    assert batch.count == single.count == 2
    assert batch.earlier == single.earlier
    assert batch.current.timeline == single.current.timeline
    assert batch.current.rank_states == single.current.rank_states
    assert batch.verdict(1e6) == single.verdict(1e6)
    assert isinstance(Attempts.start().observe_timed(timed[:120]).verdict(1e6, ended=True), Ready | Hung)


def test_vllm_prints_two_launch_lines_per_start_and_they_make_one_attempt():
    lines = [
        "INFO 08-06 10:21:03 api_server.py:339] vLLM API server version 0.5.4",
        "INFO 08-06 10:21:03 api_server.py:340] args: Namespace(host=None, tensor_parallel_size=2)",
    ]
    attempts = Attempts.start().observe_events(parse_text("\n".join(lines)), 0.0)
    assert attempts.count == 1
    attempts = attempts.observe_events(parse_text("\n".join(lines)), 5.0)  # the same again: a restart
    assert attempts.count == 2


def test_analysis_json_of_a_multi_attempt_log_names_the_earlier_attempts():
    report = json.loads(analyze_text(READY + _later(HANGS_IN_INIT, 5)).model_dump_json())
    [earlier] = report["attempt"]["earlier"]
    assert earlier["outcome"] == "ready" and earlier["started_at"].startswith("2026-12-02T13:46")


def test_a_traceback_before_the_launch_line_belongs_to_the_launch_that_follows():
    # SGLang logs server_args only after configuring itself; a harmless traceback can come first
    # (retry() printing a failed Hub request). It must not open an attempt of its own.
    text = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/sgl/srt/utils/common.py", line 3790, in retry',
            "ConnectionError: the Hub did not answer",
            "[2026-01-01 00:00:00] server_args=ServerArgs(model_path='m', tp_size=1, ...)",
            "[2026-01-01 00:00:05] Init parallel begin.",
        ]
    )
    attempts = Attempts.start().observe_timed((e, 1.0) for e in parse_text(text))
    assert attempts.number == 1 and not attempts.earlier
    assert attempts.current.survived_errors(2.0) != ()


def test_twenty_thousand_restarts_keep_every_earlier_attempt_in_order():
    """The history is a chain (closing an attempt does not copy the ones before): numbers, order,
    equality and repr hold on a long restart log without deep recursion."""
    launch = "[2026-12-02 13:00:00] server_args=ServerArgs(model_path='/m', tp_size=1)\n"
    text = launch * 20_000
    attempts = analyze_text(text).attempt
    assert (attempts.number, attempts.count) == (20_000, 20_000)
    assert [a.number for a in attempts.earlier] == list(range(19_950, 20_000))
    events = parse_text(text)
    one, two = (Attempts.start().observe_timed((e, 0.0) for e in events) for _ in range(2))
    assert one.number == 20_000 and len(one.earlier) == 19_999 and one.earlier[0].number == 1
    assert one.history == two.history and "19999 earlier attempts" in repr(one)
