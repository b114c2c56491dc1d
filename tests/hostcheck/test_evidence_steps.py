"""Issue 38's host-check steps (kit/hostcheck/evidence_steps.py): their place in the one-command plan,
the load-progress judge, and each step on this CPU machine, for real: load-progress measures a real
mapping; xid-events and acceptance say why they cannot run here (no NVML, no SGLang), never pass."""

from __future__ import annotations

import json
from types import SimpleNamespace

from kit.hostcheck import evidence_steps
from kit.hostcheck.plan import load_steps, select
from kit.hostcheck.record import MIB, Status

# The device command of docs/gpu-host-check.md, "Issue 38".
DEVICE_STEPS = "wheels,import,env,xid-events,load-progress,acceptance"


def lines(work, step):
    return [line.split("\t", 1) for line in (work / "status" / step).read_text().splitlines()]


def test_the_issue_38_device_command_is_one_call_within_its_budget():
    chosen = select(load_steps(), DEVICE_STEPS)
    assert [s.name for s in chosen] == DEVICE_STEPS.split(",")
    assert sum(s.limit for s in chosen) == 330  # ceilings, inside the call's 400 s (KIT_CHECK_BUDGET=340)


def test_the_load_judge_wants_pages_to_climb_without_block_io():
    size = 256 * MIB
    climbing = [{"resident": i * size // 10, "read_bytes": 0} for i in range(11)]
    assert evidence_steps.judge_load_progress(climbing, size)[0] == "ok"
    from_disk = [{**s, "read_bytes": size} for s in climbing]  # a cold read: not the warm case
    assert evidence_steps.judge_load_progress(from_disk, size)[0] == "finding"
    stuck = [{"resident": 0, "read_bytes": 0}] * 5
    verdict, why = evidence_steps.judge_load_progress(stuck, size)
    assert verdict == "finding" and "rose to 0 of 256 MiB" in why
    assert evidence_steps.judge_load_progress([], size)[0] == "finding"


def test_each_step_on_this_cpu_machine(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    args = SimpleNamespace(out=str(out), work=str(work))
    evidence_steps.step_load_progress(args, Status(work, "load-progress"))
    [(verdict, text)] = lines(work, "load-progress")
    assert verdict == "ok" and "the child's read_bytes 0.0 MiB" in text, text
    evidence_steps.step_xid_events(args, Status(work, "xid-events"))
    assert lines(work, "xid-events")[0][0] in ("finding", "ok")  # no NVML here: a finding
    evidence_steps.step_acceptance(args, Status(work, "acceptance"))
    [(verdict, text)] = lines(work, "acceptance")
    assert verdict == "finding" and "is not installed for this Python" in text
    kept = json.loads((out / "evidence.json").read_text())
    assert set(kept) == {"load-progress", "xid-events", "acceptance"}
    assert kept["load-progress"]["samples"] and not list(work.glob("kit-load-*"))  # nothing left behind
