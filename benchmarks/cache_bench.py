"""A second `kit up tiny` reuses the compile cache (issue 17: every start was cold).

    .venv/bin/python benchmarks/cache_bench.py [--starts N]

The CPU rehearsal's warm-up compiles with torch inductor (~20 s of C++ codegen without a line), and
the compile-cache volume keeps what it compiled (TORCHINDUCTOR_CACHE_DIR and the others point into
it). On a private, empty volume (KIT_COMPILE_CACHE_VOLUME, so the user's cache is not touched), this
runs `kit up tiny --no-first-token --json` until two starts reach READY (at most --max-starts) and
prints per start: start-up time, each phase, and the cache's size before and after it; then the
first READY start that found the inductor cache empty (cold) against the next READY one (warm).
Stall windows and deadlines are widened (--slack) because this measures the cache, not hang
detection, and a shared machine's load can starve a start. The volume is removed at the end.
Exit code 0 either way: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a checkout

KIT = [sys.executable, "-m", "kit"]


def run_json(args: list[str], env: dict[str, str], timeout: float = 900) -> tuple[int, dict, float]:
    began = time.monotonic()
    done = subprocess.run([*KIT, *args], capture_output=True, text=True, env=env, timeout=timeout)
    wall = time.monotonic() - began
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    results = [line for line in lines if line.get("type") == "result"] or lines
    if not results:
        raise SystemExit(f"no JSON from kit {' '.join(args)}: {done.stderr[-800:]}")
    return done.returncode, results[-1], wall


def phases(result: dict) -> dict[str, float]:
    spans: dict[str, float] = {}
    for span in result.get("timeline") or []:
        if span["phase"] != "serving":
            spans[span["phase"]] = max(spans.get(span["phase"], 0.0), span["elapsed_s"])
    return spans


STAGES = ("launch", "init", "load", "memory", "capture", "warmup")


def inductor_bytes(cache: dict) -> int:
    return int((cache.get("caches") or {}).get("inductor", 0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-starts", type=int, default=4)
    parser.add_argument("--slack", type=float, default=900, help="Stall window and deadline per stage (s).")
    args = parser.parse_args()
    limits = [f"--stall={s}={args.slack:g}" for s in STAGES] + [
        f"--deadline={s}={args.slack:g}" for s in STAGES
    ]
    token = secrets.token_hex(4)
    volume = f"kit-compile-cache-bench-{token}"
    env = {**os.environ, "KIT_COMPILE_CACHE_VOLUME": volume, "KIT_RUN_LABELS": f"io.kit.bench={token}"}
    rows = []
    before = 0
    try:
        for n in range(1, args.max_starts + 1):
            code, result, wall = run_json(["up", "tiny", "--no-first-token", "--json", *limits], env, 3600)
            _, cache, _ = run_json(["cache", "show", "--json"], env, timeout=120)
            rows.append((n, code, result, wall, cache, before))
            spans = ", ".join(f"{p} {s:.1f} s" for p, s in phases(result).items())
            size = (cache.get("size_bytes") or 0) / (1 << 20)
            folders = ", ".join(
                f"{k} {v / (1 << 20):.1f} MiB" for k, v in sorted(cache.get("caches", {}).items())
            )
            print(
                f"start {n}: {result.get('verdict', '?').upper()} (exit {code}) "
                f"startup {result.get('startup_s')} s (kit up wall {wall:.1f} s); {spans}"
            )
            print(
                f"  inductor cache before it: {before / (1 << 20):.1f} MiB; "
                f"whole cache after it: {size:.1f} MiB [{folders}]"
            )
            before = inductor_bytes(cache)
            if sum(r[2].get("verdict") == "ready" for r in rows) >= 2:
                break
    finally:
        subprocess.run([*KIT, "cache", "clear"], env=env, capture_output=True, timeout=120)
    ready = [r for r in rows if r[2].get("verdict") == "ready"]
    cold = [r for r in ready if r[5] == 0]
    if cold and [r for r in ready if r[0] > cold[0][0]]:
        first, second = cold[0][2], next(r for r in ready if r[0] > cold[0][0])[2]
        a, b = phases(first), phases(second)
        print(
            f"warm-up (where inductor compiles): {b.get('warmup', 0):.1f} s warm vs "
            f"{a.get('warmup', 0):.1f} s cold ({a.get('warmup', 0) - b.get('warmup', 0):+.1f} s saved)"
        )
        print(
            f"whole start-up: {second['startup_s']} s vs {first['startup_s']} s; launch (imports, before any "
            f"milestone: load-dependent) {second.get('launch_s')} s vs {first.get('launch_s')} s; "
            + ", ".join(f"{p} {b.get(p, 0):.1f} vs {a.get(p, 0):.1f} s" for p in a)
        )
    else:
        print("no cold READY start followed by a warm one: no comparison")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
