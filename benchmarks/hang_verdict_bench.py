"""Verdict latency of a real distributed-init hang: how long after the last log line `kit up` names it.

    .venv/bin/python benchmarks/hang_verdict_bench.py [--runs N] [--stall-init SECONDS]

Runs `kit up tiny --fault hang-init:rank=1 --json` against the CPU rehearsal image (real SGLang,
rank 1 blocked before the rendezvous) N times, and reports per run:

  quiet   time between the last log line (or activity) and the HUNG verdict
  window  the init stall window in force (the goal: quiet <= window + 5 s)
  total   wall time of the whole command (start-up, hang, stacks, cleanup)
  shape   the activity the verdict rests on (a rank blocked before the rendezvous: quiet) and the
          causes it puts first

The failing deployment's hang ran for over ten minutes before anyone knew; the goal is a named
cause within a minute. Exit code 0 either way: this measures, it does not gate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SLACK_S = 5.0


def one_run(stall_init: float | None) -> tuple[dict, float]:
    argv = [
        sys.executable,
        "-m",
        "kit",
        "up",
        "tiny",
        "--fault",
        "hang-init:rank=1",
        "--json",
        "--no-first-token",
    ]
    if stall_init:
        argv += ["--stall", f"init={stall_init:g}"]
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - started
    results = [json.loads(line) for line in proc.stdout.splitlines() if '"type":"result"' in line]
    if not results:
        raise SystemExit(f"no result from kit up (exit {proc.returncode}): {proc.stderr[-500:]}")
    return results[-1], wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--stall-init", type=float, default=None, help="override the init stall window")
    args = parser.parse_args()

    from kit.launch import resolve

    window = args.stall_init or resolve("tiny").timing.stall_windows["init"]
    quiets: list[float] = []
    print(f"{'run':>3}  {'verdict':8} {'phase':6} {'quiet s':>8} {'window s':>9} {'total s':>8}  named")
    for run in range(1, args.runs + 1):
        result, wall = one_run(args.stall_init)
        quiet = float(result.get("quiet_for_s") or 0.0)
        quiets.append(quiet)
        waiting = ",".join(result["waiting_ranks"]) or "-"
        missing = ",".join(result["missing_ranks"]) or "-"
        phase = result["phase"] or "-"
        row = f"{run:>3}  {result['verdict']:8} {phase:6} {quiet:8.1f} {window:9.1f} {wall:8.1f}"
        print(f"{row}  waiting {waiting} / missing {missing}")
        shape = (result.get("activity") or {}).get("shape") or "-"
        causes = ", ".join(c["id"] for c in result.get("likely_causes", [])[:3]) or "-"
        print(f"     activity {shape}; causes {causes}")
    worst = max(quiets)
    ratio = worst / (window + SLACK_S)
    status = "PASS" if worst <= window + SLACK_S else "ABOVE GOAL"
    print(
        f"verdict latency after the last line: median {statistics.median(quiets):.1f} s, "
        f"worst {worst:.1f} s; goal <= window + {SLACK_S:.0f} s = {window + SLACK_S:.0f} s; "
        f"ratio {ratio:.2f} ({status})"
    )


if __name__ == "__main__":
    main()
