"""A deadline never destroys progress: `kit up` / `kit watch` report a stage past its deadline and follow
it on to READY, HUNG or CRASHED; the smoke tests (DeadlinePolicy.VERDICT) still end with DEADLINE.

Driven through the real watcher, tracker and result code over replayed GPU start-ups (kit/scenarios:
the cold 234 GB load at 156 MB/s, and the load whose storage stops at 40 %)."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
from rich.console import Console

from kit.launch import resolve
from kit.logs import ActivitySample, Deadline, Hung, Ready
from kit.logs.schema import problems
from kit.output import jsonable
from kit.scenarios import load_scenario
from kit.scenarios.replay import ReplaySource
from kit.startup import limits_from_spec
from kit.startup.live import LiveView
from kit.startup.overrun import DeadlinePolicy, LoadProgress, ShardBar, load_progress, shard_bar, still_moving
from kit.startup.result import headline, verdict_lines
from kit.startup.up import follow_source
from kit.startup.watch import Watcher

GIB = 1 << 30
LOAD_DEADLINE = 300.0  # the replayed loads take 1500 s (cold) and stop after 615 s (stalled)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))  # diagnostics of a HUNG replay go here


def _replay(name: str):
    scenario = load_scenario(name)
    spec = resolve(scenario.target, image=scenario.image)
    limits = limits_from_spec(spec)
    limits = dataclasses.replace(
        limits, deadline_s=dataclasses.replace(limits.deadline_s, load=LOAD_DEADLINE)
    )
    return ReplaySource(scenario), spec, limits


def test_a_load_past_its_deadline_that_still_reads_is_followed_to_ready():
    source, _spec, limits = _replay("cold-load")
    watcher = Watcher(source, limits)  # the default policy: kit up, kit watch
    verdict = watcher.run()
    assert isinstance(verdict, Ready)
    [overrun] = watcher.overruns
    assert (overrun.stage, overrun.limit_s, overrun.attempt) == ("load", LOAD_DEADLINE, 1)
    assert LOAD_DEADLINE < overrun.noticed_s < LOAD_DEADLINE + 1  # said when it happened, once
    assert "GB read, 156 MB/s" in overrun.moving  # the scenario's read rate, from the samples
    assert overrun.describe().startswith("load passed its 300 s deadline, still moving: ")


def test_the_smoke_policy_still_ends_the_same_load_with_deadline():
    source, _spec, limits = _replay("cold-load")
    verdict = Watcher(source, limits, deadline_policy=DeadlinePolicy.VERDICT).run()
    assert isinstance(verdict, Deadline) and verdict.phase.value == "load"
    assert verdict.limit_s == LOAD_DEADLINE and verdict.exit_code == 5
    assert LOAD_DEADLINE < verdict.elapsed_s < LOAD_DEADLINE + 1


def test_the_result_is_ready_exit_0_and_names_the_stage_that_passed_its_deadline():
    source, spec, limits = _replay("cold-load")
    result = follow_source(source, spec, limits, session="test")
    assert (result.verdict, result.exit_code) == ("ready", 0)
    [row] = result.deadlines_passed
    assert row.phase == "load" and row.limit_s == LOAD_DEADLINE
    assert 1490 <= row.took_s <= 1530  # the whole load, as the timeline has it
    assert "(load past its deadline)" in headline(result)
    assert any("load passed its 300 s deadline (took 15" in line for line in verdict_lines(result))
    assert problems({"type": "result", **jsonable(result)}, "up-result") == []


def test_a_stage_past_its_deadline_that_then_stops_moving_is_hung_and_says_both():
    source, spec, limits = _replay("stalled-load")
    result = follow_source(source, spec, limits, session="test")
    assert (result.verdict, result.phase, result.exit_code) == ("hung", "load", 4)
    assert [row.phase for row in result.deadlines_passed] == ["load"]
    assert "156 MB/s" in result.deadlines_passed[0].moving


def test_the_live_view_says_it_once_and_shows_the_load_against_the_checkpoint_size():
    source, _spec, limits = _replay("cold-load")
    out = io.StringIO()
    watcher = Watcher(source, limits)
    with LiveView(
        Console(file=out, force_terminal=False, width=200), title="t", load_bytes=234 * GIB
    ) as view:
        watcher.run(view.update, poll_s=0.25)
    text = out.getvalue()
    assert text.count("load passed its 300 s deadline, still moving: ") == 1
    assert "followed on to READY, HUNG or CRASHED" in text
    assert "(past its 300 s deadline)" in text  # the heartbeat lines while it goes on
    assert "of 251.3 GB (" in text and "by SGLang's shard bar; disk 156 MB/s; ETA " in text


def test_json_lines_carry_the_deadline_event_and_the_load_progress(capsys):
    source, _spec, limits = _replay("cold-load")
    watcher = Watcher(source, limits)
    with LiveView(Console(file=io.StringIO()), title="t", as_json=True, load_bytes=234 * GIB) as view:
        watcher.run(view.update, poll_s=0.25)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert all(problems(line, "up-events") == [] for line in lines)  # docs/schema/up-events.json
    [late] = [line for line in lines if line["type"] == "deadline"]
    assert late["stage"] == "load" and late["limit_s"] == LOAD_DEADLINE and "156 MB/s" in late["moving"]
    loads = [line for line in lines if line["type"] == "activity" and "load_read_bytes" in line]
    assert loads and all(line["load_total_bytes"] == 234 * GIB for line in loads)
    assert loads[-1]["load_read_bytes"] > loads[0]["load_read_bytes"]
    assert 150e6 <= loads[-1]["load_rate_bytes_s"] <= 160e6


# -- the pure parts ----------------------------------------------------------------------------------


def _samples(rate: float, *, start: int = 0, n: int = 6, every: float = 2.0, **extra) -> list[ActivitySample]:
    return [ActivitySample(t=i * every, read_bytes=int(start + rate * i * every), **extra) for i in range(n)]


def test_load_progress_counts_from_the_stage_start_and_gives_rate_and_eta():
    samples = _samples(60e6, start=41_000_000_000)
    progress = load_progress(samples, read_at_start=1_000_000_000, total_bytes=234_000_000_000)
    assert progress.read_bytes == 40_000_000_000 + 600_000_000
    assert progress.rate_bytes_s == pytest.approx(60e6)
    assert progress.eta_s == pytest.approx((234e9 - 40.6e9) / 60e6)
    assert progress.describe() == "40.6 of 234.0 GB (17 %; by block I/O read; disk 60 MB/s; ETA 54 min)"


def test_load_progress_without_a_size_or_a_read_counter():
    assert load_progress([ActivitySample(t=0.0)], None, 10) is None
    bare = load_progress(_samples(0.0), None, None)
    assert (
        bare.fraction is None and bare.eta_s is None and bare.describe() == "0.0 GB read (by block I/O read)"
    )
    assert LoadProgress(5, None, 10).describe() == "0.0 of 0.0 GB (50 %; by block I/O read)"


# SGLang 0.5.23's bar (srt/model_loader/weight_utils.py), as the rehearsal logs it.
BAR = "Loading safetensors checkpoint shards:  {pct}% Completed | {done}/39 [{el}<{eta}, 38.40s/it]"
TOTAL = 251_300_000_000
SHARD = TOTAL // 39


def test_a_warm_page_cache_reads_nothing_from_disk_yet_the_load_moves():
    """Issue 38: the weights in the page cache, 0.5.23's loader maps them: block I/O reads 0 bytes
    (old reading: '0.0 of 251.3 GB (0 %)', no ETA); SGLang's bar and the mapped pages move."""
    bar = shard_bar(BAR.format(pct=51, done=20, el="00:10", eta="00:09"))
    assert bar == ShardBar(20, 39, 9.0)
    samples = [
        ActivitySample(
            t=i,
            read_bytes=0,
            checkpoint_resident=(i + 1) * SHARD // 4,
            checkpoint_mapped=SHARD,
            storage="ext4: a local disk",
        )
        for i in range(3)
    ]
    progress = load_progress(samples, 0, TOTAL, bar)
    assert progress.fraction == pytest.approx((20 + 0.75) / 39) and progress.basis == "SGLang's shard bar"
    assert progress.describe() == (
        f"{(20.75 / 39) * TOTAL / 1e9:.1f} of 251.3 GB (53 %; shard 20/39 by SGLang's shard bar; "
        "on ext4: a local disk; ETA 9 s)"
    )
    assert load_progress(samples, 0, TOTAL).basis == "the ranks' mapped checkpoint pages"  # before the bar


def test_under_memory_pressure_rereads_do_not_make_the_load_look_done():
    """Pages evicted and read again count twice in block I/O (old reading: 100 % at shard 3 of 39)."""
    samples = _samples(500e6, start=0, n=4, every=150.0)  # 450 GB read, counting re-reads
    bar = shard_bar(BAR.format(pct=8, done=3, el="10:00", eta="2:00:00"))
    progress = load_progress(samples, 0, TOTAL, bar)
    assert progress.fraction == pytest.approx(3 / 39) and progress.eta_s == 7200.0
    assert progress.describe().startswith(
        "19.3 of 251.3 GB (8 %; shard 3/39 by SGLang's shard bar; disk 500 MB/s"
    )


def test_a_model_cache_on_nfs_counts_no_block_io_yet_shows_its_progress_and_storage():
    """NFS reads are no block I/O (old reading: no progress at all)."""
    samples = [
        ActivitySample(
            t=float(i),
            checkpoint_resident=i * SHARD // 3,
            checkpoint_mapped=SHARD,
            storage="nfs4: the network (NFS)",
        )
        for i in range(3)
    ]
    progress = load_progress(samples, None, TOTAL, shard_bar(BAR.format(pct=2, done=1, el="00:40", eta="?")))
    assert progress is not None and progress.fraction == pytest.approx((1 + 2 / 3) / 39)
    assert progress.eta_s is None and "on nfs4: the network (NFS)" in progress.describe()
    assert shard_bar(
        "Loading safetensors checkpoint shards:   0% Completed | 0/39 [00:00<?, ?it/s]"
    ) == ShardBar(0, 39, None)
    assert shard_bar("Load weight begin. avail mem=94.20 GB") is None


def test_still_moving_names_reads_gpu_memory_compile_and_cpu():
    reads = still_moving(_samples(60e6, start=41_000_000_000), quiet_for_s=0.4)
    assert reads == "41.6 GB read, 60 MB/s, last progress 0 s ago"
    grow = [
        ActivitySample(t=0.0, gpu_mem_bytes=GIB, compile_bytes=0, cpu_seconds=0.0),
        ActivitySample(t=10.0, gpu_mem_bytes=3 * GIB, compile_bytes=5_000_000, compilers=2, cpu_seconds=9.0),
    ]
    said = still_moving(grow, quiet_for_s=3)
    assert said == (
        "GPU memory +2.00 GiB, compile writes +5.0 MB, 2 compilers alive, CPU 0.9 cores, "
        "last progress 3 s ago"
    )
    assert still_moving([], quiet_for_s=1) == "last progress 1 s ago"  # output lines only


def test_a_hung_verdict_is_never_turned_into_a_report():
    source, _spec, limits = _replay("stalled-load")
    verdict = Watcher(source, limits).run()
    assert isinstance(verdict, Hung) and verdict.phase.value == "load"


def test_the_deadline_line_says_whose_limit_it_was():
    """The profile's limit, or the user's --deadline (PhaseLimits.deadlines_given)."""
    source, spec, limits = _replay("cold-load")
    profiles = follow_source(source, spec, limits, session="test", deadline_policy=DeadlinePolicy.VERDICT)
    assert profiles.limit_by == "profile"
    assert headline(profiles) == "DEADLINE in load: still going after 300 s (the profile's limit)"
    source, spec, _ = _replay("cold-load")
    users = limits_from_spec(spec, deadlines={"load": LOAD_DEADLINE})
    given = follow_source(source, spec, users, session="test", deadline_policy=DeadlinePolicy.VERDICT)
    assert given.limit_by == "--deadline"
    assert headline(given) == "DEADLINE in load: still going after 300 s (your --deadline limit)"
    assert problems({"type": "result", **jsonable(given)}, "up-result") == []
