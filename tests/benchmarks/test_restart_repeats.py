"""benchmarks/analyze_bench.py prints the restart log's repeat fraction that docs/logs.md quotes: the
share of lines that repeat an earlier line once stamps are removed (its own code, not a figure
typed in)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import analyze_bench


def test_a_repeat_is_the_same_line_once_its_stamps_are_removed():
    text = (
        "[2026-01-05 08:00:00 TP0] Init torch distributed begin.\n"
        "[2026-01-05 08:00:07 TP0] Init torch distributed begin.\n"  # the same, restamped
        "INFO 03-07 12:29:08 Load weight begin.\n"
        "INFO 03-08 01:00:00 Load weight begin.\n"  # vLLM's short stamps too
        "[2026-01-05 08:00:09 TP1] Init torch distributed begin.\n"  # another rank: not a repeat
    )
    assert analyze_bench.repeat_fraction(text) == 2 / 5
    assert analyze_bench.repeat_fraction("") == 0.0


def test_relaunched_launches_repeat_less_than_the_same_text_restamped():
    varied, launches = analyze_bench.real_restarts(6_000)
    restamped, same = analyze_bench.real_restarts(6_000, vary=False)
    assert launches == same > 2
    assert 0.3 < analyze_bench.repeat_fraction(varied) < analyze_bench.repeat_fraction(restamped) < 1
