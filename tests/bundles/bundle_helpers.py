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


REHEARSAL_TAG = "kit/sglang:sglang-0.5.23-cpu"
REHEARSAL_ID = "sha256:" + "ab" * 32
KIT_LABELS = {"io.kit.image": "sglang-0.5.23-cpu", "io.kit.managed": "image"}


def crafted_bundle(
    path: Path,
    *,
    argv: list[str] | None = None,
    env: dict | None = None,
    launch: dict | None = None,
    container: dict | None = None,
    image: dict | None = None,
    summary: str | None = None,
    overrides: tuple[str, ...] = (),
    stall_init: float = 8,
) -> Path:
    """A bundle of the rehearsal target whose fingerprint's launch was edited by hand the way the
    issue's colleague did it: member checksums recomputed, so it reads as valid.

    argv replaces the launch's, env is added to the target's own (masked as the kit masks it: the
    secret names kept in launch.secrets);
    launch and container update those sections key by key; summary replaces summary.md."""
    import hashlib
    import json

    from kit.diagnose import facts
    from kit.diagnose.bundle import build_members, write_bundle
    from kit.diagnose.redact import Redactor
    from kit.launch import resolve
    from kit.logs.limits import limits_from_spec

    spec = resolve("tiny", overrides=list(overrides))
    limits = limits_from_spec(spec, stall_windows={"init": stall_init})
    if argv is not None:
        spec = spec.model_copy(update={"argv": tuple(argv)})
    section = facts.launch_of_spec(spec, limits, env if env is not None else {}, "crafted")
    section["container"] = {**section["container"], **(container or {})}
    section.update(launch or {})
    fingerprint = {
        "format": 1,
        "image": image
        if image is not None
        else {"name": "sglang-0.5.23-cpu", "tag": REHEARSAL_TAG, "id": REHEARSAL_ID},
        "launch": section,
    }
    bundle = hung_input(fingerprint=fingerprint)
    members = build_members(bundle, Redactor.for_launch(env or {}, list(spec.argv)))
    if summary is not None:
        members["summary.md"] = summary.encode()
        meta = json.loads(members["bundle.json"])
        meta["members"]["summary.md"] = {"sha256": hashlib.sha256(members["summary.md"]).hexdigest()}
        members["bundle.json"] = json.dumps(meta).encode()
    return write_bundle(path, bundle.name, members)
