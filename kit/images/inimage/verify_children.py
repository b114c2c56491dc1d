"""verify.py's child processes: each in a session of its own, output to files, killed at a deadline.

A crash or a hang in a child is reported, not fatal. Children print progress as `KIT-EVENT {json}`
lines, so the parent knows where a killed child stood. Standalone: the standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

EVENT = "KIT-EVENT "
"""Prefixes a child process's progress lines, so the parent knows where a killed child stood."""
GRACE_S = 5.0
"""Once one child has failed, how long the others get before they are killed (they would wait
for the failed one until the collective timeout)."""


def emit(**event) -> None:
    """One progress line from a child (flushed: the child may be killed right after)."""
    sys.stdout.write(EVENT + json.dumps(event, sort_keys=True) + "\n")
    sys.stdout.flush()


def parse_events(text: str) -> list[dict]:
    events = []
    for line in text.splitlines():
        if line.startswith(EVENT):
            try:
                events.append(json.loads(line[len(EVENT) :]))
            except json.JSONDecodeError:
                continue
    return events


def _tail(data: bytes, lines: int = 6) -> str:
    text = data.decode("utf-8", errors="replace").strip().splitlines()
    return "\n".join(line[:300] for line in text[-lines:])


def child_env(*, hide_gpus: bool = False) -> dict:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    # The probe's container has no network: loopback is the only interface, for gloo and NCCL.
    env["GLOO_SOCKET_IFNAME"] = "lo"
    env["NCCL_SOCKET_IFNAME"] = "lo"
    # NCCL's warnings reach the report's stderr tails (the causes the kit matches read them).
    env.setdefault("NCCL_DEBUG", "WARN")
    if hide_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run_children(commands: list[list[str]], timeout_s: float, env: dict) -> tuple[list[dict], float]:
    """Start every command at once, each in its own session; wait for all of them until the
    deadline (or GRACE_S after the first failure), then kill what is left. Output goes to files,
    not pipes, so a chatty child (NCCL_DEBUG) can never block on a full pipe."""
    started = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="kit-verify-") as tmp:
        procs = []
        for index, command in enumerate(commands):
            out = open(os.path.join(tmp, f"{index}.out"), "w+b")  # noqa: SIM115 (closed below)
            err = open(os.path.join(tmp, f"{index}.err"), "w+b")  # noqa: SIM115
            proc = subprocess.Popen(command, stdout=out, stderr=err, env=env, start_new_session=True)
            procs.append((proc, out, err))
        deadline = started + timeout_s
        failed_at = None
        while True:
            codes = [proc.poll() for proc, _, _ in procs]
            now = time.monotonic()
            if all(code is not None for code in codes) or now >= deadline:
                break
            if failed_at is None and any(code not in (None, 0) for code in codes):
                failed_at = now
                deadline = min(deadline, now + GRACE_S)
            time.sleep(0.05)
        for proc, out, err in procs:
            killed = proc.poll() is None
            if killed:
                with contextlib.suppress(ProcessLookupError):  # it ended just now
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            out.seek(0)
            err.seek(0)
            results.append(
                {
                    "rc": proc.returncode,
                    "killed": killed,
                    "events": parse_events(out.read().decode("utf-8", errors="replace")),
                    "stderr_tail": _tail(err.read()),
                }
            )
            out.close()
            err.close()
    return results, round(time.monotonic() - started, 2)


def ended(result: dict, timeout_s: float) -> str:
    """How a child that never reported its end ended."""
    if result["killed"]:
        return f"did not finish in {timeout_s:g} s (killed)"
    rc = result["rc"]
    if rc is not None and rc < 0:
        return f"the process died of signal {-rc}"
    return f"the process exited {rc}"
