"""Every command's --json against the documented JSON Schemas in docs/schema/.

`kit analyze` runs here for real on every corpus log. `kit up` / `kit watch` print their result
line from the same pure functions tested here (rows from a replayed tracker, causes, UpResult);
tests/startup/test_up_cli.py checks every line the real `kit up --json` prints (docker). `kit
smoke`'s report is checked from real CheckResult values.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from rich.console import Console

from kit.cli import main
from kit.logs import AnalysisReport, PhaseLimits, Tracker, parse_text
from kit.logs.schema import SCHEMAS, SchemaMismatch, load, problems, validate
from kit.output import emit_json, jsonable
from kit.startup.live import LiveView
from kit.startup.result import UpResult, causes_for, rank_rows, span_rows, verdict_name
from kit.startup.watch import Progress
from kit.testing.checks import CheckResult
from kit.testing.smoke import SmokeReport

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
KIT_LOG = FIXTURES / "kit-logs" / "sglang-0.5.23-cpu-tiny-tp2-ready.log"
LOGS = [*sorted((FIXTURES / "sglang-logs").glob("*.log")), KIT_LOG]


def _analyze_json(log: Path, capsys) -> dict:
    with pytest.raises(SystemExit) as exited:
        main(["analyze", str(log), "--json"])
    document = json.loads(capsys.readouterr().out)
    assert exited.value.code == document["exit_code"]
    return document


@pytest.mark.parametrize("name", SCHEMAS)
def test_each_schema_is_a_valid_draft_2020_12_schema(name):
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(load(name))


@pytest.mark.parametrize("log", LOGS, ids=[p.stem for p in LOGS])
def test_kit_analyze_json_of_every_corpus_log_matches_the_schema(log, capsys):
    document = _analyze_json(log, capsys)
    assert problems(document, "analyze") == []


def test_the_analyze_schema_names_every_field_the_report_has():
    schema = load("analyze")
    assert set(schema["required"]) == set(AnalysisReport.model_fields)
    assert set(schema["properties"]) == set(AnalysisReport.model_fields)


def test_a_wrong_document_is_refused_naming_the_field():
    document = {"outcome": "stalled"}
    with pytest.raises(SchemaMismatch, match="analyze schema"):
        validate(document, "analyze")
    assert any(p.startswith("outcome:") for p in problems(document, "analyze"))


def _up_result(log: Path, expected_ranks: int | None) -> dict:
    """The result line `kit up --json` prints, built by the same functions from a real log."""
    tracker = Tracker.start(PhaseLimits(expected_ranks=expected_ranks), 0.0)
    t = 0.0
    for t, event in enumerate(parse_text(log.read_text()), start=1):
        tracker = tracker.observe_event(event, float(t))
    now = float(t) + 500.0
    verdict = tracker.verdict(now, ended=True)
    assert verdict is not None
    result = UpResult(
        target="tiny",
        image="sglang-0.5.23-cpu",
        container="kit-tiny-test",
        verdict=verdict_name(verdict),
        exit_code=int(verdict.exit_code),
        phase=tracker.phase.value if tracker.phase else None,
        exception=getattr(verdict, "exception", None),
        evidence=tuple(getattr(verdict, "evidence", ())),
        ranks=rank_rows(tracker, now),
        timeline=span_rows(tracker, now),
        likely_causes=causes_for(verdict, tracker, {}, "cuda"),
        container_removed=True,
    )
    return {"type": "result", **jsonable(result)}


@pytest.mark.parametrize(
    ("log", "ranks", "verdict"),
    [
        (KIT_LOG, 2, "ready"),
        (next((FIXTURES / "sglang-logs").glob("20_*.log")), 8, "crashed"),
        (next((FIXTURES / "sglang-logs").glob("19_*.log")), None, "hung"),
    ],
    ids=["ready", "crashed", "hung"],
)
def test_the_up_and_watch_result_line_matches_the_schema_with_the_shared_rows(log, ranks, verdict):
    line = _up_result(log, ranks)
    assert line["verdict"] == verdict
    assert problems(line, "up-result") == []
    assert problems(line, "up-events") == []
    if verdict != "ready":
        assert line["likely_causes"] and all(c["id"] for c in line["likely_causes"])


def test_the_live_json_lines_match_the_stream_schema():
    tracker = Tracker.start(PhaseLimits(expected_ranks=2), 0.0)
    out = io.StringIO()
    with redirect_stdout(out), LiveView(Console(file=io.StringIO()), title="t", as_json=True) as view:
        view.started("kit-tiny-test", "http://127.0.0.1:30000")
        for t, event in enumerate(parse_text(KIT_LOG.read_text()), start=1):
            tracker = tracker.observe_event(event, float(t))
            view.update(Progress(tracker, float(t), (event,), None, "kit-tiny-test"))
        emit_json(_up_result(KIT_LOG, 2))
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert {line["type"] for line in lines} >= {"start", "milestone", "result"}
    for line in lines:
        assert problems(line, "up-events") == [], line


def test_kit_smoke_json_matches_the_schema():
    report = SmokeReport(
        target="tiny",
        image="sglang-0.5.23-cpu",
        startup="ready",
        checks=(
            CheckResult("distributed init", True, "2/2 ranks finished init (TP0, TP1)", 0.6, 600.0),
            CheckResult("first token /v1/chat/completions", True, "3 chunks, text 'hi'", 0.21, 60.0),
            CheckResult("planted hang named", False, "hung in init: TP1", None, None),
        ),
    )
    assert problems(jsonable(report), "smoke") == []


def test_a_log_read_as_head_and_tail_says_what_was_skipped(tmp_path, capsys, monkeypatch):
    # The bounded reader (kit/files.py) keeps a log's head and tail; the report must not pass the
    # part read off as the whole: its attempts and counts are those of what was read.
    import kit.files

    monkeypatch.setattr(kit.files, "LOG_HEAD_BYTES", 4096)
    monkeypatch.setattr(kit.files, "LOG_TAIL_BYTES", 8192)
    monkeypatch.setattr(kit.files, "_CHUNK", 1024)  # the tail drops whole chunks
    big = tmp_path / "restarts.log"
    big.write_text(KIT_LOG.read_text(encoding="utf-8") * 20, encoding="utf-8")
    document = _analyze_json(big, capsys)
    assert problems(document, "analyze") == []
    assert document["skipped"]["bytes"] > 0 and document["skipped"]["lines"] > 0
    with pytest.raises(SystemExit):
        main(["analyze", str(big)])
    assert "was skipped to keep memory bounded" in capsys.readouterr().out
    monkeypatch.undo()
    assert _analyze_json(KIT_LOG, capsys)["skipped"] is None
