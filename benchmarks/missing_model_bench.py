"""How fast `kit up qwen-base` refuses a host without the model (the goal: exit 2 in under 1 s).

    .venv/bin/python benchmarks/missing_model_bench.py [--repeat R]

Runs `python -m kit up qwen-base` R times in fresh processes with an empty HOME (so no HF cache):
interpreter start, imports, catalog, the cheap model check, the one-line error. Prints each time,
the median and the ratio to the goal; exit 0 either way: this measures, it does not gate.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

GOAL_S = 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    times = []
    with tempfile.TemporaryDirectory() as home:
        env = {"HOME": home, "PATH": "/usr/bin:/bin", "KIT_CACHE_DIR": f"{home}/kit"}
        for _ in range(args.repeat):
            started = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "kit", "up", "qwen-base"], capture_output=True, text=True, env=env
            )
            times.append(time.monotonic() - started)
            if done.returncode != 2:
                print(f"unexpected exit {done.returncode}: {done.stderr.strip()}")
                return 0
    print(f"stderr: {done.stderr.strip()}")
    print("runs: " + ", ".join(f"{t:.3f} s" for t in times))
    median = statistics.median(times)
    print(f"median {median:.3f} s; goal {GOAL_S:.1f} s; ratio {median / GOAL_S:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
