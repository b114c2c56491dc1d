"""SGLang's soft watchdog on the real CPU rehearsal: `kit up tiny --set
env.SGLANG_TEST_STUCK_SCHEDULER_INIT=100` with the soft watchdog the kit renders (60 s, tiny's
longest stall window). Both schedulers sleep in Scheduler.__init__ (sglang 0.5.23
srt/managers/scheduler.py:571); the TokenizerManager's watchdog fires too, every 60 s, while it
waits for them. The log (tests/fixtures/soft-watchdog/) is that run's `docker logs`."""

from __future__ import annotations

from pathlib import Path

from kit.logs import Note, parse_text
from kit.logs.soft_watchdog import SoftWatchdogReader

LOG = (Path(__file__).parents[1] / "fixtures" / "soft-watchdog" / "tiny-stuck-scheduler-init.log").read_text()


def test_the_soft_watchdog_lines_are_its_own_and_say_where_each_rank_sleeps():
    reader = SoftWatchdogReader()
    lines = LOG.splitlines()
    theirs = [line for line in lines if reader.feed(line)]
    # Every dump line and timeout line, nothing of the start-up before them.
    assert not any("Load weight" in line or "KV Cache" in line or "server_args" in line for line in theirs)
    assert sum("watchdog timeout" in line for line in theirs) == 4
    assert all(line in theirs for line in lines if "Scheduler.__init__ (scheduler.py:571)" in line)
    assert [d.rank for d in reader.dumps] == [None, "TP0", "TP1", None]
    assert [d.watchdog for d in reader.dumps] == [
        "TokenizerManager",
        "Scheduler",
        "Scheduler",
        "TokenizerManager",
    ]
    said = reader.lines()
    assert said[0] == "SGLang's soft watchdog fired 4 time(s) after 60 s without progress"
    assert any(
        line.startswith("  its py-spy dump of TP0 (pid 12): Scheduler.__init__ (scheduler.py:571)")
        for line in said
    )
    assert any(line.startswith("  its py-spy dump of TP1 (pid 13): Scheduler.__init__") for line in said)
    assert any("TokenizerManager (pid 7): _PollLikeSelector.select" in line for line in said)


def test_a_hard_watchdog_is_not_the_soft_ones_and_no_report_says_nothing():
    reader = SoftWatchdogReader()
    assert not reader.feed(
        "[2026-12-05 01:05:20 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"
    )
    assert not reader.feed("[2026-12-05 01:05:20 TP0] Load weight end. elapsed=0.03 s")
    assert reader.lines() == ()


def test_kit_analyze_reads_every_soft_timeout_line():
    """The scheduler's through the serving block's `stall` pattern (it comes first in patterns.toml),
    the TokenizerManager's through the soft-watchdog block."""
    events = [e for e in parse_text(LOG) if "watchdog timeout" in e.text]
    assert len(events) == 4
    ours = [e for e in events if e.note is Note.SOFT_WATCHDOG]
    assert [e.fields for e in ours] == [{"watchdog": "TokenizerManager", "timeout_s": 60.0}] * 2
    assert {e.rank_label for e in events if e.note is Note.SERVING} == {"TP0", "TP1"}


class _Scripted:
    """A Source that writes the rehearsal's lines at the given times and measures nothing."""

    name, started_at, base_url = "scripted", 0.0, None

    def __init__(self, timed: list[tuple[float, str]]):
        self.now, self._timed = 0.0, list(timed)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def read(self):
        due = [(t, line) for t, line in self._timed if t <= self.now]
        self._timed = self._timed[len(due) :]
        return due

    def sample(self, t):
        return None

    def state(self):
        from kit.runtime.source import SourceState

        return SourceState(running=True)

    def drain(self, timeout_s):
        return []

    def environment(self):
        return None


def test_the_watchdogs_dumps_never_keep_a_stuck_start_alive():
    """The rehearsal's own lines up to the memory pool, then what the stuck schedulers printed: only
    the soft watchdog's dumps. HUNG comes one stall window after the last start-up line, in the stage
    the schedulers sleep in; their dumps did not reset the window (before: READY after 151 s)."""
    from kit.launch import resolve
    from kit.logs import Hung
    from kit.logs.limits import limits_from_spec
    from kit.startup.watch import Watcher

    lines = [line for line in LOG.splitlines() if line.strip()]  # as a source splits them (no blanks)
    pool = max(i for i, line in enumerate(lines) if "max_total_num_tokens=" in line)
    last = max(i for i, line in enumerate(lines) if "watchdog timeout" in line)  # the sleep ends after it
    timed = [(1.0, line) for line in lines[: pool + 1]]
    timed += [(20.0 + i * 0.01, line) for i, line in enumerate(lines[pool + 1 : last + 1])]
    limits = limits_from_spec(resolve("tiny"))
    watcher = Watcher(_Scripted(timed), limits)
    verdict = watcher.run(poll_s=0.5)
    window = limits.stall_window_s.of(watcher.tracker.stage)
    assert isinstance(verdict, Hung) and watcher.tracker.stage == "capture"
    assert 1.0 + window <= watcher.source.now <= 1.0 + window + 1.0
    assert watcher.soft_watchdog.lines()[0].startswith("SGLang's soft watchdog fired 4 time(s)")
