"""Did a test run test anything? A GPU job whose tests were all skipped, deselected or never collected
must not go green: `python -m kit.testing.junit REPORT.xml` exits 1 unless at least one test ran
(passed or failed) and prints the counts. --kit-require-gpu already fails a gpu test that skipped;
this catches the rest (an empty selection, a collection error, a report that was never written)."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Counts:
    tests: int
    failures: int
    errors: int
    skipped: int

    @property
    def ran(self) -> int:
        """Tests that ran to a verdict: passed or failed (errors and skips are not a test run)."""
        return self.tests - self.errors - self.skipped

    def line(self) -> str:
        return (
            f"{self.tests} tests: {self.ran - self.failures} passed, {self.failures} failed, "
            f"{self.errors} errors, {self.skipped} skipped"
        )


def counts(xml_text: str) -> Counts:
    """pytest's JUnit XML (a <testsuites> of <testsuite>s, or one <testsuite>) -> the totals."""
    root = ET.fromstring(xml_text)
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        for key in total:
            total[key] += int(suite.get(key, "0") or 0)
    return Counts(**total)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m kit.testing.junit REPORT.xml", file=sys.stderr)
        return 2
    path = Path(args[0])
    try:
        found = counts(path.read_text(encoding="utf-8"))
    except (OSError, ET.ParseError) as exc:
        print(f"{path}: no readable JUnit report ({exc}): the job tested nothing", file=sys.stderr)
        return 1
    if found.ran == 0:
        print(f"{path}: {found.line()}: the job tested nothing", file=sys.stderr)
        return 1
    print(f"{path}: {found.line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
