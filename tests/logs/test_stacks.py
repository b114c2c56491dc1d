"""Stack classification on real py-spy dumps taken from the rehearsal server (tests/fixtures/stacks)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kit.logs.stacks import (
    StackKind,
    classify_stack,
    explain_hang,
    main_thread_frames,
    rank_of_process,
)

STACKS = Path(__file__).parents[1] / "fixtures" / "stacks"


def load(name: str) -> str:
    return (STACKS / name).read_text()


def test_a_rank_waiting_for_peers_at_the_rendezvous_is_classified_rendezvous():
    stack = classify_stack("TP0", load("hang-init-11.txt"), 11)
    assert stack.kind is StackKind.RENDEZVOUS
    assert stack.where.startswith("_create_c10d_store <- _tcp_rendezvous_handler <- init_process_group")


def test_the_planted_fault_is_named_as_such():
    stack = classify_stack("TP1", load("hang-init-12.txt"), 12)
    assert stack.kind is StackKind.PLANTED
    assert stack.where.startswith("kit_fault_hang_init")


def test_a_rank_inside_all_reduce_is_classified_collective():
    stack = classify_stack("TP0", load("hang-collective-11.txt"), 11)
    assert stack.kind is StackKind.COLLECTIVE
    assert stack.where.startswith("all_reduce")


def test_init_hang_explains_waiting_and_missing_ranks():
    stacks = {
        "TP0": classify_stack("TP0", load("hang-init-11.txt")),
        "TP1": classify_stack("TP1", load("hang-init-12.txt")),
    }
    explanation = explain_hang(stacks)
    assert [s.rank for s in explanation.waiting] == ["TP0"]
    assert [s.rank for s in explanation.missing] == ["TP1"]


def test_when_every_rank_waits_in_the_collective_none_is_missing():
    dump = load("hang-collective-11.txt")
    stacks = {r: classify_stack(r, dump) for r in ("TP0", "TP1", "TP2", "TP3")}
    explanation = explain_hang(stacks)
    assert len(explanation.waiting) == 4
    assert explanation.missing == ()


def test_unavailable_stacks_are_neither_waiting_nor_missing():
    stacks = {
        "TP0": classify_stack("TP0", load("hang-init-11.txt")),
        "TP1": classify_stack("TP1", "(py-spy dump failed with exit code 1: Permission denied)"),
    }
    explanation = explain_hang(stacks)
    assert stacks["TP1"].kind is StackKind.UNAVAILABLE
    assert [s.rank for s in explanation.waiting] == ["TP0"]
    assert explanation.missing == ()
    assert [s.rank for s in explanation.other] == ["TP1"]


def test_main_thread_is_preferred_over_other_threads():
    dump = (
        'Thread 7 (idle): "pin_memory"\n    wait (threading.py:320)\n'
        'Thread 1 (active): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:3252)\n'
    )
    frames = main_thread_frames(dump)
    assert [f.function for f in frames] == ["all_reduce"]
    assert frames[0].line == 3252


def test_process_titles_map_to_tracker_rank_labels():
    assert rank_of_process("sglang::scheduler_TP1") == "TP1"
    assert rank_of_process("sglang::scheduler_DP0_TP1") == "DP0 TP1"
    assert rank_of_process("sglang::detokenizer") is None
    assert rank_of_process("python -m sglang.launch_server") is None


@given(st.text())
def test_any_text_classifies_without_raising(text):
    stack = classify_stack("TP0", text)
    assert stack.kind in set(StackKind)
