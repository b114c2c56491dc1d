"""How fast `kit validate` rejects the failing deployment's first launch (the goal: under 1 s).

    .venv/bin/python benchmarks/validate_bench.py [--repeat R]

The launch is qwen-mtp on SGLang 0.5.10 with the hybrid model's default mamba cache (`no_buffer`),
which SGLang refuses with speculative decoding. Measures R fresh processes (interpreter start,
imports, catalog, the release's rules) and R in-process calls, prints each median and its ratio to
the goal; exit 0 either way: this measures, it does not gate (tests check the answer, not the time).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

GOAL_S = 1.0
LAUNCH = [
    "validate",
    "qwen-mtp",
    "--image",
    "sglang-0.5.10.post1-cu129-sm120",
    "--set",
    "mamba_cache=no_buffer",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    fresh = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", "from kit.cli import main; main()", *LAUNCH],
            capture_output=True,
            text=True,
            check=False,
        )
        fresh.append(time.perf_counter() - started)
        if done.returncode != 1 or "mtp-hybrid-no-buffer" not in done.stdout:
            print(f"unexpected answer (exit {done.returncode}): {done.stdout[-300:]}{done.stderr[-300:]}")
            return 1

    from kit.validate import validate

    warm = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        report = validate("qwen-mtp", image=LAUNCH[3], overrides=[LAUNCH[5]])
        warm.append(time.perf_counter() - started)
        assert not report.ok

    for name, times in (("fresh process", fresh), ("in process", warm)):
        median = statistics.median(times)
        print(
            f"{name:14} median {median * 1000:7.1f} ms  ({', '.join(f'{t * 1000:.0f}' for t in times)} ms)"
            f"  {median / GOAL_S:.2f} x the {GOAL_S:g} s goal"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
