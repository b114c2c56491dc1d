"""Stack classification on real py-spy dumps taken from the rehearsal server (tests/fixtures/stacks)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.logs.stacks import (
    StackKind,
    StackSample,
    StackState,
    build_rules,
    classify_stack,
    default_rules,
    explain_hang,
    main_thread_frames,
    moved,
    rank_of_process,
    stack_basis,
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


# -- the table's states, and stacks over time (kit/logs/stacks.toml) ---------------------------------


def test_the_warm_up_compile_is_working_and_names_its_compiler_child():
    dump = load("warmup-compile-TP0.txt")  # TP0 in torch inductor's _run_compile_cmd (CPU rehearsal)
    with_child = classify_stack("TP0", dump, compilers=("cc1plus",))
    assert (with_child.state, with_child.kind) == (StackState.WORKING, StackKind.COMPILE)
    assert with_child.what == "inductor compile, cc1plus child"
    assert with_child.describe().startswith("TP0 compiling: inductor compile, cc1plus child")
    # Without a compiler child the subprocess wait does not decide: the inductor frames outside do.
    alone = classify_stack("TP0", dump)
    assert (alone.state, alone.what) == (StackState.WORKING, "inductor compile")
    assert alone.where.startswith("_run_compile_cmd")


def test_a_stopped_or_frozen_rank_is_never_working_whatever_its_frames():
    stopped = classify_stack("TP0", load("warmup-compile-TP0.txt"), compilers=("cc1plus",), held="stopped")
    assert stopped.idle and not stopped.working and stopped.held == "stopped"
    assert classify_stack("TP0", load("warmup-compile-TP0.txt"), held="sleeping").held is None


def test_waiting_ranks_and_planted_hangs_are_idle():
    assert classify_stack("TP0", load("hang-init-11.txt")).state is StackState.WAITING
    assert classify_stack("TP1", load("hang-init-12.txt")).state is StackState.SLEEPING
    unknown = classify_stack("TP0", 'Thread 1 (active): "MainThread"\n    mystery (x.py:1)\n')
    assert unknown.state is StackState.UNKNOWN and not unknown.idle
    idle = classify_stack("TP0", 'Thread 1 (idle): "MainThread"\n    mystery (x.py:1)\n')
    assert idle.state is StackState.SLEEPING


def test_every_row_has_a_source_and_a_bad_row_is_refused():
    assert all(rule.source for rule in default_rules())
    row = {"state": "working", "kind": "compile", "what": "w", "match": ["x"], "source": "s"}
    assert build_rules({"frame": [row]})[0].what == "w"
    for bad in (
        {**row, "state": "unknown"},
        {**row, "kind": "nope"},
        {**row, "child": "linker"},
        {**row, "x": 1},
    ):
        with pytest.raises(ValueError):
            build_rules({"frame": [bad]})


def sample(t: float, *stacks) -> StackSample:
    return StackSample(t, tuple(stacks))


def test_the_stacks_confirm_a_hang_only_with_every_rank_idle_at_the_same_place_twice():
    waiting = classify_stack("TP0", load("hang-init-11.txt"))
    planted = classify_stack("TP1", load("hang-init-12.txt"))
    basis = stack_basis([sample(10, waiting, planted), sample(20, waiting, planted)], ["TP0", "TP1"])
    assert basis.complete and basis.said.startswith(
        "every rank idle at the same place in two samples 10 s apart"
    )
    assert not stack_basis([sample(20, waiting, planted)], ["TP0", "TP1"]).complete
    assert "no stack for TP1" in stack_basis([sample(10, waiting), sample(20, waiting)], ["TP0", "TP1"]).said
    unreadable = stack_basis([StackSample(20, unreadable="the container is paused")], ["TP0"])
    assert not unreadable.complete and unreadable.said == "stacks unreadable: the container is paused"
    assert stack_basis([], ["TP0"]).rests_on == "counters only"


def test_a_working_rank_or_one_past_its_wait_is_progress_an_idle_one_is_not():
    waiting = classify_stack("TP0", load("hang-init-11.txt"))
    collective = classify_stack("TP0", load("hang-collective-11.txt"))
    compiling = classify_stack("TP1", load("warmup-compile-TP0.txt"), compilers=("cc1plus",))
    assert moved(sample(0, waiting), sample(10, waiting)) == ()
    assert moved(sample(0, waiting), sample(10, collective)) == (
        "TP0 moved: _create_c10d_store <- _tcp_rendezvous_handler <- init_process_group -> "
        "all_reduce <- _exception_logger.<locals>.wrapper <- _patch_distributed.<locals>.all_reduce",
    )
    assert moved(sample(0), sample(10, compiling))[0].startswith("TP1 compiling: inductor compile")


def test_a_loader_while_no_counter_moves_is_standing_not_progress_and_twice_confirms_a_hang():
    """A place of work in the rank's own process (a loader) is progress while some counter shows life;
    with none (the tracker sets `still`) it stands: no progress, and twice there confirms a hang. A
    compile whose work is in a compiler child works whatever the counters say."""
    loading = classify_stack("TP0", load("load-TP0.txt"))
    standing = replace(loading, still=True)
    assert loading.kind is StackKind.LOADING and loading.working and not loading.idle
    assert (
        standing.standing_in_work and standing.idle and not standing.working and standing.word == "standing"
    )
    assert moved(sample(0), sample(10, standing)) == ()
    assert moved(sample(0, standing), sample(10, standing)) == ()
    assert moved(sample(0, standing), sample(10, loading))[0].startswith("TP0 working: loading weights")
    assert standing.describe().startswith("TP0 standing, no counter moving, at: loading weights")
    assert stack_basis([sample(0, standing), sample(10, standing)], ["TP0"]).complete
    assert not stack_basis([sample(0, loading), sample(10, loading)], ["TP0"]).complete
    compiling = replace(
        classify_stack("TP0", load("warmup-compile-TP0.txt"), compilers=("cc1plus",)), still=True
    )
    assert compiling.working and not compiling.standing_in_work


def test_frames_no_row_knows_are_sleeping_when_py_spy_or_the_process_state_says_so():
    """From the host py-spy calls every thread active (other PID namespace): the process's own state
    (psutil: sleeping) decides then, as SGLANG_TEST_STUCK_SCHEDULER_INIT's sleep in __init__ shows."""
    idle = load("stuck-init-TP0.txt")
    active = idle.replace("(idle)", "(active)")
    assert classify_stack("TP0", idle).state is StackState.SLEEPING
    assert classify_stack("TP0", active).state is StackState.UNKNOWN
    assert classify_stack("TP0", active, held="sleeping").state is StackState.SLEEPING
    assert classify_stack("TP0", active, held="running").state is StackState.UNKNOWN
    assert classify_stack("TP0", active, held="sleeping").held is None
