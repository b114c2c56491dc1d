"""The real-log corpus (tests/fixtures/sglang-logs): each log against the facts in the JSON beside it.

Every log comes from a public issue, docs page or notes repository (its `source`), kept verbatim
(an excerpt says so in `notes`). `expected` holds what `kit analyze` must report: outcome,
last milestone, phase, and the cause the thread established (or null with `cause_label`).
benchmarks/corpus_score.py prints the same comparison as accuracy figures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.logs import Milestone, Phase, analyze_path
from kit.logs.causes import default_causes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SGLANG_LOGS = sorted((FIXTURES / "sglang-logs").glob("*.log"))
KIT_LOG = FIXTURES / "kit-logs" / "sglang-0.5.23-cpu-tiny-tp2-ready.log"
CAUSE_IDS = {c.id for c in default_causes().causes}


def _facts(log: Path) -> dict:
    return json.loads(log.with_suffix(".json").read_text())


def _expected(log: Path) -> dict:
    return _facts(log)["expected"]


def test_the_corpus_holds_at_least_forty_real_logs_each_with_its_facts():
    assert len(SGLANG_LOGS) >= 40, f"{len(SGLANG_LOGS)} logs"
    for log in SGLANG_LOGS:
        facts = _facts(log)
        assert facts["source"], log.name
        assert "sglang_version" in facts, log.name
        expected = facts["expected"]
        assert {"outcome", "last_milestone", "phase", "cause"} <= set(expected), log.name
        assert expected["outcome"] in {"ready", "crashed", "hung"}, log.name
        if expected["cause"] is None:
            assert expected.get("cause_label"), f"{log.name}: say why no cause is labelled"
        else:
            assert expected["cause"] in CAUSE_IDS, f"{log.name}: unknown cause {expected['cause']}"


def _param(log: Path):
    """A log the kit is known to misread carries `known_miss` (why) and is a strict xfail."""
    miss = _facts(log).get("known_miss")
    marks = [pytest.mark.xfail(reason=miss, strict=True)] if miss else []
    return pytest.param(log, id=log.stem, marks=marks)


@pytest.mark.parametrize("log", [_param(p) for p in SGLANG_LOGS])
def test_corpus_log_matches_its_expected_outcome_milestone_and_phase(log: Path):
    expected = _expected(log)
    report = analyze_path(log)
    assert report.outcome == expected["outcome"]
    assert report.last_milestone == (expected["last_milestone"] and Milestone(expected["last_milestone"]))
    assert report.phase == (expected["phase"] and Phase(expected["phase"]))


@pytest.mark.parametrize("log", [_param(p) for p in SGLANG_LOGS if _expected(p)["cause"]])
def test_corpus_log_offers_its_labelled_cause(log: Path):
    """The labelled cause is offered; benchmarks/corpus_score.py measures how high it ranks."""
    expected = _expected(log)
    report = analyze_path(log)
    assert expected["cause"] in [c.id for c in report.likely_causes]


def test_kit_cpu_log_is_ready_in_the_init_parallel_dialect():
    report = analyze_path(KIT_LOG)
    assert (report.outcome, report.last_milestone, report.phase) == ("ready", Milestone.READY, Phase.SERVING)
    assert report.dialect == "0.5.21"
    assert [r.rank for r in report.ranks] == ["main", "TP0", "TP1"]
    assert report.startup_s == pytest.approx(18.0)  # 13:46:01 -> 13:46:19
    assert report.likely_causes == []
    assert (report.attempt.number, report.attempt.count) == (1, 1)


def test_shutdown_after_ready_is_not_a_crash():
    # The kit log ends with SIGTERM, "crashed with exit code -15" and SIGQUIT: a clean stop.
    assert analyze_path(KIT_LOG).outcome == "ready"


def _log(prefix: str) -> Path:
    return next(p for p in SGLANG_LOGS if p.name.startswith(prefix))


def test_multi_node_connection_refused_names_the_exception_and_the_peer_cause():
    report = analyze_path(_log("20_"))
    assert report.exception == "RuntimeError: NCCL error: remote process exited or there was a network error"
    assert report.likely_causes[0].id == "peer-unreachable"
    assert "Connection refused" in report.likely_causes[0].evidence
    assert report.stuck == [f"TP{n}" for n in range(8, 16)]


def test_a_node_that_never_joined_is_named_missing_from_the_launch_arguments():
    # Node 0 of a tp=16, nnodes=2 launch hangs in init: its own 8 ranks wait; node 1's ranks
    # never printed in this log, and server_args says they should exist.
    report = analyze_path(_log("19_"))
    assert report.stuck == [f"TP{n}" for n in range(8)]
    assert report.expected is not None
    assert (report.expected.source, report.expected.nodes, report.expected.node_rank) == ("launch", 2, 0)
    assert report.expected.never_seen == [f"TP{n}" for n in range(8, 16)]
    [missing] = report.missing
    assert (missing.milestone, missing.ranks) == (Milestone.INIT_BEGIN, [f"TP{n}" for n in range(8, 16)])
    unseen = [r for r in report.ranks if not r.seen]
    assert [(r.rank, r.node) for r in unseen] == [(f"TP{n}", 1) for n in range(8, 16)]
    ids = [c.id for c in report.likely_causes]
    assert {"nccl-p2p", "ib-network", "rank-missing"} <= set(ids[:3])
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
    assert spans.count(("TP0", "init")) == 2  # target model, then the draft model: one attempt
    assert report.outcome == "ready"
    assert report.attempt.count == 1
