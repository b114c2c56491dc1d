"""Issue 37: the live watcher reads a log's lines as `kit analyze` does. Where a log prints no
milestone, the phase (and for old retraction lines, the outcome) comes from its other lines: the
scheduler watchdog's stuck-batch dump, a step's progress bar, NCCL's own set-up lines, a stretch of
retractions. These rules live in the tracker and its reducer, which both paths share; this feeds the
tuned corpora's logs that print no milestone through `analyze_text` and through the live path
(kit/startup/watch.py: `LogParser.feed` per line, then the attempts' `observe_line` and
`observe_events`, judged at the end) and compares outcome and phase."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kit.logs import analyze_text
from kit.logs.attempts import Attempts
from kit.logs.parser import LogParser
from kit.logs.verdicts import Crashed, Hung, Ready

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def _tuned() -> tuple[str, ...]:
    """The tuned-on corpora, as scripts/base_rates.py names them: never a held-out set."""
    spec = importlib.util.spec_from_file_location("base_rates_script", ROOT / "scripts" / "base_rates.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CORPORA


TUNED = _tuned()


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _without_milestones() -> list[Path]:
    logs = [log for corpus in TUNED for log in sorted((FIXTURES / corpus).glob("*.log"))]
    return [log for log in logs if analyze_text(_read(log)).last_milestone is None]


def _live(text: str) -> tuple[str, object]:
    """What the live watch judges once the server's processes ended, having read `text` line by line."""
    parser = LogParser()
    attempts = Attempts.start(None, 0.0)
    t = 0.0
    for number, line in enumerate(text.split("\n")):
        t = float(number)
        attempts = attempts.observe_line(t, line).observe_events(parser.feed(line), t)
    attempts = attempts.observe_events(parser.flush(), t)
    verdict = attempts.verdict(t, ended=True)
    outcome = "ready" if isinstance(verdict, Ready) else "crashed" if isinstance(verdict, Crashed) else "hung"
    phase = verdict.phase if isinstance(verdict, Crashed | Hung) else attempts.current.phase
    return outcome, phase


@pytest.mark.parametrize("log", _without_milestones(), ids=lambda p: f"{p.parent.name}/{p.name[:24]}")
def test_the_live_path_reads_a_log_without_milestones_as_kit_analyze_does(log: Path):
    text = _read(log)
    report = analyze_text(text)
    assert _live(text) == (report.outcome, report.phase)
