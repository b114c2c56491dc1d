"""Bundle test data: a real hang's result, stacks, log and lock as a BundleInput."""

from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path

import pytest

from kit.cli import main
from kit.diagnose.bundle import BundleInput

FIXTURES = Path(__file__).parents[1] / "fixtures"


HUNG_RESULT = {
    "target": "tiny",
    "image": "sglang-0.5.23-cpu",
    "container": "kit-tiny-2c8fd4a6",
    "verdict": "hung",
    "exit_code": 4,
    "phase": "init",
    "quiet_for_s": 8.2,
    "stuck_ranks": ["TP0", "TP1"],
    "waiting_ranks": ["TP0"],
    "missing_ranks": ["TP1"],
    "evidence": ["[2026-12-02 17:57:24 TP1] Init parallel begin."],
    "ranks": [
        {"rank": "TP0", "phase": "init", "last_milestone": "init.begin", "in_phase_s": 8.5},
        {"rank": "TP1", "phase": "init", "last_milestone": "init.begin", "in_phase_s": 8.2},
    ],
    "timeline": [
        {"rank": "TP0", "phase": "init", "start_s": 44.98, "elapsed_s": 8.51, "open": True},
        {"rank": "TP1", "phase": "init", "start_s": 45.31, "elapsed_s": 8.18, "open": True},
    ],
    "stacks": [
        {"rank": "TP0", "pid": 11, "kind": "rendezvous", "where": "_create_c10d_store <- init_process_group"},
        {
            "rank": "TP1",
            "pid": 12,
            "kind": "planted-fault",
            "where": "kit_fault_hang_init <- init_process_group",
        },
    ],
    "likely_causes": [
        {"id": "planted-fault", "title": "a planted test fault (KIT_FAULT)", "why": "w", "what_to_try": ["x"]}
    ],
}


def hung_input(log_text: str | None = None, **changes) -> BundleInput:
    stacks = {
        "TP0": (FIXTURES / "stacks" / "hang-init-11.txt").read_text(),
        "TP1": (FIXTURES / "stacks" / "hang-init-12.txt").read_text(),
    }
    log = (
        log_text
        if log_text is not None
        else (FIXTURES / "kit-logs" / "sglang-0.5.23-cpu-tiny-tp2-ready.log").read_text()
    )
    fields = {
        "name": "kit-tiny-2c8fd4a6-hung",
        "made_by": "test",
        "fingerprint": {"format": 1, "launch": {"target": "tiny", "argv": ["python"], "env": {}}},
        "result": HUNG_RESULT,
        "log_text": log,
        "stacks": stacks,
        "lock_text": (FIXTURES / "locks" / "sglang-0.5.23-cpu.lock.txt").read_text(),
        "created": "2026-12-02T18:00:00+00:00",
    }
    fields.update(changes)
    return BundleInput(**fields)


def run_kit(*argv: str) -> subprocess.CompletedProcess:
    """`kit ARGV` in-process (the same main() as the command), as a CompletedProcess."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as info:
        main(list(argv))
    code = info.value.code
    code = code if isinstance(code, int) else (0 if code is None else 1)
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())
