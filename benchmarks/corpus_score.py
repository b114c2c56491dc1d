"""How well `kit analyze` reads the real-log corpus (tests/fixtures/sglang-logs).

    .venv/bin/python benchmarks/corpus_score.py [--verbose]

Each log has the facts its thread established in the JSON beside it (`expected`). This prints,
over all logs, how often the outcome, the last milestone and the phase are right, and over the
logs with a labelled cause, how often that cause is ranked first and among the first three,
against the goals (90 % outcome and phase, 80 % top-3 cause). The exit code is 0 either way:
this measures, it does not gate (tests/logs/test_log_fixtures.py holds the per-log checks).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a checkout

from kit.logs import analyze_path

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "sglang-logs"
GOALS = {"outcome": 0.90, "phase": 0.90, "top-3 cause": 0.80}


def score(corpus: Path = CORPUS, verbose: bool = False) -> dict[str, tuple[int, int]]:
    counts = {name: [0, 0] for name in ("outcome", "last milestone", "phase", "top-1 cause", "top-3 cause")}
    for log in sorted(corpus.glob("*.log")):
        expected = json.loads(log.with_suffix(".json").read_text())["expected"]
        report = analyze_path(log)
        got = {
            "outcome": report.outcome,
            "last milestone": report.last_milestone and report.last_milestone.value,
            "phase": report.phase and report.phase.value,
        }
        want = {
            "outcome": expected["outcome"],
            "last milestone": expected["last_milestone"],
            "phase": expected["phase"],
        }
        wrong = []
        for name in got:
            counts[name][1] += 1
            if got[name] == want[name]:
                counts[name][0] += 1
            else:
                wrong.append(f"{name} {got[name]} (expected {want[name]})")
        ids = [c.id for c in report.likely_causes]
        if expected.get("cause"):
            for name, top in (("top-1 cause", 1), ("top-3 cause", 3)):
                counts[name][1] += 1
                counts[name][0] += expected["cause"] in ids[:top]
            if expected["cause"] not in ids[:3]:
                wrong.append(f"cause {expected['cause']} not in the first 3 of {ids}")
        if verbose or wrong:
            status = "; ".join(wrong) if wrong else "ok"
            print(f"  {log.stem[:60]:<60} {status}")
    return {name: (right, total) for name, (right, total) in counts.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="one line per log, right or wrong")
    args = parser.parse_args()
    print(f"corpus: {len(list(CORPUS.glob('*.log')))} real logs in {CORPUS}")
    results = score(verbose=args.verbose)
    verdict = "PASS"
    for name, (right, total) in results.items():
        share = right / total if total else 0.0
        goal = GOALS.get(name)
        status = "" if goal is None else (" PASS" if share >= goal else " BELOW GOAL")
        if goal is not None and share < goal:
            verdict = "BELOW GOAL"
        target = "" if goal is None else f" (goal {goal:.0%})"
        print(f"{name:<15} {right:>3}/{total:<3} = {share:6.1%}{target}{status}")
    print(verdict)
    return 0


if __name__ == "__main__":
    sys.exit(main())
