"""Likely causes of a serving HUNG / CRASHED (after READY). Start-up causes name their phases, so
a serving verdict with no evidence offers the serving causes alone; SGLang's own serving lines (its
0.5.23 wheel: srt/utils/watchdog.py, srt/managers/scheduler.py) and torch's NCCL watchdog line
(https://github.com/sgl-project/sglang/issues/3932) name theirs. Pure: the result's own
causes_for over a tracker fed the real lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.logs import Crashed, Hung, Phase, PhaseLimits, Tracker, parse_text
from kit.logs.causes import default_causes, match_causes
from kit.logs.stacks import classify_stack
from kit.startup.result import causes_for

STACKS = Path(__file__).parents[1] / "fixtures" / "stacks"
READY_LOG = """\
[2026-12-05 01:00:00 TP0] Init parallel begin.
[2026-12-05 01:00:00 TP1] Init parallel begin.
[2026-12-05 01:00:05] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)
[2026-12-05 01:00:09] The server is fired up and ready to roll!
[2026-12-05 01:00:20 TP0] Decode batch, #running-req: 3, #token: 310, token usage: 0.01, \
gen throughput (token/s): 41.2, #queue-req: 0
"""
# The formats of SGLang 0.5.23 (srt/utils/watchdog.py: f"{debug_name} watchdog timeout
# ({self.watchdog_timeout=}, {self.soft=})"; srt/managers/scheduler.py: "Scheduler hit an
# exception: {traceback}") and torch's ProcessGroupNCCL watchdog, as pasted in sglang#3932.
WATCHDOG = "[2026-12-05 01:05:20 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"
NCCL_WATCHDOG = (
    "[rank1]:[E304 12:54:52.122900428 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=151721, OpType=ALLREDUCE, NumelIn=8080, NumelOut=8080, "
    "Timeout(ms)=600000) ran for 600049 milliseconds before timing out."
)
SCHEDULER_OOM = """\
[2026-12-05 01:06:00 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 3120, \
in run_scheduler_process
    scheduler.event_loop_overlap()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total \
capacity of 94.97 GiB of which 1.02 GiB is free.
"""


def _serving_tracker(extra: str = "") -> Tracker:
    tracker = Tracker.start(PhaseLimits(expected_ranks=2), 0.0)
    for line in (READY_LOG + extra).splitlines():
        tracker = tracker.observe_line(1.0, line)
    return tracker


def _hung(tracker: Tracker) -> Hung:
    return Hung(phase=Phase.SERVING, stuck_ranks=("TP1",), missing_ranks=(), evidence=(), quiet_for_s=20)


def _ids(rows) -> list[str]:
    return [row.id for row in rows]


def test_a_serving_hang_without_evidence_offers_serving_causes_only():
    tracker = _serving_tracker()
    for device in ("cuda", "cpu"):
        ids = _ids(causes_for(_hung(tracker), tracker, {}, device))
        assert ids and ids[0] == "serving-collective-stuck", ids
        assert all(i.startswith("serving-") for i in ids), ids  # no rendezvous or load cause


def test_the_stacks_of_a_serving_hang_make_the_collective_cause_evidence():
    tracker = _serving_tracker()
    # TP0 waits in all_reduce (a real py-spy dump of the rehearsal); TP1, the stopped one, has none.
    stacks = {"TP0": classify_stack("TP0", (STACKS / "hang-collective-11.txt").read_text(), 11)}
    [first, *_] = causes_for(_hung(tracker), tracker, stacks, "cuda")
    assert _ids([first]) == ["serving-collective-stuck"] and not first.generic
    assert "collective" in first.evidence


@pytest.mark.parametrize("line", [WATCHDOG, NCCL_WATCHDOG], ids=["sglang-watchdog", "nccl-watchdog"])
def test_a_watchdog_crash_while_serving_names_the_stuck_collective(line):
    tracker = _serving_tracker(line + "\n")
    verdict = Crashed(phase=Phase.SERVING, evidence=(line,), exception=line, rank="TP0")
    [first, *_] = causes_for(verdict, tracker, {}, "cuda")
    assert _ids([first]) == ["serving-collective-stuck"] and not first.generic


def test_a_scheduler_oom_while_serving_is_out_of_memory_first_then_the_exception():
    tracker = _serving_tracker(SCHEDULER_OOM)
    events = [e for e in parse_text(READY_LOG + SCHEDULER_OOM) if e.fields.get("exception")]
    exception = str(events[-1].fields["exception"]) if events else SCHEDULER_OOM
    verdict = Crashed(phase=Phase.SERVING, evidence=(), exception=exception, rank="TP1")
    ids = _ids(causes_for(verdict, tracker, {}, "cuda"))
    assert ids[:2] == ["serving-oom", "serving-scheduler-exception"], ids
    assert "serving-oom" not in _ids(causes_for(verdict, tracker, {}, "cpu"))  # a CUDA cause


def test_no_start_up_cause_is_offered_for_serving_on_no_evidence():
    for cause in default_causes().causes:
        if cause.phases is not None and "serving" not in cause.phases:
            for outcome in ("hung", "crashed"):
                offered = match_causes(outcome, Phase.SERVING, "", device="cuda", limit=99)
                assert cause.id not in {m.cause.id for m in offered}


def test_quiet_ranks_while_serving_wait_in_a_collective_not_a_rendezvous():
    # What the CPU rehearsal's stopped rank showed (tests/startup/test_serving_docker.py): the
    # other ranks quiet in gloo's broadcast of requests, which once ranked the rendezvous first.
    for activity in ("quiet", "spinning"):
        offered = match_causes("hung", Phase.SERVING, f"activity={activity}", activity=activity)
        assert offered[0].cause.id == "serving-collective-stuck", offered
        assert f"activity={activity}" in offered[0].evidence
        assert "rendezvous-timeout" not in {m.cause.id for m in offered}
    before = match_causes("hung", Phase.INIT, "activity=quiet", activity="quiet")
    assert "rendezvous-timeout" in {m.cause.id for m in before}  # at start-up it still fits
