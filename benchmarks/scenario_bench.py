"""Verdict latency of every GPU-shaped scenario, replayed through the real watcher.

    .venv/bin/python benchmarks/scenario_bench.py

Per scenario (kit/scenarios/*.toml): the verdict reached and its phase, when it came on the
scenario's clock, how long after the stall window it came for HUNG verdicts (the goal: 0 .. 5 s after
the last progress + the window), the shape of the activity the verdict was reached on (quiet,
spinning), the causes ranked first, errors the server went on after, and the wall time of the
replay. The same code as `kit up` runs; only
the source is a replay, so minutes of scenario time take milliseconds. Exit 0 either way: this
measures, the tests gate.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    os.environ.setdefault("KIT_CACHE_DIR", tempfile.mkdtemp(prefix="kit-scenario-bench-"))
    from kit.scenarios import list_scenarios, load_scenario, run_scenario

    header = (
        f"{'scenario':24} {'verdict':8} {'phase':8} {'at (s)':>8} {'after window':>12} {'activity':9}"
        f" {'wall':>8}"
    )
    print(f"{header}  expectations")
    for name in list_scenarios():
        started = time.perf_counter()
        run = run_scenario(name)
        wall = time.perf_counter() - started
        result = run.result
        verdict = result.verdict.upper() if result else "-"
        phase = (result.phase or "-") if result else "-"
        at = f"{run.verdict_at_s:.1f}" if run.verdict_at_s is not None else "-"
        latency = f"{run.latency_s:.1f} s" if run.latency_s is not None else "-"
        checks = (
            "all met" if run.ok else "; ".join(f"{e.name}: {e.detail}" for e in run.expectations if not e.ok)
        )
        judged = result is not None and result.activity is not None and result.verdict != "ready"
        shape = (result.activity.shape or "-") if judged else "-"
        print(
            f"{name:24} {verdict:8} {phase:8} {at:>8} {latency:>12} {shape:9} {wall * 1000:6.0f} ms  {checks}"
        )
        expect = load_scenario(name).expect
        if expect.verdict == "hung" and run.latency_s is not None:
            print(
                f"{'':24} goal: HUNG within the {phase} window + {expect.within_s:g} s of the last progress"
            )
        if result and result.likely_causes:
            print(f"{'':24} causes: {', '.join(c.id for c in result.likely_causes[:3])}")
        if result and result.survived_errors:
            print(f"{'':24} went on after: {'; '.join(result.survived_errors)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
