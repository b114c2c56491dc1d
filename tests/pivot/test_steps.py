"""The preflight run as data: rank events with arrival times -> step states and a verdict. No Docker."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.pivot.graph_step import CPU_SKIP
from kit.pivot.steps import (
    ALL_STEPS,
    MARK,
    STEPS,
    PreflightRun,
    device_plan,
    nccl_version,
    pair_rows,
    parse_event,
    plan_steps,
    setup_text,
    step_rows,
    transports,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-logs"
CPU = device_plan("cpu")


def line(**event) -> str:
    return MARK + json.dumps(event)


def feed_all(run: PreflightRun, events: list[tuple[float, dict]]) -> None:
    for at, event in events:
        run.feed_line(line(**event), at)


# What the launcher's setup reports (kit/images/inimage/sglang_groups.py's prepare), as seen on 0.5.23.
SETUP = {
    "sglang": "0.5.23",
    "recipe": "bootstrap",
    "server_args": {"disable_custom_all_reduce": False},
    "error": None,
    "settings": {
        "NCCL_DEBUG": {"value": "INFO", "source": "kit"},
        "NCCL_CUMEM_ENABLE": {"value": "0", "source": "sglang", "by": "_set_envs_and_config"},
        "TRITON_CACHE_DIR": {"value": "/root/.cache/sglang/triton", "source": "sglang", "by": "import"},
    },
}


def healthy(world: int = 2, t0: float = 100.0) -> list[tuple[float, dict]]:
    """A run where every rank passes every step, one second per step."""
    events = [(t0 + 0.5, {"ev": "launcher", "python": "3.11.2", "torch": "2.13.0+cpu", "import_s": 1.5})]
    events += [(t0 + 0.6, {"ev": "begin", "rank": -1, "step": "setup"})]
    events += [(t0 + 1.8, {"ev": "end", "rank": -1, "step": "setup", "s": 1.2, "detail": SETUP})]
    events += [(t0 + 2, {"ev": "start", "rank": r, "pid": 10 + r}) for r in range(world)]
    t = t0 + 2
    for step in STEPS:
        events += [(t, {"ev": "begin", "rank": r, "step": step}) for r in range(world)]

        def detail(rank: int, step: str = step) -> dict:
            if step == "init":
                return {"groups": "sglang", "recipe": "bootstrap", "backend": "gloo", "tp_world": world}
            if step == "p2p":
                pairs = [
                    {"src": rank, "dst": peer, "bytes": 1024, "s": 0.001, "gbps": 1.0, "peer_access": None}
                    for peer in range(world)
                    if peer != rank
                ]
                return {"method": "shared-memory", "pairs": pairs}
            if step == "graph":  # what ranks.py's graph step answers on CPU
                return {"skipped": CPU_SKIP}
            return {}

        if step == "sweep":
            events.append(
                (t + 0.5, {"ev": "progress", "rank": 0, "step": "sweep", "bytes": 8, "time_us": 100.0,
                           "algbw_gbps": 8e-5, "busbw_gbps": 8e-5})
            )  # fmt: skip
        t += 1
        events += [
            (t, {"ev": "end", "rank": r, "step": step, "s": 0.9, "detail": detail(r)}) for r in range(world)
        ]
    events += [(t, {"ev": "done", "rank": r}) for r in range(world)]
    return events


def test_a_healthy_run_is_ok_with_a_row_per_step_and_the_sweep():
    run = PreflightRun(2, STEPS, CPU, 100.0)
    feed_all(run, healthy())
    verdict = run.verdict(107.0)
    assert verdict is not None and verdict.verdict == "ok" and verdict.exit_code == 0
    rows = step_rows(run, verdict)
    assert [r.step for r in rows] == list(ALL_STEPS)
    assert {r.step: r.status for r in rows if r.status != "ok"} == {"graph": "skipped"}
    assert rows[4].detail == CPU_SKIP  # skipped, with the reason
    assert rows[0].seconds == 0.5  # launch: container start to the launcher's first line
    assert "torch 2.13.0+cpu" in rows[0].detail
    assert rows[1].seconds == 1.2 and rows[1].detail == (
        "sglang 0.5.23: its arguments and environment (NCCL_CUMEM_ENABLE=0)"
    )  # SGLang's NCCL settings are named; its cache paths are in the JSON only
    assert rows[2].detail == "SGLang's groups (distributed/bootstrap.py::init_parallel_runtime), gloo"
    assert "2 pairs written and checked (shared-memory)" in rows[5].detail
    assert run.setup == SETUP
    assert run.sweep == [{"bytes": 8, "time_us": 100.0, "algbw_gbps": 8e-5, "busbw_gbps": 8e-5}]


def test_a_rank_that_never_joins_init_is_hung_in_init_at_its_deadline_not_before():
    run = PreflightRun(2, STEPS, CPU, 100.0)
    feed_all(
        run,
        [
            (102.0, {"ev": "start", "rank": 0, "pid": 8}),
            (102.1, {"ev": "start", "rank": 1, "pid": 9}),
            (102.2, {"ev": "begin", "rank": 0, "step": "init"}),
            (102.3, {"ev": "begin", "rank": 1, "step": "init"}),
        ],
    )
    deadline = CPU.limit("init").deadline_s  # init reports no progress: silent to its deadline is a hang
    assert run.active_step() == "init"
    assert run.verdict(102.2 + deadline - 0.1) is None  # counted from the first rank's begin
    verdict = run.verdict(102.2 + deadline + 0.001)
    assert verdict.verdict == "hung" and verdict.step == "init" and verdict.exit_code == 4
    assert verdict.ranks == (0, 1)
    rows = step_rows(run, verdict)
    assert [r.status for r in rows] == ["ok", "ok", "hung", "not run", "not run", "not run", "not run"]


def test_a_rank_that_never_starts_is_counted_from_the_container_start():
    run = PreflightRun(2, STEPS, CPU, 100.0)
    run.feed_line(line(ev="start", rank=0, pid=8), 101.0)
    # launch is heard from at 101; its stall window counts from there
    limit = CPU.limit("launch")
    assert run.verdict(101.0 + limit.stall_s - 1) is None
    verdict = run.verdict(101.0 + limit.stall_s)
    assert verdict.verdict == "hung" and verdict.step == "launch" and verdict.ranks == (1,)
    assert run.never_began("init") == (0, 1)


def test_a_sweep_still_reporting_at_its_deadline_is_deadline_not_hung():
    plan = device_plan("cpu", {"sweep": 5})
    run = PreflightRun(1, STEPS, plan, 0.0)
    run.feed_line(line(ev="start", rank=0, pid=1), 1.0)
    for step in ("init", "allreduce", "graph", "p2p"):
        run.feed_line(line(ev="begin", rank=0, step=step), 1.0)
        run.feed_line(line(ev="end", rank=0, step=step, s=0.0), 1.0)
    run.feed_line(line(ev="begin", rank=0, step="sweep"), 1.0)
    for t in range(2, 7):  # a size every second: alive
        run.feed_line(
            line(ev="progress", rank=0, step="sweep", bytes=8, time_us=1, algbw_gbps=0, busbw_gbps=0),
            float(t),
        )
    verdict = run.verdict(6.5)
    assert verdict.verdict == "deadline" and verdict.step == "sweep" and verdict.exit_code == 5


def test_wrong_values_are_failed_and_an_exception_is_crashed_with_the_rank_and_step():
    failed = PreflightRun(2, STEPS, CPU, 0.0)
    failed.feed_line(line(ev="fail", rank=1, step="allreduce", error="3 of 4096 values wrong"), 1.0)
    verdict = failed.verdict(1.0)
    assert (verdict.verdict, verdict.step, verdict.ranks, verdict.exit_code) == (
        "failed",
        "allreduce",
        (1,),
        1,
    )
    assert "values wrong" in verdict.message
    crashed = PreflightRun(2, STEPS, CPU, 0.0)
    crashed.feed_line(line(ev="error", rank=0, step="p2p", error="RuntimeError: boom"), 1.0)
    assert crashed.verdict(1.0).verdict == "crashed"


def test_a_rank_dying_without_a_word_or_the_container_ending_early_is_crashed():
    run = PreflightRun(2, STEPS, CPU, 0.0)
    run.feed_line(line(ev="start", rank=0, pid=1), 1.0)
    run.feed_line(line(ev="exit", rank=1, code=-9), 1.5)
    verdict = run.verdict(1.5)
    assert verdict.verdict == "crashed" and "rank 1 exited with code -9" in verdict.message
    gone = PreflightRun(2, STEPS, CPU, 0.0)
    gone.feed_line("ModuleNotFoundError: No module named 'torch'", 1.0)
    gone.container_exited(1)
    verdict = gone.verdict(1.0)
    assert verdict.verdict == "crashed" and "No module named 'torch'" in verdict.message


def test_the_launchers_setup_counts_for_every_rank_and_hangs_at_its_deadline():
    run = PreflightRun(2, STEPS, CPU, 0.0)
    run.feed_line(line(ev="launcher", python="3.11.2", torch="2.13.0+cpu", import_s=1.0), 1.0)
    run.feed_line(line(ev="begin", rank=-1, step="setup"), 1.1)
    assert run.complete("launch") and run.active_step() == "setup"
    deadline = CPU.limit("setup").deadline_s  # import sglang prints nothing until it is done
    assert run.verdict(1.1 + deadline - 0.1) is None
    verdict = run.verdict(1.1 + deadline + 0.001)
    assert (verdict.verdict, verdict.step, verdict.ranks) == ("hung", "setup", (0, 1))
    assert run.never_began("init") == (0, 1)


def test_without_sglang_the_setup_says_so_and_names_no_sglang_settings():
    text = setup_text({"sglang": None, "error": "sglang is not installed in this image", "settings": {}})
    assert text == "sglang is not installed in this image; the groups are plain torch.distributed"
    assert setup_text({"sglang": "0.5.10.post1", "settings": {}}) == (
        "sglang 0.5.10.post1: its arguments and environment"
    )


def test_until_stops_the_plan_after_that_step():
    assert plan_steps({"steps": list(STEPS), "until": "allreduce"}) == ["init", "allreduce"]
    run = PreflightRun(1, ("init", "allreduce"), CPU, 0.0)
    assert run.steps == ("launch", "setup", "init", "allreduce")
    feed_all(
        run,
        [(1.0, {"ev": "start", "rank": 0, "pid": 1})]
        + [
            (1.0, {"ev": e, "rank": 0, "step": s, "s": 0})
            for s in ("init", "allreduce")
            for e in ("begin", "end")
        ],
    )
    assert run.verdict(1.0).verdict == "ok"


def test_other_lines_are_not_events():
    assert parse_event("NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC") is None
    assert parse_event(MARK + "{not json") is None
    assert parse_event(MARK + '{"no": "ev"}') is None
    assert parse_event("prefix " + MARK + '{"ev": "done", "rank": 0}') == {"ev": "done", "rank": 0}


def test_transports_and_version_come_from_real_nccl_info_lines():
    log = (FIXTURES / "19_dsr1-pd-decode-2node-tp16-hang-init-nccl-v0.5.8.post1.log").read_text()
    run = PreflightRun(2, STEPS, CPU, 0.0)
    for text in log.splitlines():
        run.feed_line(text, 1.0)
    assert {"P2P/IPC", "NET/IB/0/GDRDMA"} <= set(transports(run.nccl_lines))
    assert all("NCCL" in kept for kept in run.nccl_lines)
    assert nccl_version(["x NCCL INFO NCCL version 2.30.7+cuda13.0"]) == "2.30.7+cuda13.0"


def test_pairs_from_every_rank_are_merged_in_order():
    details = {
        1: {"pairs": [{"src": 1, "dst": 0, "bytes": 4, "s": 0.1, "gbps": 2.0, "peer_access": True}]},
        0: {"pairs": [{"src": 0, "dst": 1, "bytes": 4, "s": 0.2, "gbps": 1.0, "peer_access": False}]},
    }
    assert [(p.src, p.dst, p.peer_access) for p in pair_rows(details)] == [(0, 1, False), (1, 0, True)]


def test_deadline_overrides_apply_and_the_stall_never_exceeds_the_deadline():
    plan = device_plan("cuda", {"init": 7})
    assert plan.limit("init").deadline_s == 7 and plan.limit("init").stall_s == 7
    assert plan.limit("sweep").stall_s <= plan.limit("sweep").deadline_s
    assert plan.sweep["max_bytes"] == 128 * 1024 * 1024 and plan.sweep["min_bytes"] == 8


EVENT = st.one_of(
    st.just({"ev": "launcher"}),
    st.builds(lambda e: {"ev": e, "rank": -1, "step": "setup", "s": 0.1}, st.sampled_from(["begin", "end"])),
    st.builds(lambda r: {"ev": "start", "rank": r, "pid": 1}, st.integers(0, 2)),
    st.builds(
        lambda e, r, s: {"ev": e, "rank": r, "step": s, "s": 0.1},
        st.sampled_from(["begin", "end"]),
        st.integers(0, 2),
        st.sampled_from(STEPS),
    ),
    st.builds(lambda r: {"ev": "done", "rank": r}, st.integers(0, 2)),
    st.builds(lambda r, c: {"ev": "exit", "rank": r, "code": c}, st.integers(0, 2), st.integers(-9, 1)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 50), EVENT), max_size=40), st.floats(0, 100))
def test_any_event_order_gives_a_consistent_verdict(events, now):
    run = PreflightRun(3, STEPS, CPU, 0.0)
    for at, event in sorted(events, key=lambda item: item[0]):
        run.feed_line(line(**event), at)
    verdict = run.verdict(max(now, max((a for a, _ in events), default=0.0)))
    rows = step_rows(run, verdict)
    if verdict is None:
        return
    assert (
        verdict.exit_code == {"ok": 0, "failed": 1, "crashed": 1, "hung": 4, "deadline": 5}[verdict.verdict]
    )
    if verdict.verdict == "ok":
        assert run.active_step() is None or len(run.done) >= 3
    elif verdict.verdict in ("hung", "deadline"):
        assert verdict.step == run.active_step()
        assert {r.step: r.status for r in rows}[verdict.step] == verdict.verdict
        assert set(verdict.ranks) == set(run.not_through(verdict.step))


def test_a_one_rank_run_says_no_peer_traffic_was_tested():
    """A world of one has no peer pairs: its collectives pass without a byte crossing between GPUs."""
    rows = {}
    for world in (1, 2):
        run = PreflightRun(world, STEPS, CPU, 100.0)
        feed_all(run, healthy(world))
        rows[world] = {row.step: row for row in step_rows(run, run.verdict(200.0))}
    for step in ("allreduce", "p2p", "sweep"):
        assert rows[1][step].status == "ok" and rows[1][step].detail.endswith(
            "one rank: no peer traffic tested"
        )
        assert "no peer traffic" not in rows[2][step].detail
    assert "no peer traffic" not in rows[1]["init"].detail
