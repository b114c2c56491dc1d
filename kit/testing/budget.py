"""How long a GPU job may run, computed from the catalog's deadlines rather than typed into YAML.

    python -m kit.testing.budget qwen-base            minutes for one smoke job of that target
    python -m kit.testing.budget qwen-tiny qwen-tiny-mtp --extra 15
    python -m kit.testing.budget qwen-mtp --starts 3     three cold starts (two `kit up`, the smoke's)

A start that stays within every phase deadline is READY after at most the sum of them; the smoke then
makes a bounded number of requests, each within the first-token deadline (plus its own answer time),
and serves for the profile's window. On top: the job's own steps (checkout, bootstrap, image verify,
doctor, preflight), and `--extra` minutes for other tests in the same step. The workflows carry the
results; tests/smoke/test_gpu_workflows.py computes them again and compares, so a deadline changed in
the catalog fails that test until the workflow follows.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

from kit.spec import PHASES, LaunchSpec

SETUP_S = 15 * 60
"""Checkout, bootstrap, `kit image verify --gpus all`, doctor and preflight (the image build has a
step timeout of its own)."""
REQUESTS = 12
"""Upper bound on the smoke's requests per start: two first tokens, health, greedy twice, structured
output, tool call, the greedy reference, the acceptance length's requests, the window's."""
ANSWER_S = 60.0
"""What a request may take beyond its first token (the longest answer is a 96-token JSON)."""


def startup_s(spec: LaunchSpec) -> float:
    return sum(spec.timing.deadlines[phase] for phase in PHASES)


def smoke_s(spec: LaunchSpec) -> float:
    """One start of SPEC within its deadlines, and its smoke checks."""
    window = float(spec.smoke.get("serving_window_s") or 10.0)
    return startup_s(spec) + REQUESTS * (spec.timing.deadlines["first_token"] + ANSWER_S) + window


def cold_start_s(spec: LaunchSpec) -> float:
    """One more start of SPEC from nothing to its first token (`kit up`), within its deadlines."""
    return startup_s(spec) + spec.timing.deadlines["first_token"]


def job_minutes(specs: Sequence[LaunchSpec], *, extra_minutes: int = 0, starts: int = 1) -> int:
    """Minutes for a job that sets up once and smoke-tests each of SPECS in turn, each started cold
    STARTS times in all (the smoke's own start and STARTS - 1 `kit up` before it)."""
    extra = sum((starts - 1) * cold_start_s(s) for s in specs)
    return math.ceil((SETUP_S + extra + sum(smoke_s(s) for s in specs)) / 60) + extra_minutes


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    from kit.launch import resolve

    parser = argparse.ArgumentParser(prog="python -m kit.testing.budget", description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="+")
    parser.add_argument("--extra", type=int, default=0, help="minutes for other tests in the same job")
    parser.add_argument(
        "--starts", type=int, default=1, help="cold starts of each target, the smoke's included"
    )
    args = parser.parse_args(argv)
    print(job_minutes([resolve(t) for t in args.targets], extra_minutes=args.extra, starts=args.starts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
