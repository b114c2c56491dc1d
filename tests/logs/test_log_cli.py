"""`kit analyze`: exit codes by outcome, JSON shape (against docs/schema), stdin, unreadable input."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from kit.cli import main
from kit.logs.schema import validate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CRASH_LOG = next((FIXTURES / "sglang-logs").glob("20_*.log"))
READY_LOG = FIXTURES / "kit-logs" / "sglang-0.5.23-cpu-tiny-tp2-ready.log"


def run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return int(exit_info.value.code or 0)


def test_json_report_shape(capsys):
    assert run(["analyze", str(CRASH_LOG), "--json"]) == 1  # exit codes by outcome, as `kit up`
    report = json.loads(capsys.readouterr().out)
    validate(report, "analyze")
    assert {
        "outcome",
        "last_milestone",
        "phase",
        "ranks",
        "missing",
        "evidence",
        "exception",
        "likely_causes",
        "timeline",
    } <= set(report)
    assert (report["outcome"], report["last_milestone"], report["phase"]) == ("crashed", "init.begin", "init")
    assert report["ranks"][1] == {
        "rank": "TP8",
        "last_milestone": "init.begin",
        "phase": "init",
        "last_time": "2026-02-25T16:41:56",
        "in_phase_s": 62.0,
        "seen": True,
        "node": None,
    }
    assert report["exit_code"] == 1
    assert report["attempt"]["summary"] == "attempt 1 of 1"
    cause = report["likely_causes"][0]
    assert set(cause) == {
        "id",
        "title",
        "why",
        "what_to_try",
        "evidence",
        "generic",
        "source",
        "facts",
        "basis",
    }
    assert cause["id"] == "peer-unreachable" and cause["generic"] is False
    assert all(isinstance(step, str) for step in cause["what_to_try"])
    assert all({"line_no", "rank", "text"} == set(line) for line in report["evidence"])


def test_human_output_has_the_rank_table_and_causes(capsys):
    assert run(["analyze", str(CRASH_LOG)]) == 1
    out = capsys.readouterr().out
    assert "CRASHED in phase init" in out
    assert "TP15" in out and "init.begin" in out
    assert "Likely causes:" in out and "NCCL_SOCKET_IFNAME" in out


def test_ready_log_exits_zero_and_says_ready(capsys):
    assert run(["analyze", str(READY_LOG)]) == 0
    assert capsys.readouterr().out.startswith("READY in phase serving")


def test_stdin_dash(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(READY_LOG.read_bytes())))
    assert run(["analyze", "-", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["source"], report["outcome"]) == ("-", "ready")


def test_missing_file_is_one_line_and_exit_2(capsys, tmp_path):
    assert run(["analyze", str(tmp_path / "nope.log")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("kit: error: LOGFILE: cannot read")


def test_a_directory_is_unreadable_too(capsys, tmp_path):
    assert run(["analyze", str(tmp_path)]) == 2
    assert "LOGFILE" in capsys.readouterr().err


def test_a_serving_stretch_is_held_to_the_targets_smoke_floor(capsys):
    # sgl-project/sglang#31103 (log 56): accept len 3.36; qwen-mtp's smoke floor is 1.5 (the catalog).
    log = next((FIXTURES / "sglang-logs").glob("56_*.log"))
    assert run(["analyze", str(log), "--json", "--target", "qwen-mtp"]) == 1
    report = json.loads(capsys.readouterr().out)
    validate(report, "analyze")
    assert (report["serving"]["accept_floor"], report["serving"]["accept_below_floor"]) == (1.5, False)
    assert run(["analyze", str(log), "--target", "qwen-mtp"]) == 1
    text = capsys.readouterr().out
    assert "accept len: 3.36 .. 3.36 (median 3.36, 1 lines); at or above the target's floor 1.5" in text
    assert run(["analyze", str(log), "--target", "no-such-target"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "--target" in err and "qwen-mtp" in err
