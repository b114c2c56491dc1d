"""Any moment of a server's life, read right (issue 37): real logs that start mid-life, crash while
serving, capture a draft model in an older release's words, or come from the diffusion server; and
the live watcher reading the same lines the same way.

The logs are in-sample (tests/fixtures/sglang-logs 56-60, each with its thread's URL in the JSON).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_log_wrappers_live import follow_live

from kit.logs import Milestone, Phase, analyze_path, analyze_text
from kit.logs.digest import digest_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-logs"


def _log(prefix: str) -> Path:
    return next(FIXTURES.glob(f"{prefix}_*.log"))


def test_a_serving_stretch_with_no_start_up_is_ready_in_serving_and_says_so():
    # sgl-project/sglang#29516: prefill batches of a hybrid (mamba) model and answered requests.
    report = analyze_path(_log("57"))
    assert (report.outcome, report.phase, report.phase_from) == ("ready", Phase.SERVING, "serving")
    assert report.mid_life and report.last_milestone is None and report.startup_s is None
    assert report.likely_causes == []
    serving = report.serving
    assert serving is not None
    assert (serving.decode_batches, serving.prefill_batches, serving.lines_read) == (0, 3, 3)
    assert serving.over_log["kv_usage"].median == 0.12
    assert serving.over_log["mamba_usage"].max == 0.02
    assert "running" not in serving.over_log  # a prefill line's #running-req is before its batch
    assert serving.over_time[0]["from"] == "2026-06-30 09:22:16"


def test_a_traceback_through_the_event_loop_is_crashed_in_serving_with_the_serving_cause():
    # sgl-project/sglang#31103 (0.5.15): a decode batch with MTP acceptance and mamba usage, then the
    # scheduler raises in run_event_loop -> dispatch_event_loop -> event_loop_overlap -> run_batch.
    report = analyze_path(_log("56"))
    assert (report.outcome, report.phase, report.phase_from) == ("crashed", Phase.SERVING, "exception")
    assert report.likely_causes[0].id == "serving-scheduler-exception"
    serving = report.serving
    assert serving is not None
    assert (serving.over_log["accept_len"].median, serving.over_log["accept_rate"].median) == (3.36, 0.79)
    assert serving.over_log["mamba_usage"].median == 0.05
    assert serving.over_log["gen_throughput"].max == 551.63


def test_a_crash_in_the_event_loop_with_no_batch_line_before_it_is_still_in_serving():
    # LMCache/LMCache#869 (0.4.x): event_loop_overlap -> get_next_batch_to_run raises.
    text = _log("60").read_text(encoding="utf-8")
    tail = text[text.index("[2025-06-26 02:16:20 TP0] Scheduler hit") :]
    report = analyze_text(tail)
    assert (report.outcome, report.phase, report.phase_from) == ("crashed", Phase.SERVING, "exception")
    assert not report.mid_life


def test_an_old_draft_capture_line_then_a_segfault_is_crashed_in_capture():
    # sgl-project/sglang#6496: 'Capture draft cuda graph begin.' (0.4.6-0.5.13 eagle_worker.py) and a
    # segfault, between a console's stamp lines.
    report = analyze_path(_log("58"))
    assert (report.outcome, report.last_milestone, report.phase) == (
        "crashed",
        Milestone.CAPTURE_BEGIN,
        Phase.CAPTURE,
    )
    assert report.dialect == "0.4.6"


def test_the_diffusion_server_is_named_and_its_warm_up_failure_is_crashed_in_warmup():
    # sgl-project/sglang#28493: multimodal_gen's 'Server warmup failed; aborting startup'.
    report = analyze_path(_log("59"))
    assert (report.outcome, report.phase, report.server) == ("crashed", Phase.WARMUP, "diffusion")
    assert "HTTP server did not become ready" in (report.exception or "")


def test_a_serving_log_that_stops_mid_stream_is_hung_in_serving_with_the_serving_causes():
    # The real serving stretch of log 57, then the server's own words that it is stuck (0.5.23
    # http_server.py's failed health check; utils/watchdog.py's soft watchdog) and no batch after.
    text = _log("57").read_text(encoding="utf-8") + (
        "[2026-06-30 09:27:30] Health check failed. Server couldn't get a response from detokenizer for last"
        " 20 seconds. tic start time: 09:27:10. last_heartbeat time: 09:22:25\n"
        "[2026-06-30 09:27:31] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=True)\n"
    )
    report = analyze_text(text)
    assert (report.outcome, report.phase, report.exit_code) == ("hung", Phase.SERVING, 4)
    assert report.likely_causes[0].id == "serving-collective-stuck"
    assert any("soft=True" in line.text for line in report.evidence)
    # A batch line after the stall: it went on serving.
    later = text + "[2026-06-30 09:27:40] Prefill batch, #new-seq: 1, #new-token: 8, #cached-token: 0\n"
    assert analyze_text(later).outcome == "ready"


@pytest.mark.parametrize("prefix", ["56", "57"])
def test_the_live_watcher_reads_a_serving_stretch_as_offline(prefix, tmp_path):
    # One parser: the Watcher feeds LogParser line by line, kit analyze the whole text; the verdict
    # at the first serving line and the figures of the lines read are the same.
    text = _log(prefix).read_text(encoding="utf-8")
    watcher, verdict = follow_live(text, tmp_path, exits=False, lines_per_step=len(text))
    assert (verdict.kind.value, watcher.tracker.phase, watcher.tracker.serving_only) == (
        "ready",
        Phase.SERVING,
        True,
    )
    offline = digest_text(text, [])
    live = watcher.parser.digest.summary()
    assert live is not None and offline is not None
    assert live["over_log"] == offline["over_log"]
    assert (live["decode_batches"], live["prefill_batches"]) == (
        offline["decode_batches"],
        offline["prefill_batches"],
    )


def test_a_serving_stretch_is_held_to_the_target_floor():
    text = _log("56").read_text(encoding="utf-8")
    assert analyze_text(text, accept_floor=1.5).serving.accept_below_floor is False
    assert analyze_text(text, accept_floor=4.0).serving.accept_below_floor is True
    assert analyze_text(text).serving.accept_floor is None


def test_a_large_log_is_read_as_stretches_and_says_so():
    line = (
        "[2026-07-14 10:40:24] Decode batch, #running-req: 2, #full token: 21312, full token usage: 0.01,"
        " mamba num: 8, mamba usage: 0.05, accept len: 3.36, accept rate: 0.79, cuda graph: True, gen"
        " throughput (token/s): 551.63, #queue-req: 0\n"
    )
    summary = digest_text(line * 20_000, [])
    assert summary is not None and summary["sampled"] and summary["decode_batches"] is None
    assert 0 < summary["lines_read"] < 20_000
    assert summary["over_log"]["accept_len"]["median"] == 3.36
