"""fr_trace's report read into the collective the ranks hang in (tests/fixtures/flight-recorder)."""

from __future__ import annotations

from pathlib import Path

from kit.logs.flight_recorder import SEES, parse_report, skipped

FIXTURES = Path(__file__).parents[1] / "fixtures" / "flight-recorder"


def test_a_rank_that_never_joined_is_named_with_the_collective_and_where_it_was_issued():
    report = parse_report((FIXTURES / "missing-rank" / "fr_trace-v.txt").read_text())
    [unjoined] = report.unjoined
    assert (unjoined.seq, unjoined.collective, unjoined.group, unjoined.missing) == (
        3,
        "nccl:all_reduce",
        "0:default_pg",
        (1,),
    )
    assert report.lines()[0] == (
        "flight recorder: nccl:all_reduce #3 (group 0:default_pg): rank 1 never joined; its state on the "
        "ranks that did: scheduled; issued from all_reduce (parallel_state.py:512) <- init_memory_pool "
        "(model_runner.py:890) <- __init__ (scheduler.py:570)"
    )
    assert report.lines()[-1] == f"flight recorder: {SEES}"


def test_every_rank_in_the_same_unfinished_collective():
    report = parse_report((FIXTURES / "all-entered" / "fr_trace-v.txt").read_text())
    assert report.unjoined == ()
    assert [(m.seq, m.state) for m in report.matched] == [(1, "completed"), (2, "completed"), (3, "started")]
    assert report.lines()[0] == (
        "flight recorder: every rank (0, 1) entered nccl:all_reduce #3 (group 0:default_pg) and none "
        "completed it (state started)"
    )


def test_all_completed_a_failure_and_a_skip_each_say_so():
    done = parse_report(
        "Collectives\n[Collective(id=0, group_id='0', pass_check=True, collective_seq_id=7, p2p_seq_id=0, "
        "record_id=6, pg_desc='0:default_pg', collective_name='nccl:broadcast', input_sizes=[[4]], "
        "output_sizes=[[4]], expected_ranks={0, 1}, collective_state='completed', collective_frames=[])]\n"
    )
    assert done.lines()[0] == (
        "flight recorder: every recorded collective completed on every rank (the last: nccl:broadcast #7)"
    )
    failed = parse_report("Traceback (most recent call last):\n  File x\nKeyError: ('0', 0)\n")
    assert failed.lines() == ("flight recorder: fr_trace could not analyse the dumps: KeyError: ('0', 0)",)
    assert skipped("no rank has a dump pipe").lines() == (
        "flight recorder: no dump (no rank has a dump pipe)",
    )
    assert parse_report("").lines()[0] == "flight recorder: fr_trace found no collective that a rank missed"
