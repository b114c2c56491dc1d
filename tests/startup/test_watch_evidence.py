"""The watch reads the engine's state, the cgroup and the stacks on its own clock (kit/startup/watch.py):
a paused container is said at once and its frozen compiler is no progress; stacks are sampled only
while a stage is quiet, at most every 10 s; a working stack keeps a quiet start alive, idle stacks
confirm a hang; a rank gone between two samples ends the start at once. Over the real 0.5.23
rehearsal log, replayed up to the warm-up by a small source whose clock is the test's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kit.logs import ActivitySample, Crashed, Hung, PhaseLimits
from kit.logs.activity import CgroupReading
from kit.runtime.source import ProcessStack, SourceState
from kit.startup.watch import Watcher

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "kit-logs" / "sglang-0.5.23-cpu-tiny-tp2-ready.log"
LINES = LOG.read_text(encoding="utf-8").splitlines()
WARMUP = next(i for i, line in enumerate(LINES) if "Uvicorn running" in line) + 1
STACKS = Path(__file__).resolve().parents[1] / "fixtures" / "stacks"
COMPILE = (STACKS / "warmup-compile-TP0.txt").read_text()
COLLECTIVE = (STACKS / "hang-collective-11.txt").read_text()
WINDOW = 20.0


class Server:
    """The log up to the warm-up at t=0, then whatever the test sets: paused, a compiler alive, ranks'
    stacks and states. Counts the stack dumps it was asked for."""

    name = "kit-tiny-test"
    started_at = 0.0
    base_url = None

    def __init__(self):
        self.pending = [(0.0, line) for line in LINES[:WARMUP]]
        self.now = 0.0
        self.paused = False
        self.compilers = 0  # what the counters see
        self.children: tuple[str, ...] = ()  # compiler children the stacks' adapter names
        self.stacks_text = {"TP0": COLLECTIVE, "TP1": COLLECTIVE}
        self.states = {"TP0": "sleeping", "TP1": "sleeping"}
        self.dumps: list[float] = []
        self.cpu_rate = 0.0  # cores the server's processes use
        self.restart_policy: str | None = None  # the container's (docker's words)
        self.sample_s = 0.0  # how long reading the counters takes (docker stats: about a second)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def read(self):
        taken, self.pending = self.pending, []
        return taken

    def sample(self, t):
        self.now += self.sample_s
        return ActivitySample(
            t=t,
            cpu_seconds=1.0 + self.cpu_rate * t,
            read_bytes=0,
            compilers=self.compilers,
            rank_processes=tuple(
                (rank, 100 + i, state) for i, (rank, state) in enumerate(sorted(self.states.items()))
            ),
            cgroup=CgroupReading(oom_kill=0, frozen=self.paused, where="freezer/docker/test"),
        )

    def state(self) -> SourceState:
        return SourceState(running=True, paused=self.paused, restart_policy=self.restart_policy)

    def drain(self, timeout_s):
        return []

    def stacks(self, want=lambda title: True, *, nonblocking=False):
        assert nonblocking  # samples never suspend what they watch
        self.dumps.append(self.now)
        held = "frozen" if self.paused else None
        return [
            ProcessStack(
                100 + i,
                f"sglang::scheduler_{rank}",
                text,
                held or self.states[rank],
                self.children,
            )
            for i, (rank, text) in enumerate(sorted(self.stacks_text.items()))
        ]

    def log_text(self) -> str:
        return ""

    def http_transport(self):
        return None

    def environment(self):
        return {}


def _limits(window: float = WINDOW) -> PhaseLimits:
    base = PhaseLimits(expected_ranks=2)
    return replace(base, stall_window_s=replace(base.stall_window_s, warmup=window))


def watch(server: Server, until: float, change=None, window: float = WINDOW):
    watcher = Watcher(server, _limits(window))
    seen = []
    while server.now < until:
        if change is not None:
            change(server)
        progress, verdict = watcher.step()
        seen.append(progress)
        if verdict is not None:
            return watcher, verdict, seen
        server.sleep(0.5)
    return watcher, None, seen


def test_a_pause_is_said_within_one_sample_and_a_frozen_compiler_is_no_progress():
    def pause_at_3(server: Server) -> None:
        server.paused = server.now >= 3.0

    server = Server()
    server.compilers, server.children = 1, ("cc1plus",)
    server.stacks_text = {"TP0": COMPILE, "TP1": COMPILE}
    watcher, verdict, seen = watch(server, 60, pause_at_3)
    said = next(p for p in seen if p.paused_since is not None)
    assert said.now - 3.0 <= 2.5
    assert isinstance(verdict, Hung)
    assert verdict.quiet_for_s <= WINDOW + 5  # the last progress was the log's end at t=0
    held = watcher.tracker.stack_samples[-1].ranks
    assert {s.held for s in held} == {"frozen"} and not any(s.working for s in held)


def test_stacks_are_sampled_only_while_quiet_and_at_most_every_10_s():
    server = Server()
    watch(server, 60)
    assert server.dumps, "no stack was sampled"
    assert server.dumps[0] >= WINDOW - 12.0  # the first 12 s before the window ends
    assert all(b - a >= 10.0 for a, b in zip(server.dumps, server.dumps[1:], strict=False))


def test_idle_stacks_in_two_samples_confirm_the_hang_within_the_window_and_5_s():
    server = Server()
    _, verdict, _ = watch(server, 60)
    assert isinstance(verdict, Hung) and verdict.stacks_confirm, verdict
    assert server.now <= WINDOW + 5
    assert verdict.basis.startswith("every rank idle at the same place in two samples 10 s apart")


@pytest.mark.parametrize("window", [10.0, 13.0, 20.0, 45.0])
def test_any_stall_window_of_10_s_or_more_gets_two_stack_samples_and_a_confirmed_hang_within_it_and_5_s(
    window,
):
    """A short window (`--stall load=10`) too: the second sample, due 10 s after the first, is taken
    on the watch's step (never missed between two counter samples) while the verdict is held."""
    server = Server()
    server.sample_s = 0.7  # the counters' cadence drifts off the stacks' due time, as on a real engine
    _, verdict, _ = watch(server, window + 30, window=window)
    assert isinstance(verdict, Hung) and verdict.stacks_confirm, verdict
    gaps = [b - a for a, b in zip(server.dumps, server.dumps[1:], strict=False)]
    assert len(server.dumps) >= 2 and min(gaps) >= 10.0, server.dumps
    assert server.now <= window + 5


def test_a_window_too_short_for_two_samples_is_hung_on_the_counters_and_says_so():
    server = Server()
    _, verdict, _ = watch(server, 40, window=6.0)
    assert isinstance(verdict, Hung) and not verdict.stacks_confirm, verdict
    assert verdict.basis == "only one readable stack sample before the window ended"


def test_a_loader_while_no_counter_moves_is_hung_on_its_stacks_one_using_cpu_is_not():
    loader = (STACKS / "load-TP0.txt").read_text()
    server = Server()
    server.stacks_text = {"TP0": loader, "TP1": loader.replace("TP0", "TP1")}
    _, verdict, _ = watch(server, 60)
    assert isinstance(verdict, Hung) and verdict.stacks_confirm, verdict
    assert "standing, no counter moving, at: loading weights" in verdict.basis
    assert server.now <= WINDOW + 5
    server = Server()
    server.stacks_text = {"TP0": loader, "TP1": loader.replace("TP0", "TP1")}
    server.cpu_rate = 0.5  # copying weights: alive (CPU is no progress in warm-up, the place is)
    _, verdict, _ = watch(server, 90)
    assert verdict is None, verdict


def test_a_working_stack_keeps_a_quiet_start_alive_and_unreadable_stacks_leave_it_to_the_counters():
    server = Server()  # the counters blind to the compiler (as to Triton's ptxas-blackwell)
    server.children, server.stacks_text = ("cc1plus",), {"TP0": COMPILE, "TP1": COLLECTIVE}
    _, verdict, seen = watch(server, 90)
    assert verdict is None, verdict  # 90 s without a line: the compile's stack is its progress
    working = [p.stacks for p in seen if p.stacks is not None]
    assert working and working[-1].working()[0].describe().startswith(
        "TP0 compiling: inductor compile, cc1plus"
    )
    server = Server()
    server.stacks_text = {"TP0": "(py-spy dump failed: Permission denied)", "TP1": COLLECTIVE}
    _, verdict, _ = watch(server, 60)
    assert isinstance(verdict, Hung) and not verdict.stacks_confirm
    assert verdict.basis.startswith("stacks unreadable: TP0: (py-spy dump failed: Permission denied)")


def test_a_rank_gone_between_two_samples_ends_the_start_crashed_at_once():
    def kill_tp1_at_5(server: Server) -> None:
        if server.now >= 5.0:
            server.states.pop("TP1", None)

    server = Server()
    _, verdict, _ = watch(server, 60, kill_tp1_at_5)
    assert isinstance(verdict, Crashed) and verdict.rank == "TP1", verdict
    assert server.now - 5.0 <= 2.5


def test_a_rank_gone_under_a_restart_policy_is_held_for_the_supervisor_not_judged_at_once():
    """With on-failure, the next attempt decides: a rank gone is held like a fatal line (judged at
    once, it raced the engine's restart and ended the watch on attempt 1)."""

    def kill_tp1_at_5(server: Server) -> None:
        if server.now >= 5.0:
            server.states.pop("TP1", None)
            server.stacks_text.pop("TP1", None)

    server = Server()
    server.restart_policy = "on-failure"
    _, verdict, _ = watch(server, 15, kill_tp1_at_5)  # before the warm-up window (20 s) could end it
    assert verdict is None, verdict


def test_a_hung_start_keeps_both_stack_samples_in_the_result_and_the_bundle(tmp_path, monkeypatch):
    """SGLang's own injector for a scheduler stuck in init (SGLANG_TEST_STUCK_SCHEDULER_INIT: a sleep
    in Scheduler.__init__, sglang 0.5.23 srt/managers/scheduler.py) as py-spy shows it: both ranks
    *sleeping* in two samples; the verdict names them so, and the bundle holds both samples' dumps,
    which `kit bundle show` lists."""
    from kit.diagnose.bundle import read_bundle
    from kit.diagnose.show import bundle_view
    from kit.launch import resolve
    from kit.startup.result import verdict_lines
    from kit.startup.up import follow_source

    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    sleeping = (STACKS / "stuck-init-TP0.txt").read_text()
    server = Server()
    server.stacks_text = {"TP0": sleeping, "TP1": sleeping.replace("scheduler_TP0", "scheduler_TP1")}
    result = follow_source(
        server, resolve("tiny"), _limits(), session="stack-samples-test", first_token=False
    )
    assert result.verdict == "hung" and result.rests_on.startswith("stacks and counters"), result.rests_on
    assert {(s.rank, s.state) for s in result.stacks} == {("TP0", "sleeping"), ("TP1", "sleeping")}
    said = verdict_lines(result)
    assert "  stuck in warmup: TP0 (sleeping), TP1 (sleeping)" in said, said
    assert "  stack TP0: sleeping: other (__init__ <- run_scheduler_process <- run)" in said
    assert [(s.number, [r.state for r in s.ranks]) for s in result.stack_samples] == [
        (1, ["sleeping", "sleeping"]),
        (2, ["sleeping", "sleeping"]),
    ]
    assert result.stack_samples[1].t_s - result.stack_samples[0].t_s >= 10
    members = read_bundle(result.bundle).members
    prefix = "stacks/"
    for name in ("TP0.sample1", "TP0.sample2", "TP1.sample1", "TP1.sample2", "TP0", "TP1"):
        assert f"{prefix}{name}.txt" in members, sorted(members)
    assert "scheduler_TP1" in members[f"{prefix}TP1.sample2.txt"].decode()
    shown = bundle_view(result.bundle).summary
    assert "Stack samples the verdict rests on (stacks/RANK.sampleN.txt):" in shown
    assert "- sample 2 at " in shown and "TP1 sleeping: `__init__ <- run_scheduler_process <- run`" in shown
