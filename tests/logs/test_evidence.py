"""The evidence record and the causes ranked over it (kit/logs/evidence.py, kit/logs/causes.py):
preconditions hide causes on a run that lacks them and keep them where unknown; direct evidence
outranks any pattern; the first failure is the process that died first, its peers' errors after."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.logs.activity import CgroupReading
from kit.logs.causes import build_causes, default_causes, match_causes, rank_causes
from kit.logs.events import Phase
from kit.logs.evidence import (
    KEYS,
    Evidence,
    Facts,
    Finding,
    UpstreamWord,
    cgroup_findings,
    child_exit_findings,
    container_findings,
    first_failure,
    kernel_findings,
    process_findings,
)
from kit.logs.stacks import classify_stack

STACKS = Path(__file__).parents[1] / "fixtures" / "stacks"
ONE_NODE_CPU = Facts(nodes=1, gpu=False, proxy=False, said={"gpu": "device cpu"})
# SGLang 0.5.23's own lines (srt/utils/watchdog.py) and a gloo peer's error after it.
CHILD_CRASHED = (
    "[2026-12-05 12:44:38] Subprocess scheduler_1 (pid=12) crashed with exit code -9. "
    "Triggering SIGQUIT for cleanup..."
)
KERNEL_OOM = "Memory cgroup out of memory: Killed process 21806 (sglang::schedul) total-vm:6352840kB"
GLOO = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [172.17.0.2]:60080."


def ids(matches) -> list[str]:
    return [m.cause.id for m in matches]


def test_every_needs_and_raised_by_key_in_the_book_is_known():
    book = default_causes()
    for cause in book.causes:
        assert set(cause.raised_by) | set(cause.unless_raised) <= set(KEYS), cause.id
    with pytest.raises(ValueError, match="unknown evidence keys"):
        build_causes({"cause": [one_cause(raised_by=["nope"])]})
    with pytest.raises(ValueError, match="unknown needs"):
        build_causes({"cause": [one_cause(needs=["moon"])]})


def one_cause(**keys) -> dict:
    return {"id": "x", "title": "t", "why": "w", "what_to_try": ["a"], "source": "s", **keys}


def test_the_older_devices_key_still_means_needs_gpu():
    [cause] = build_causes({"cause": [one_cause(devices=["cuda"])]}).causes
    assert cause.needs == ("gpu",) and cause.devices == frozenset({"cuda"})


def test_a_false_precondition_hides_a_cause_and_an_unknown_one_keeps_it_saying_so():
    text = "TCPStore DistNetworkError timed out after 600 s Connection closed by peer"
    one_node = rank_causes(Evidence("hung", Phase.INIT, facts=ONE_NODE_CPU, log_text=text, raised_text=text))
    assert not {"rendezvous-timeout", "peer-unreachable", "nccl-bootstrap"} & set(ids(one_node))
    offline = rank_causes(Evidence("hung", Phase.INIT, log_text=text, raised_text=text))
    assert "rendezvous-timeout" in ids(offline)
    rendezvous = next(m for m in offline if m.cause.id == "rendezvous-timeout")
    assert rendezvous.facts == ("needs nodes>1: nodes unknown",)
    two_nodes = rank_causes(
        Evidence("hung", Phase.INIT, facts=Facts(nodes=2), log_text=text, raised_text=text)
    )
    assert "rendezvous-timeout" in ids(two_nodes)


def test_a_proxy_cause_needs_a_proxy_in_the_servers_environment():
    text = "Uvicorn running Response [502]"
    none_set = Evidence("hung", Phase.WARMUP, facts=Facts(proxy=False), log_text=text, raised_text=text)
    assert "warmup-proxy" not in ids(rank_causes(none_set))
    set_ = Evidence("hung", Phase.WARMUP, facts=Facts(proxy=True), log_text=text, raised_text=text)
    assert ids(rank_causes(set_))[0] == "warmup-proxy"


def test_direct_evidence_outranks_every_pattern_and_is_shown_as_the_causes_evidence():
    text = "Init torch distributed begin TCPStore timed out nccl via P2P/ Connection closed by peer"
    paused = container_findings(name="kit-tiny-1", paused=True, paused_for_s=12.0)
    record = Evidence("hung", Phase.WARMUP, facts=Facts(), findings=paused, log_text=text, raised_text=text)
    [first, *_] = rank_causes(record)
    assert first.cause.id == "container-paused"
    assert first.evidence == (
        "container kit-tiny-1 is Paused for 12 s (docker pause: nothing runs; `docker unpause kit-tiny-1`)",
    )


def test_a_cause_raised_only_by_evidence_is_never_offered_without_it():
    for outcome in ("hung", "crashed"):
        offered = ids(rank_causes(Evidence(outcome, Phase.WARMUP, facts=ONE_NODE_CPU), limit=50))
        assert not {"container-paused", "rank-stopped", "killed-by-signal", "compile-running"} & set(offered)


def test_an_oom_kill_rules_out_a_bare_signal_and_comes_first():
    findings = (
        *child_exit_findings([(10.0, CHILD_CRASHED)]),
        *kernel_findings([KERNEL_OOM], {21806: "TP1"}),
        *cgroup_findings(
            CgroupReading(oom_kill=0, where="memory/docker/x"),
            CgroupReading(oom_kill=1, where="memory/docker/x"),
        ),
    )
    record = Evidence(
        "crashed", Phase.WARMUP, facts=ONE_NODE_CPU, findings=findings, log_text=GLOO, raised_text=GLOO
    )
    found = ids(rank_causes(record))
    assert found[0] == "host-oom" and "peer-died" in found and "killed-by-signal" not in found


def test_the_first_failure_is_the_rank_that_died_first_named_by_the_kernel():
    findings = (
        *child_exit_findings([(10.0, CHILD_CRASHED)]),
        *kernel_findings([KERNEL_OOM], {21806: "TP1"}),
        *process_findings([("TP0", 21805, "zombie: killed by SIGKILL")], t=14.0),
    )
    first = first_failure(findings)
    assert first is not None
    assert first.describe() == "TP1 (pid 21806) was killed by the kernel's OOM killer first"
    assert "kernel: Memory cgroup out of memory: Killed process 21806 (sglang::schedul)" in first.lines


def test_a_bare_sigkill_is_said_as_one_and_the_container_oom_names_the_main_process():
    bare = first_failure(container_findings(name="c", running=False, exit_code=137))
    assert (
        bare is not None
        and bare.describe() == "the server's main process was killed by SIGKILL (no OOM kill counted) first"
    )
    oom = first_failure(
        (
            *container_findings(name="c", running=False, exit_code=137, oom_killed=True),
            *kernel_findings(["Out of memory: Killed process 700 (python)"], {700: "main"}),
        )
    )
    assert (
        oom is not None
        and oom.describe()
        == "the server's main process (pid 700) was killed by the kernel's OOM killer first"
    )


def test_sglangs_child_exit_line_names_the_rank_the_signal_and_its_own_pid_namespace():
    [crashed, killed] = child_exit_findings([(3.0, CHILD_CRASHED)])
    assert (crashed.key, crashed.rank, crashed.pid) == ("child-crashed", "TP1", None)
    assert crashed.line == "SGLang: TP1 (scheduler_1, pid 12 in its namespace) crashed, killed by SIGKILL"
    assert killed.key == "killed-by-signal"
    [died] = child_exit_findings([(0.0, "Rank 3 scheduler died during initialization (exit code: 1).")])
    assert (died.rank, died.line) == ("TP3", "SGLang: TP3 crashed, exit code 1")


def test_kernel_lines_of_other_processes_are_not_this_servers():
    assert kernel_findings([KERNEL_OOM], {1: "TP0"}) == ()
    assert kernel_findings(["Out of memory: Killed process 9 (python)"], {}, pids=[9])[0].pid == 9


def test_stopped_and_frozen_ranks_and_stacks_become_findings():
    [stopped] = process_findings([("TP1", 40, "stopped"), ("TP0", 39, "sleeping")])
    assert stopped.key == "process-stopped" and stopped.rank == "TP1"
    frozen = cgroup_findings(None, CgroupReading(frozen=True, where="freezer/docker/x"))
    assert [f.key for f in frozen] == ["process-frozen"]
    compile_ = classify_stack("TP0", (STACKS / "warmup-compile-TP0.txt").read_text(), compilers=("cc1plus",))
    record = Evidence("hung", Phase.WARMUP, facts=ONE_NODE_CPU, stacks=(compile_,))
    assert list(record.raised()) == ["stack-compiling"]
    held = classify_stack("TP0", (STACKS / "warmup-compile-TP0.txt").read_text(), held="frozen")
    assert Evidence("hung", stacks=(held,)).raised() == {}  # a frozen compiler is no work


def test_the_upstream_tools_word_is_shown_and_raises_what_its_key_raises():
    word = UpstreamWord("sglang-watchdog", "Scheduler watchdog timeout (soft=True)", "stack-waiting")
    record = Evidence("hung", Phase.INIT, facts=ONE_NODE_CPU, upstream=(word,))
    assert record.raised() == {"stack-waiting": ("sglang-watchdog: Scheduler watchdog timeout (soft=True)",)}
    assert record.lines() == ("sglang-watchdog: Scheduler watchdog timeout (soft=True)",)


def test_offline_analysis_keeps_every_cause_whose_facts_it_cannot_know():
    text = "NCCL WARN Bootstrap NET/Socket TCPStore DistNetworkError"
    offline = ids(match_causes("hung", Phase.INIT, text, limit=50))
    assert {"nccl-bootstrap", "rendezvous-timeout"} <= set(offline)
    on_cpu = ids(match_causes("hung", Phase.INIT, text, device="cpu", limit=50))
    assert "nccl-bootstrap" not in on_cpu and "rendezvous-timeout" in on_cpu  # nodes still unknown


def test_findings_keep_their_order_and_raise_once_per_line():
    record = Evidence(
        "crashed", findings=(Finding("exited", "a"), Finding("exited", "a"), Finding("exited", "b"))
    )
    assert record.raised() == {"exited": ("a", "b")}


def test_a_137_after_sglangs_own_sigquit_teardown_is_no_outside_kill():
    """SGLang's SIGQUIT handler SIGKILLs its own main process (kill_process_tree, srt/utils/common.py
    0.5.23): the container's 137 after its line is SGLang ending itself, never 'killed by a signal'."""
    said = "[2026-12-05 16:30:01] SIGQUIT received. signum=3, frame=None. It usually means one child failed."
    teardown = container_findings(name="c", running=False, exit_code=137, teardown=said)
    assert [f.key for f in teardown] == ["exited", "sglang-teardown"]
    assert "SGLang ended itself with SIGKILL after a child failed" in teardown[1].line
    assert first_failure(teardown) is None
    assert "killed-by-signal" in [f.key for f in container_findings(name="c", running=False, exit_code=137)]
