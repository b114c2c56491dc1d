"""The steps of scripts/gpu-host-check: what the kit's GPU half only models, tried on a real GPU host.

Each step is one subcommand, run by the bash entry under `timeout`, so a stuck step costs only its
own limit. A step writes its results into OUT (at most 11 files in all come back from the device
machine) and its verdict lines into WORK/status/STEP as `ok|finding|error<TAB>one line`; `summary`
turns those into OUT/summary.txt. No step raises past its own main: every error is recorded and
the next step runs. docs/gpu-host-check.md says what each step proves.

    python -m kit.hostcheck STEP --out OUT --work WORK
    python -m kit.hostcheck summary --out OUT --work WORK --steps A,B,...
    python -m kit.hostcheck plan [--only A,B,...]     the step table (steps.toml) for the bash entry

Steps: wheels (no kit import: puts the missing wheels on PYTHONPATH), import, env, nvml, doctor,
watch-hang, watch-crash, preflight, pytest (tests/runtime/test_gpu_host.py: its log and JUnit XML
beside the summary), watch-spin, watch-compile, watch-quiet, ties, xid-events, load-progress,
acceptance (evidence.json), summary (with the commit that
ran, commit.txt). Everything but `wheels` imports the kit from PYTHONPATH.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from kit.hostcheck import evidence_steps, host_steps, nvml_step, preflight, shape_steps, watch, wheels
from kit.hostcheck.plan import load_steps, plan_lines, select
from kit.hostcheck.record import ROOT, Status
from kit.hostcheck.report import commit_of, read_steps, summarise

STEPS = {
    "wheels": wheels.step_wheels,
    "import": host_steps.step_import,
    "env": host_steps.step_env,
    "nvml": nvml_step.step_nvml,
    "doctor": host_steps.step_doctor,
    "watch-hang": lambda a, s: watch.step_watch(a, s, "hang"),
    "watch-crash": lambda a, s: watch.step_watch(a, s, "crash"),
    "preflight": preflight.step_preflight,
    "pytest": preflight.step_pytest,
    "watch-spin": shape_steps.step_spin,
    "watch-compile": shape_steps.step_compile,
    "watch-quiet": shape_steps.step_quiet,
    "ties": shape_steps.step_ties,
    "xid-events": evidence_steps.step_xid_events,
    "load-progress": evidence_steps.step_load_progress,
    "acceptance": evidence_steps.step_acceptance,
    "classify-shapes": shape_steps.step_classify,
}


def step_summary(args) -> None:
    steps = read_steps(Path(args.work), args.steps.split(","))
    commit = commit_of(ROOT, os.environ.get("KIT_CHECK_COMMIT"))
    (Path(args.out) / "commit.txt").write_text(commit + "\n", encoding="utf-8")
    text = summarise(steps, commit)
    (Path(args.out) / "summary.txt").write_text(text, encoding="utf-8")
    print(text)


def print_plan(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m kit.hostcheck plan", description=print_plan.__doc__)
    parser.add_argument("--only", default="", help="comma-separated step names (KIT_CHECK_STEPS)")
    args = parser.parse_args(argv)
    for line in plan_lines(select(load_steps(), args.only)):
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["plan"]:
        return print_plan(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m kit.hostcheck", description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=[*STEPS, "summary"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--wheels", default=str(ROOT / ".devwheels"))
    parser.add_argument("--deps", default="/tmp/kitdeps")
    parser.add_argument("--stall", type=int, default=20, help="watch: the init stall window (s)")
    parser.add_argument("--watch-limit", type=float, default=75, help="watch: its own time limit (s)")
    parser.add_argument("--steps", default=",".join(STEPS), help="summary: the steps, in order")
    parser.add_argument("--pytest-limit", type=float, default=150, help="pytest: its own time limit (s)")
    parser.add_argument("--capture-stall", type=int, default=15, help="capture window (s)")
    parser.add_argument("--compile-seconds", type=float, default=40, help="watch-compile: compiling time (s)")
    parser.add_argument("--ties-limit", type=float, default=150, help="ties: both runs' time limit (s)")
    args = parser.parse_args(argv)
    # `timeout` sends SIGTERM: end through the finally blocks (they kill what the step started).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.step == "summary":
        step_summary(args)
        return 0
    status = Status(Path(args.work), args.step)
    try:
        STEPS[args.step](args, status)
    except SystemExit:
        status.error("stopped by its time limit (SIGTERM)")
        raise
    except BaseException as exc:
        import traceback

        traceback.print_exc()
        status.error(f"raised {type(exc).__name__}: {exc}")
        return 1
    return 0
