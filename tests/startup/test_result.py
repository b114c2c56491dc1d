"""The verdict paragraph people read, and which likely causes a device can have. Pure."""

from __future__ import annotations

from pathlib import Path

from kit.logs import Hung, PhaseLimits, Tracker, parse_text
from kit.logs.stacks import classify_stack
from kit.startup.result import UpResult, causes_for, stack_rows, verdict_lines

STACKS = Path(__file__).parents[1] / "fixtures" / "stacks"
INIT_HANG_LOG = """\
[2026-12-02 14:15:55 TP0] Init parallel begin.
[2026-12-02 14:15:56 TP1] Init parallel begin.
"""


def tracker_after(log: str) -> Tracker:
    tracker = Tracker.start(PhaseLimits(expected_ranks=2), 0.0)
    for event in parse_text(log):
        tracker = tracker.observe_event(event, 1.0)
    return tracker


def test_a_hung_result_names_waiting_and_missing_ranks_with_their_stacks():
    stacks = {
        "TP0": classify_stack("TP0", (STACKS / "hang-init-11.txt").read_text(), 11),
        "TP1": classify_stack("TP1", (STACKS / "hang-init-12.txt").read_text(), 12),
    }
    result = UpResult(
        target="tiny",
        image="sglang-0.5.23-cpu",
        container="kit-tiny-x",
        verdict="hung",
        exit_code=4,
        phase="init",
        quiet_for_s=20.4,
        waiting_ranks=("TP0",),
        missing_ranks=("TP1",),
        stacks=stack_rows(stacks),
        evidence=("[2026-12-02 14:15:56 TP1] Init parallel begin.",),
        diagnostics="/tmp/runs/x",
    )
    lines = verdict_lines(result)
    assert lines[0] == "HUNG in init: no log line and no activity for 20 s"
    assert lines[1].startswith("  waiting: TP0 (rendezvous: _create_c10d_store")
    assert lines[2].startswith("  missing: TP1 (its stack: kit_fault_hang_init")
    assert "  diagnostics: /tmp/runs/x" in lines


def test_a_cpu_rehearsal_is_not_offered_nccl_causes_but_a_gpu_host_is():
    tracker = tracker_after(INIT_HANG_LOG)
    verdict = Hung(
        phase=tracker.phase, stuck_ranks=("TP0", "TP1"), missing_ranks=(), evidence=(), quiet_for_s=30
    )
    cpu = {c.title for c in causes_for(verdict, tracker, {}, "cpu")}
    gpu = {c.title for c in causes_for(verdict, tracker, {}, "cuda")}
    assert not any("NCCL" in title or "P2P" in title for title in cpu)
    assert any("P2P" in title for title in gpu)


def test_a_planted_fault_is_the_first_likely_cause():
    tracker = tracker_after(INIT_HANG_LOG)
    stacks = {"TP1": classify_stack("TP1", (STACKS / "hang-init-12.txt").read_text())}
    verdict = Hung(
        phase=tracker.phase, stuck_ranks=("TP0",), missing_ranks=("TP1",), evidence=(), quiet_for_s=30
    )
    causes = causes_for(verdict, tracker, stacks, "cpu")
    assert causes[0].title == "a planted test fault (KIT_FAULT)"


def test_ready_reads_as_one_line_with_times():
    result = UpResult("tiny", "img", "c", "ready", 0, phase="serving", startup_s=36.2, first_token_s=0.31)
    assert verdict_lines(result) == ["READY tiny after 36.2 s; first token 0.31 s"]


def test_a_lost_gpu_is_a_fact_in_the_verdict_and_its_causes():
    from kit.logs import ActivitySample

    tracker = tracker_after(INIT_HANG_LOG)
    for t in (2.0, 4.0, 6.0):
        tracker = tracker.observe_sample(
            ActivitySample(t=t, cpu_seconds=0.0, gpu_error="NVML could not read the GPUs: GPU is lost")
        )
    assert tracker.gpu_error == "NVML could not read the GPUs: GPU is lost"
    verdict = Hung(
        phase=tracker.phase, stuck_ranks=("TP0", "TP1"), missing_ranks=(), evidence=(), quiet_for_s=30
    )
    causes = [c.id for c in causes_for(verdict, tracker, {}, "cuda")]
    assert causes[0] == "gpu-lost"
    result = UpResult("tiny", "i", "c", "hung", 4, phase="init", quiet_for_s=30, gpu_error=tracker.gpu_error)
    assert "  gpu: NVML could not read the GPUs: GPU is lost" in verdict_lines(result)


def test_errors_the_server_went_on_after_are_said_under_the_verdict_not_as_it():
    from kit.startup.result import error_lines

    log = (
        "[2026-12-02 14:15:55 TP1] Optional kernel unavailable, falling back\n"
        "Traceback (most recent call last):\n"
        '  File "/x.py", line 1, in <module>\n'
        "ModuleNotFoundError: No module named 'y'\n"
        "[2026-12-02 14:15:59 TP0] Load weight end.\n"
    )
    tracker = tracker_after("[2026-12-02 14:15:50 TP0] Load weight begin.\n" + log)
    assert error_lines(tracker, 100.0) == ("TP1: ModuleNotFoundError: No module named 'y'",)
    result = UpResult(
        "tiny", "i", "c", "ready", 0, startup_s=9.0, survived_errors=error_lines(tracker, 100.0)
    )
    assert verdict_lines(result) == [
        "READY tiny after 9.0 s",
        "  went on after: TP1: ModuleNotFoundError: No module named 'y'",
    ]


def test_a_crash_is_never_listed_as_something_the_server_went_on_after():
    """SGLang 0.5.23 on the CPU rehearsal with a model path the image does not hold (the real log):
    a chained traceback (HFValidationError, then OSError with the same message) and the exit. The
    crash is the OSError; neither link is 'went on after'."""
    from pathlib import Path

    from kit.launch import resolve
    from kit.logs import Crashed
    from kit.logs.limits import limits_from_spec
    from kit.runtime.source import SourceState
    from kit.startup.up import _result
    from kit.startup.watch import Watcher

    log = Path(__file__).parents[1] / "fixtures" / "kit-logs" / "sglang-0.5.23-cpu-missing-model-path.log"
    lines = [line for line in log.read_text().splitlines() if line.strip()]

    class Exits:
        name, started_at, base_url = "kit-tiny-x", 0.0, None
        now, given = 0.0, False

        def clock(self):
            return self.now

        def sleep(self, seconds):
            self.now += seconds

        def read(self):
            if self.given:
                return []
            self.given = True
            return [(1.0, line) for line in lines]

        def sample(self, t):
            return None

        def state(self):
            return SourceState(running=self.now < 3, exit_code=1)

        def drain(self, timeout_s):
            return []

        def environment(self):
            return None

    watcher = Watcher(Exits(), limits_from_spec(resolve("tiny")))
    verdict = watcher.run(poll_s=0.5)
    assert isinstance(verdict, Crashed) and "Repo id must be in the form" in verdict.exception
    result = _result(
        "tiny", "sglang-0.5.23-cpu", "kit-tiny-x", verdict, watcher, watcher.source.now, {}, "cpu"
    )
    assert not any("Repo id" in line for line in result.survived_errors), result.survived_errors


def test_kit_up_keeps_a_paused_server_and_a_hang_the_stacks_did_not_confirm_and_says_how_to_remove_it():
    from kit.startup.up import keep_reason, launch_nodes

    confirmed = UpResult(
        "tiny", "i", "kit-tiny-1", "hung", 4, rests_on="stacks and counters (...)", evidence_complete=True
    )
    assert keep_reason(confirmed) is None
    unconfirmed = UpResult(
        "tiny",
        "i",
        "kit-tiny-1",
        "hung",
        4,
        rests_on="counters only (stacks unreadable: x)",
        evidence_complete=False,
    )
    assert keep_reason(unconfirmed) == (
        "the evidence is not complete (counters only (stacks unreadable: x)): the server is left running to "
        "look at; `kit down kit-tiny-1` removes it"
    )
    paused = UpResult("tiny", "i", "kit-tiny-1", "hung", 4, paused=True, evidence_complete=False)
    assert "never removed" in keep_reason(paused) and "`docker unpause kit-tiny-1`" in keep_reason(paused)
    assert keep_reason(UpResult("tiny", "i", "kit-tiny-1", "crashed", 1)) is None
    assert (launch_nodes(["--nnodes", "2"]), launch_nodes(["--nnodes=3"]), launch_nodes(["--tp", "4"])) == (
        2,
        3,
        1,
    )


def test_a_hang_is_complete_only_with_the_stacks_and_every_counter_it_needs():
    """kit up removes a HUNG server only when the stacks confirm it and the counters that could have
    shown progress were read: a host hiding the writes (no ptrace) or the compilers keeps it, though
    the CPU time was there (the rule before); a CPU run needs no GPU memory, a GPU run does."""
    from kit.logs import ActivitySample
    from kit.logs.counters import readable_counters, unread_for_hang
    from kit.startup.result import Seen, hang_basis

    hung = Hung(None, (), (), (), 30.0, stacks_confirm=True, basis="every rank idle ...")
    running = (("TP0", 11, "sleeping"),)
    every = dict(cpu_seconds=1.0, read_bytes=0, net_rx_bytes=0, compile_bytes=0, compilers=0)
    cpu_run = readable_counters(ActivitySample(0.0, **every, rank_processes=running))
    seen = Seen("kit-tiny-1")
    assert hang_basis(hung, unread_for_hang(cpu_run, gpu=False), seen) == (
        "stacks and counters (every rank idle ...)",
        True,
    )
    no_writes = readable_counters(
        ActivitySample(0.0, **{**every, "compile_bytes": None, "compilers": None}, rank_processes=running)
    )
    rests_on, complete = hang_basis(hung, unread_for_hang(no_writes, gpu=False), seen)
    assert not complete and rests_on.endswith("; counters not readable here: writes, compilers")
    assert unread_for_hang(cpu_run, gpu=True) == ("gpu memory",)
    assert unread_for_hang(None, gpu=False) == ("every counter: no sample was taken",)
    assert hang_basis(hung, (), Seen("kit-tiny-1", paused_for_s=3.0))[1] is False
    # The server's own word (a proxy taking the warm-up, probes unanswered while serving) needs no
    # stacks and no counters; a paused container is kept all the same.
    said = Hung(None, (), (), (), 30.0, conclusive="a proxy for loopback")
    assert hang_basis(said, ("writes",), seen) == ("the server's own word (a proxy for loopback)", True)
    assert hang_basis(said, (), Seen("kit-tiny-1", paused_for_s=3.0))[1] is False


def test_a_paused_hang_and_a_first_failure_are_the_headline():
    paused = UpResult("tiny", "i", "kit-tiny-1", "hung", 4, phase="warmup", quiet_for_s=20, paused=True)
    assert verdict_lines(paused)[0] == (
        "HUNG in warmup: the container is paused (docker pause): nothing in it ran for 20 s; "
        "`docker unpause kit-tiny-1` resumes it"
    )
    oom = UpResult(
        "tiny",
        "i",
        "c",
        "crashed",
        1,
        phase="warmup",
        exception="Connection closed by peer",
        first_failure="TP1 (pid 7) was killed by the kernel's OOM killer first",
        consequences=("TP0: RuntimeError: Connection closed by peer",),
    )
    lines = verdict_lines(oom)
    assert lines[0] == "CRASHED in warmup: TP1 (pid 7) was killed by the kernel's OOM killer first"
    assert lines[1:3] == [
        "  then (consequences of the first failure, not causes):",
        "    TP0: RuntimeError: Connection closed by peer",
    ]
