"""Real SGLang logs (tests/fixtures) analysed end to end: outcome, last milestone and phase."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.logs import Milestone, Phase, analyze_path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SGLANG_LOGS = sorted((FIXTURES / "sglang-logs").glob("*.log"))
KIT_LOG = FIXTURES / "kit-logs" / "sglang-0.5.23-cpu-tiny-tp2-ready.log"


def _expected(log: Path) -> dict:
    return json.loads(log.with_suffix(".json").read_text())["expected"]


def test_every_fixture_log_has_its_facts_beside_it():
    assert SGLANG_LOGS, "no fixture logs found"
    for log in SGLANG_LOGS:
        assert set(_expected(log)) == {"outcome", "last_milestone", "phase"}, log.name


@pytest.mark.parametrize("log", SGLANG_LOGS, ids=[p.name for p in SGLANG_LOGS])
def test_fixture_log_matches_its_expected_block(log: Path):
    expected = _expected(log)
    report = analyze_path(log)
    assert report.outcome == expected["outcome"]
    if "_VLLM_" in log.name:  # not an SGLang log: only the outcome is meaningful
        return
    assert report.last_milestone == (expected["last_milestone"] and Milestone(expected["last_milestone"]))
    assert report.phase == (expected["phase"] and Phase(expected["phase"]))


def test_kit_cpu_log_is_ready_in_the_init_parallel_dialect():
    report = analyze_path(KIT_LOG)
    assert (report.outcome, report.last_milestone, report.phase) == ("ready", Milestone.READY, Phase.SERVING)
    assert report.dialect == "0.5.21"
    assert [r.rank for r in report.ranks] == ["main", "TP0", "TP1"]
    assert report.startup_s == pytest.approx(18.0)  # 13:46:01 -> 13:46:19
    assert report.likely_causes == []


def test_shutdown_after_ready_is_not_a_crash():
    # The kit log ends with SIGTERM, "crashed with exit code -15" and SIGQUIT: a clean stop.
    assert analyze_path(KIT_LOG).outcome == "ready"


def _log(prefix: str) -> Path:
    return next(p for p in SGLANG_LOGS if p.name.startswith(prefix))


def test_multi_node_connection_refused_names_the_exception_and_the_peer_cause():
    report = analyze_path(_log("20_"))
    assert report.exception == "RuntimeError: NCCL error: remote process exited or there was a network error"
    assert report.likely_causes[0].id == "peer-unreachable"
    assert "Connection refused" in report.likely_causes[0].hints_found
    assert report.stuck == [f"TP{n}" for n in range(8, 16)]


def test_init_hang_after_nccl_connects_lists_all_stuck_ranks_and_nccl_causes():
    report = analyze_path(_log("19_"))
    assert report.stuck == [f"TP{n}" for n in range(8)]
    assert report.missing == []
    ids = [c.id for c in report.likely_causes]
    assert {"nccl-p2p", "ib-network", "shm-too-small", "memlock"} <= set(ids)
    assert any("Connected all trees" in line.text for line in report.evidence)


def test_capture_crash_points_at_flashinfer_and_keeps_the_traceback_start():
    report = analyze_path(_log("08_"))
    assert report.likely_causes[0].id == "flashinfer-capture"
    assert report.exception is None  # the excerpt stops before the exception line
    assert any("Traceback (most recent call last)" in line.text for line in report.evidence)


def test_vllm_log_is_recognised_as_no_sglang_milestones():
    report = analyze_path(_log("14_"))
    assert report.likely_causes[0].id == "no-milestones"
    assert report.ranks == []


def test_eagle_draft_worker_repeats_the_start_up_cycle_and_still_ends_ready():
    report = analyze_path(_log("04_"))
    spans = [(s.rank, s.phase) for s in report.timeline if s.rank == "TP0"]
    assert spans.count(("TP0", Phase.INIT)) == 2  # target model, then the draft model
    assert report.outcome == "ready"
