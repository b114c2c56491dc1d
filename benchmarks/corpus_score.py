"""How well `kit analyze` reads real logs, in-sample and out-of-sample, printed apart.

    .venv/bin/python benchmarks/corpus_score.py [--verbose] [--markdown]
        [--only in-sample|out-of-sample|out-of-sample-2|out-of-sample-3|out-of-sample-4|
         out-of-sample-5|out-of-sample-6]

Each log has the facts its thread established in the JSON beside it (`expected`). For each corpus
this prints how often the outcome, the last milestone and the phase are right, and over the logs
with a labelled cause, how often that cause is ranked first and among the first three, with the
counts, against the goals (90 % outcome and phase, 80 % top-3 cause).

- **in-sample** (tests/fixtures/sglang-logs): the logs the causes book and the patterns were
  written and tuned on. This includes the five logs once called held out: commit 52b4208 scored
  them before any change (outcome 2/5, phase 2/5, top-3 cause 0/4) and then changed the rules for
  them in the same commit, so they are training data too. These figures say the rules fit the
  logs they were made from, not how well they generalise.
- **out-of-sample** (tests/fixtures/sglang-logs-oos): logs gathered after the rules, labelled from
  their threads before the kit ever read them, never cited by the rules (tests/logs/test_log_oos.py).
  Out of sample until issue 37's cause order was written from two of its misses: tuned on since.
- **out-of-sample-2** (tests/fixtures/sglang-logs-oos2): 42 logs gathered for issue 37 and frozen in
  commit 6843c27 before any rule changed for it: serving stretches, crashes while serving, wrapped
  logs, older and newer releases' words (its README). Out of sample for issue 37's first pass only:
  its misses were read for the second pass (vLLM words, wrappers, phases), so it is tuned on since.
- **out-of-sample-3** (tests/fixtures/sglang-logs-oos3): logs gathered for issue 37's second pass and
  frozen before any rule changed for it (its README): the honest estimate of that pass. Its misses were
  read for the third pass (base rates, phases without milestones), so it is tuned on since.
- **out-of-sample-4** (tests/fixtures/sglang-logs-oos4): logs gathered for issue 37's third pass and
  frozen before any rule changed for it (its README): the honest estimate of that pass. Its misses were
  read for the fourth pass (and its labels counted in the base rates), so it is tuned on since.
- **out-of-sample-5** (tests/fixtures/sglang-logs-oos5): logs gathered for issue 37's fourth pass and
  frozen before any rule changed for it (its README): the honest estimate of that pass. Its misses were
  read for the fifth pass (and its labels counted in the base rates), so it is tuned on since.
- **out-of-sample-6** (tests/fixtures/sglang-logs-oos6): logs gathered for issue 37's fifth pass and
  frozen before any rule changed for it (its README): the honest estimate now. Its gatherers also
  marked whether each passage itself names its labelled cause (`cause_in_passage`).

`--markdown` prints the figures as the table docs/logs.md carries (one row per corpus), so the
figures in the docs are the ones this script printed.

The exit code is 0 either way: this measures, it does not gate.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a checkout

from kit.logs import analyze_path

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
CORPORA = {
    "in-sample": (
        FIXTURES / "sglang-logs",
        "the causes book and patterns were tuned on these, the five once called held out included "
        "(commit 52b4208 scored them, then changed the rules for them)",
    ),
    "out-of-sample": (
        FIXTURES / "sglang-logs-oos",
        "gathered 2026-12-03 after the rules; labelled from their threads; never cited, "
        "tuned on since issue 37's cause order (read the figures as fit)",
    ),
    "out-of-sample-2": (
        FIXTURES / "sglang-logs-oos2",
        "gathered 2026-12-05, frozen in 6843c27 before issue 37's rules; out of sample for its first pass, "
        "tuned on in its second (read the figures as fit)",
    ),
    "out-of-sample-3": (
        FIXTURES / "sglang-logs-oos3",
        "gathered 2026-12-05 for issue 37's second pass, frozen before its rules; "
        "out of sample for that pass, "
        "tuned on in its third (read the figures as fit)",
    ),
    "out-of-sample-4": (
        FIXTURES / "sglang-logs-oos4",
        "gathered 2026-12-05 for issue 37's third pass, frozen before its rules; "
        "out of sample for that pass, "
        "tuned on in its fourth (read the figures as fit)",
    ),
    "out-of-sample-5": (
        FIXTURES / "sglang-logs-oos5",
        "gathered 2026-12-05 for issue 37's fourth pass, frozen before its rules; "
        "out of sample for that pass, "
        "tuned on in its fifth (read the figures as fit)",
    ),
    "out-of-sample-6": (
        FIXTURES / "sglang-logs-oos6",
        "gathered 2026-12-05 for issue 37's fifth pass, frozen before its rules; never cited or tuned on",
    ),
}
GOALS = {"outcome": 0.90, "phase": 0.90, "top-3 cause": 0.80}
MEASURES = ("outcome", "last milestone", "phase", "top-1 cause", "top-3 cause", "top-3 in passage")
# "top-3 in passage": the top-3 cause over only the logs whose gatherer marked, before the kit read them,
# that the passage itself holds words naming the cause (`cause_in_passage`, from the sixth set on). It is
# reported beside the goal's measure, never instead of it: a cause known only from a thread is still a miss.
FIELDS = ("outcome", "last milestone", "phase")  # the labelled fields, counted together too


@dataclass
class Score:
    logs: int = 0
    counts: dict[str, list[int]] = field(default_factory=lambda: {m: [0, 0] for m in MEASURES})
    wrong: list[tuple[str, str]] = field(default_factory=list)
    """(log stem, what was wrong), or 'ok' for a log read right (kept for --verbose)."""

    def share(self, measure: str) -> float:
        right, total = self.counts[measure]
        return right / total if total else 0.0

    def fields(self) -> tuple[int, int]:
        """Right and labelled over the outcome, last milestone and phase of every log together."""
        return sum(self.counts[m][0] for m in FIELDS), sum(self.counts[m][1] for m in FIELDS)


def score(corpus: Path) -> Score:
    result = Score()
    for log in sorted(corpus.glob("*.log")):
        result.logs += 1
        expected = json.loads(log.with_suffix(".json").read_text(encoding="utf-8"))["expected"]
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
            result.counts[name][1] += 1
            if got[name] == want[name]:
                result.counts[name][0] += 1
            else:
                wrong.append(f"{name} {got[name]} (expected {want[name]})")
        ids = [c.id for c in report.likely_causes]
        if expected.get("cause"):
            for name, top in (("top-1 cause", 1), ("top-3 cause", 3)):
                result.counts[name][1] += 1
                result.counts[name][0] += expected["cause"] in ids[:top]
            if expected.get("cause_in_passage") is True:
                result.counts["top-3 in passage"][1] += 1
                result.counts["top-3 in passage"][0] += expected["cause"] in ids[:3]
            if expected["cause"] not in ids[:3]:
                wrong.append(f"cause {expected['cause']} not in the first 3 of {ids}")
        result.wrong.append((log.stem, "; ".join(wrong) if wrong else "ok"))
    return result


def render(name: str, about: str, corpus: Path, result: Score, verbose: bool) -> list[str]:
    lines = [f"{name}: {result.logs} real logs in {corpus.relative_to(FIXTURES.parents[1])}", f"  {about}"]
    for stem, what in result.wrong:
        if verbose or what != "ok":
            lines.append(f"    {stem[:60]:<60} {what}")
    right, total = result.fields()
    if total:
        lines.append(
            f"  {'all fields':<15} {right:>3}/{total:<3} = {right / total:6.1%} (outcome, milestone, phase)"
        )
    for measure in MEASURES:
        right, total = result.counts[measure]
        goal = GOALS.get(measure)
        share = result.share(measure)
        if not total and measure == "top-3 in passage":
            continue  # a set gathered before the flag existed
        if not total:
            lines.append(f"  {measure:<15}   0/0   (no labelled logs)")
            continue
        status = "" if goal is None else f" (goal {goal:.0%}) " + ("PASS" if share >= goal else "BELOW GOAL")
        lines.append(f"  {measure:<15} {right:>3}/{total:<3} = {share:6.1%}{status}")
    return lines


def markdown(rows: list[tuple[str, Score]]) -> list[str]:
    """The figures as a Markdown table: one row per corpus, `right/total = share` per measure."""
    lines = ["| corpus | fields | " + " | ".join(MEASURES) + " |", "|---" * (len(MEASURES) + 2) + "|"]
    for name, result in rows:
        right, total = result.fields()
        cells = [f"{right}/{total} = {right / total:.1%}" if total else "0/0"]
        for measure in MEASURES:
            right, total = result.counts[measure]
            cells.append(f"{right}/{total} = {result.share(measure):.1%}" if total else "0/0")
        lines.append(f"| **{name}** ({result.logs} logs) | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="one line per log, right or wrong")
    parser.add_argument("--markdown", action="store_true", help="print the figures as docs/logs.md's table")
    parser.add_argument("--only", choices=sorted(CORPORA), help="score one corpus")
    args = parser.parse_args(argv)
    rows: list[tuple[str, Score]] = []
    for name, (corpus, about) in CORPORA.items():
        if args.only and name != args.only:
            continue
        result = score(corpus)
        rows.append((name, result))
        if not args.markdown:
            print("\n".join(render(name, about, corpus, result, args.verbose)))
            print()
    if args.markdown:
        print("\n".join(markdown(rows)))
        return 0
    print("figures of a corpus the rules were made or tuned on describe fit; only a set frozen before")
    print("the rules it is scored against (the newest) estimates how the kit reads logs it has not seen.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
