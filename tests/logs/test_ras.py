"""NCCL RAS answers read into what a hang is: every rank in the same operation, a rank that never
launched it, a rank missing. Fixtures in NCCL's own formats (tests/fixtures/ras/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.logs.ras import compare, parse_json, parse_status, parse_text, skipped

FIXTURES = Path(__file__).parents[1] / "fixtures" / "ras"


def _read(name: str):
    return parse_status((FIXTURES / name).read_text())


def test_every_rank_in_the_same_allreduce_for_ten_seconds_is_a_stuck_collective_not_a_missing_rank():
    finding = compare(_read("json-all-entered-1.json"), _read("json-all-entered-2.json"), 10)
    lines = finding.lines()
    assert lines[0] == (
        "NCCL RAS: all 4 ranks launched AllReduce #12, Broadcast #1 and none launched another in 10 s: "
        "every rank entered its last collective, none finished (NCCL 2.28.9)"
    )
    assert not any("missing" in line or "never" in line for line in lines)


def test_counts_that_moved_between_the_snapshots_are_work():
    finding = compare(_read("json-all-entered-1.json"), _read("json-moving-2.json"), 10)
    assert any("AllReduce still moves: up to #19" in line for line in finding.lines())
    assert not any("none finished" in line for line in finding.lines())


def test_a_rank_that_never_launched_is_named_in_both_formats():
    json_finding = compare(_read("json-never-launched.json"), _read("json-never-launched.json"), 10)
    assert "NCCL RAS: rank 3 never launched AllReduce (the others launched it up to #1) (NCCL 2.28.9)" in (
        json_finding.lines()
    )
    text = _read("text-mismatch.txt")
    assert text.format == "text" and not text.complete
    lines = compare(text, text, 10).lines()
    assert (
        lines[0]
        == "NCCL RAS: rank 3 never launched AllReduce (the others launched it up to #12) (NCCL 2.28.9)"
    )
    rank3 = next(r for r in text.comms[0].ranks if r.rank == 3)
    assert (rank3.pid, rank3.gpu) == (4245, "3")


def test_a_missing_or_dead_rank_is_named_with_its_process_and_gpu():
    finding = compare(_read("json-missing-rank.json"), _read("json-missing-rank.json"), 10)
    assert finding.lines()[0].startswith(
        "NCCL RAS: rank 3 (pid 4245, GPU 3) is missing from communicator 0xae94423cfbb2ef4a: unresponsive"
    )
    text = compare(_read("text-incomplete-dead.txt"), _read("text-incomplete-dead.txt"), 10).lines()
    assert (
        "NCCL RAS: rank 3 (pid 4245, GPU 3) is missing from communicator ae94423cfbb2ef4a: no data "
        "(NCCL 2.28.9)" in text
    )
    assert "NCCL RAS: process pid 4245 on 127.0.0.1, GPU 3 is considered dead by RAS" in text


def test_nothing_wrong_says_so_and_a_skip_says_why():
    quiet = parse_text("NCCL version 2.25.1 compiled with CUDA 12.8\n\nGroup     Comms\n    0  1\n")
    assert "no communicator shows a missing rank" in compare(quiet, quiet, 10).lines()[0]
    assert skipped("NCCL is not loaded in any rank (gloo: the CPU rehearsal)").lines() == (
        "NCCL RAS: not asked (NCCL is not loaded in any rank (gloo: the CPU rehearsal))",
    )


@pytest.mark.parametrize(
    "text", ["", "{", "[]", '{"communicators": 3}', '{"communicators": [1, {"ranks": [7, {}]}]}']
)
def test_untrusted_answers_never_raise_past_value_error(text):
    try:
        snapshot = parse_status(text)
    except ValueError:
        return
    assert snapshot.comms == () or all(c.ranks == () for c in snapshot.comms)
    compare(snapshot, snapshot, 10).lines()


def test_json_and_text_agree_on_the_same_ranks():
    assert (
        parse_json((FIXTURES / "json-missing-rank.json").read_text()).comms[0].ranks[3].missing
        == "unresponsive"
    )
