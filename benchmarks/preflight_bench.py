"""Preflight beside a full start-up: what SGLang's own group init, alone, costs next to `kit up`.

    flock /tmp/kit-docker.lock .venv/bin/python benchmarks/preflight_bench.py [--runs N] [--no-up]

Runs, against the CPU rehearsal image, as a person would (the CLI in a subprocess, wall clock from
the command's start to its exit, container start and removal included):

  preflight  `kit preflight tiny --json`, N times
  up         `kit up tiny --json` once: the real SGLang server to READY and its first token

and prints each figure, the preflight's own step times from its result (launch = the container's
Python and `import torch`; setup = `import sglang`, its parser and `_set_envs_and_config`, which the
server pays too), and the ratio (goal: a preflight costs at most half a start-up). Exit code 0
either way: this measures, it does not gate.
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

GOAL_RATIO = 0.5
"""A preflight costs at most this share of a full `kit up tiny`."""


def timed(argv: list[str], timeout: float) -> tuple[dict, float, int]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "kit", *argv, "--json"], capture_output=True, text=True, timeout=timeout
    )
    wall = time.monotonic() - started
    results = [json.loads(line) for line in proc.stdout.splitlines() if '"type":"result"' in line]
    if not results:
        raise SystemExit(f"no result from kit {argv[0]} (exit {proc.returncode}): {proc.stderr[-500:]}")
    return results[-1], wall, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-up", action="store_true", help="skip the full kit up tiny")
    args = parser.parse_args()

    walls = []
    print(f"kit preflight tiny (goal: <= {GOAL_RATIO:.0%} of kit up tiny, end to end)")
    for run in range(1, args.runs + 1):
        result, wall, code = timed(["preflight", "tiny"], timeout=600)
        walls.append(wall)
        steps = ", ".join(
            f"{s['step']} {s['seconds']:.2f}" for s in result["steps"] if s["seconds"] is not None
        )
        peak = max((r["busbw_gbps"] for r in result["sweep"]), default=0.0)
        print(
            f"  run {run}: {result['verdict'].upper()} (exit {code}) in {wall:.2f} s wall; "
            f"kit's own measure {result['seconds']:.2f} s; steps (s): {steps}; peak busbw {peak:.3f} GB/s"
        )
    median = statistics.median(walls)
    print(f"  median {median:.2f} s, max {max(walls):.2f} s")

    if args.no_up:
        return
    result, wall, code = timed(["up", "tiny"], timeout=900)
    startup = result.get("startup_s")
    first = result.get("first_token_s")
    print(f"kit up tiny: {result['verdict'].upper()} (exit {code}) in {wall:.2f} s wall", end="")
    print(f" (start-up {startup:.1f} s, first token {first:.2f} s)" if startup and first else "")
    ratio = median / wall
    print(
        f"ratio: a preflight costs {ratio:.0%} of a full start-up ({wall / median:.1f}x faster): "
        f"{'within' if ratio <= GOAL_RATIO else 'OVER'} the goal"
    )


if __name__ == "__main__":
    main()
