"""Planted failures on the real CPU rehearsal: each names its true cause first, with its evidence,
on time (issues 35 and 36).

Each test starts `kit up tiny --json` (two ranks), does one thing to the running server from the
host, and asserts the verdict, how long after the deed it came (monotonic clock, measured), the
first likely cause and the evidence it names, and what was left running:

- paused (`docker pause`) in launch, and in load while a real compiler child is alive: PAUSED said
  within 5 s, HUNG with "paused" first within the stall window + 5 s, never removed;
- one rank killed by the kernel's OOM killer (a memory limit set with `docker update`, the rehearsal's
  `oom` fault): CRASHED within 5 s of the kernel's kill with the OOM as the headline, the peer's
  errors as consequences; the launcher OOM-killed: the whole container OOMKilled, the OOM first;
- SIGKILL to the main process, and to one rank, after READY (`--serve`): CRASHED, a signal first;
- SIGSTOP to one rank in warm-up: HUNG naming the stopped rank, the stacks confirming it;
- a quiet compile in a real compiler child (`compile-hold`): never HUNG, named as compiling (the
  watch is stopped once the start is past it).

No cause needing several nodes, a GPU or a proxy is offered on any of them.
"""

from __future__ import annotations

import signal
import time

import pytest
from planted import Run, Server, kernel_kill_time, plant

from kit.logs.causes import default_causes

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# Causes whose preconditions a single-node CPU run without a proxy lacks: every cause in the book that
# `needs` several nodes, a GPU or a proxy (kit/logs/causes.toml), read from the book, not listed here.
NOT_HERE = frozenset(cause.id for cause in default_causes().causes if cause.needs)


def cause_ids(run: Run) -> list[str]:
    return [c["id"] for c in run.result["likely_causes"]]


def assert_single_node_cpu(run: Run) -> None:
    offered = set(cause_ids(run)) & NOT_HERE
    assert not offered, f"causes needing several nodes, a GPU or a proxy: {offered}"


def tiny(faults_image, *extra: str) -> tuple[list[str], dict]:
    return ["up", "tiny", "--image", faults_image.image, *extra], faults_image.env()


def once(deed):
    """An act that does `deed(server)` the first time `when(line)` holds."""

    def act_when(when):
        done: list[bool] = []

        def act(server: Server, line: dict) -> None:
            if not done and when(line):
                done.append(True)
                deed(server)

        return act

    return act_when


def milestone(name: str):
    return lambda line: line.get("type") == "milestone" and line.get("milestone") == name


def test_a_container_paused_in_launch_is_named_at_once_hung_paused_first_and_never_removed(
    faults_image, new_servers
):
    args, env = tiny(faults_image, "--stall", "launch=12")
    started = []

    def act(server: Server, line: dict) -> None:
        if line.get("type") == "start":
            started.append(time.monotonic())
        elif not server.done and started and time.monotonic() - started[0] > 4:
            server.pause()

    run = plant(args, act, env=env)
    result, paused_at = run.result, run.server.done["paused"]
    assert (run.code, result["verdict"], result["paused"]) == (4, "hung", True), run.brief()
    assert run.at("paused") - paused_at < 5
    assert run.first("paused")[1]["command"] == f"docker unpause {run.server.name}"
    assert run.result_at - paused_at < 12 + 5  # the stall window + 5 s
    assert cause_ids(run)[0] == "container-paused", run.brief()
    first = result["likely_causes"][0]
    assert any("Paused" in line for line in first["evidence"]) and any(
        "frozen" in line for line in first["evidence"]
    )
    assert not result["container_removed"] and "docker unpause" in result["kept"]
    [server] = new_servers()
    server.reload()
    assert server.status == "paused"  # left as it was: never removed, never unpaused by the kit
    assert_single_node_cpu(run)


def test_a_container_paused_with_a_compiler_child_alive_is_hung_paused_first_not_still_moving(
    faults_image, new_servers
):
    # compile-hold: TP1 holds a real gcc/cc1 child (idle, fed through a FIFO) after loading; pause then.
    # TP0 prints its load's end and waits at the barrier, so the stage is memory by then.
    args, env = tiny(
        faults_image,
        "--fault",
        "compile-hold:rank=1,seconds=60",
        "--stall",
        "load=12",
        "--stall",
        "memory=12",
    )
    compiling: list[bool] = []

    def act(server: Server, line: dict) -> None:
        if server.done:
            return
        if (line.get("type") == "milestone" and line.get("milestone") == "load.begin") or compiling:
            compiling.append(True)
            if server.compilers():
                server.pause()

    run = plant(args, act, env=env)
    result, paused_at = run.result, run.server.done["paused"]
    assert (run.code, result["verdict"], cause_ids(run)[0]) == (4, "hung", "container-paused"), run.brief()
    assert run.at("paused") - paused_at < 5
    assert run.result_at - paused_at < 12 + 5
    assert "compile-running" not in cause_ids(run)  # a frozen compiler is no progress and no cause
    tp1 = next(s for s in result["stacks"] if s["rank"] == "TP1")
    assert tp1["held"] == "frozen", result["stacks"]
    assert not result["container_removed"]
    assert_single_node_cpu(run)


def oom_at_http_up(victim):
    """An act: at HTTP up, note the victim's pid (`victim(server)`), cap the container's memory a
    little above what it uses, and arm the oom fault. The pid is in the returned dict."""
    pids: dict[str, int] = {}

    def act(server: Server, line: dict) -> None:
        if milestone("http.up")(line) and not server.done:
            pids["victim"] = victim(server)
            server.limit_memory(400 << 20)
            server.go()

    return act, pids


def test_one_rank_killed_by_the_oom_killer_is_crashed_within_5_s_with_the_oom_as_headline(
    faults_image, new_servers
):
    args, env = tiny(faults_image, "--fault", "oom:rank=1")
    act, killed = oom_at_http_up(lambda server: server.rank_pid("TP1"))
    run = plant(args, act, env=env)
    result = run.result
    pids = {"TP1": killed["victim"]}
    assert (run.code, result["verdict"]) == (1, "crashed"), run.brief()
    killed_at = kernel_kill_time(pids["TP1"])
    assert killed_at is not None, "the kernel's log has no OOM kill of TP1"
    assert run.result_at - killed_at < 5, f"CRASHED {run.result_at - killed_at:.1f} s after the kill"
    assert result["first_failure"] == f"TP1 (pid {pids['TP1']}) was killed by the kernel's OOM killer first"
    first = result["likely_causes"][0]
    assert first["id"] == "host-oom", run.brief()
    assert any(f"Killed process {pids['TP1']} (sglang::schedul)" in line for line in first["evidence"])
    assert any("oom_kill 1" in line for line in first["evidence"])
    assert result["container_removed"] and not new_servers()
    assert_single_node_cpu(run)


def test_the_launcher_oom_killed_takes_the_whole_container_and_the_oom_is_first(faults_image, new_servers):
    args, env = tiny(faults_image, "--fault", "oom:rank=main")
    act, killed = oom_at_http_up(lambda server: server.launcher_pid())
    run = plant(args, act, env=env)
    result = run.result
    pids = {"main": killed["victim"]}
    assert (run.code, result["verdict"]) == (1, "crashed"), run.brief()
    killed_at = kernel_kill_time(pids["main"])
    assert killed_at is not None and run.result_at - killed_at < 5, run.brief()
    main = f"the server's main process (pid {pids['main']}) was killed by the kernel's OOM killer first"
    assert result["first_failure"] == main
    first = result["likely_causes"][0]
    assert first["id"] == "host-oom", run.brief()
    assert any(f"Killed process {pids['main']} (python)" in line for line in first["evidence"])
    assert_single_node_cpu(run)


def test_sigkill_of_the_main_process_after_ready_is_crashed_with_the_signal_first(faults_image, new_servers):
    args, env = tiny(faults_image, "--serve")

    def kill(server: Server) -> None:
        server.signal(server.launcher_pid(), signal.SIGKILL, "killed")

    run = plant(args, once(kill)(lambda line: line.get("type") == "serving"), env=env)
    result = run.result
    assert (run.code, result["verdict"]) == (1, "crashed"), run.brief()
    assert run.result_at - run.server.done["killed"] < 5
    assert cause_ids(run)[0] == "killed-by-signal", run.brief()
    assert any("137" in line for line in result["likely_causes"][0]["evidence"])
    assert "host-oom" not in cause_ids(run)  # no OOM kill was counted
    assert_single_node_cpu(run)


def test_sigkill_of_one_rank_after_ready_is_crashed_and_says_the_rank_and_the_signal(
    faults_image, new_servers
):
    args, env = tiny(faults_image, "--serve")

    def kill(server: Server) -> None:
        server.signal(server.rank_pid("TP1"), signal.SIGKILL, "killed")

    run = plant(args, once(kill)(lambda line: line.get("type") == "serving"), env=env)
    result = run.result
    assert (run.code, result["verdict"]) == (1, "crashed"), run.brief()
    # SGLang's watchdog polls its children every second, then ends the server (SIGQUIT); the serving
    # watch sees the container go.
    assert run.result_at - run.server.done["killed"] < 10
    # Two races decide what is there to see. SGLang's watchdog polls its children every second and
    # says "Subprocess scheduler_1 ... crashed with exit code -9" (or a sample sees TP1 a zombie killed
    # by SIGKILL): then the signal is first, with TP1, and TP0's errors against its dead peer follow.
    # TP0's next gloo call may fail first and SGLang ends itself (its SIGQUIT handler SIGKILLs its
    # own main process: the container's 137 is that, no outside kill): then the peer's death is first
    # and no signal is claimed.
    direct = result["direct_evidence"]
    said_sigkill = [line for line in direct if "TP1" in line and "SIGKILL" in line]
    if said_sigkill:
        assert cause_ids(run)[:2] == ["killed-by-signal", "peer-died"], run.brief()
        assert result["first_failure"].startswith("TP1") and "SIGKILL" in result["first_failure"], run.brief()
    else:
        assert cause_ids(run)[0] == "peer-died" and "killed-by-signal" not in cause_ids(run), run.brief()
        assert any("SGLang ended itself with SIGKILL" in line for line in direct), run.brief()
    assert_single_node_cpu(run)


def test_a_rank_stopped_in_warmup_is_hung_naming_it_with_the_stacks_confirming(faults_image, new_servers):
    args, env = tiny(faults_image, "--stall", "warmup=12")

    def stop(server: Server) -> None:
        server.signal(server.rank_pid("TP1"), signal.SIGSTOP, "stopped")

    run = plant(args, once(stop)(milestone("http.up")), env=env)
    result = run.result
    assert (run.code, result["verdict"], result["phase"]) == (4, "hung", "warmup"), run.brief()
    assert run.result_at - run.server.done["stopped"] < 12 + 5
    first = result["likely_causes"][0]
    assert first["id"] == "rank-stopped" and any(
        "TP1" in line and "stopped" in line for line in first["evidence"]
    )
    assert result["missing_ranks"] == ["TP1"] and result["waiting_ranks"] == ["TP0"], run.brief()
    assert result["rests_on"].startswith("stacks and counters"), result["rests_on"]
    assert result["container_removed"]  # the evidence was complete: stacks read, counters readable
    assert_single_node_cpu(run)


def test_a_long_quiet_compile_in_a_real_compiler_child_is_never_hung_and_is_named_compiling(
    faults_image, new_servers
):
    # The compiler (cc1 under gcc, fed through a FIFO) idles 20 s, past the 8 s load and memory
    # windows (TP0 is in memory by then): no line,
    # no CPU, no write; only the stacks see the work.
    args, env = tiny(
        faults_image,
        "--fault",
        "compile-hold:rank=1,seconds=25",
        "--stall",
        "load=10",
        "--stall",
        "memory=10",
    )
    # Past the compile (the KV cache is allocated) it has shown what it had to: stop there.
    run = plant(args, once(lambda server: server.stop_kit())(milestone("kv.ready")), env=env)
    result = run.result
    assert result["verdict"] == "interrupted", run.brief()  # never HUNG while the compiler worked
    assert result["container_removed"] and not new_servers()
    said = [line for _, line in run.lines if line.get("type") == "stacks"]
    tp1 = [r for line in said for r in line["ranks"] if r["rank"] == "TP1"]
    assert tp1 and tp1[0]["state"] == "working", said
    # The compiler children alive at the sample (gcc's driver and its cc1), named by family.
    assert tp1[0]["what"].startswith("inductor compile, cc1") and tp1[0]["what"].endswith(" child"), said
