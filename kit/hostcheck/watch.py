"""watch-hang and watch-crash: `kit watch --pid` on the hang rehearsal (rehearsal/hang.py), a rank
that waits in torch's TCPStore rendezvous for a peer that never comes. The watch's lines and one
`"type": "gpu-host-check"` line per mode go to OUT/watch.jsonl; judge.judge_watch says what they show.
watch_to_verdict runs `kit watch` to its end for these and the shape steps alike."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from kit.hostcheck.judge import judge_watch, result_line
from kit.hostcheck.record import (
    MIB,
    Status,
    free_port,
    jsonable,
    keep_watch,
    remember_pgid,
    stop_rehearsal,
)

REHEARSAL = Path(__file__).resolve().parent / "rehearsal" / "hang.py"


def watch_to_verdict(argv: list[str], limit: float, lines: list[str], stamps: list[float]) -> dict:
    """Run `kit watch ... --json` to its end (past `limit`: SIGINT, then kill). Its stdout lines and
    their times (seconds from its start) go into `lines` and `stamps` as they come, so a step that is
    stopped keeps them; a watch still running when this returns or raises is stopped too."""
    t0 = time.monotonic()
    watch = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:

        def pump():
            for line in watch.stdout:
                lines.append(line.rstrip("\n"))
                stamps.append(time.monotonic() - t0)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        errs: list[str] = []
        err_reader = threading.Thread(target=lambda: errs.append(watch.stderr.read()), daemon=True)
        err_reader.start()
        ran: dict = {}
        try:
            code = watch.wait(limit)
        except subprocess.TimeoutExpired:
            watch.send_signal(signal.SIGINT)
            try:
                code = watch.wait(15)
            except subprocess.TimeoutExpired:
                watch.kill()
                code = watch.wait()
            ran["watch_timed_out"] = limit
        reader.join(5)
        err_reader.join(5)
        ran["watch_exit_code"] = code
        ran["watch_seconds"] = round(time.monotonic() - t0, 2)
        ran["watch_stderr_tail"] = (errs[0] if errs else "")[-3000:]
        return ran
    finally:
        if watch.poll() is None:  # the step was stopped: the watch goes too
            watch.send_signal(signal.SIGINT)
            try:
                watch.wait(5)
            except subprocess.TimeoutExpired:
                watch.kill()


def step_watch(args, status: Status, mode: str) -> None:
    import psutil

    work, out = Path(args.work), Path(args.out)
    log = work / f"rehearsal-{mode}.log"
    log.unlink(missing_ok=True)
    console_path = work / f"rehearsal-{mode}.out"
    console = console_path.open("w")
    port = free_port()
    rehearsal = subprocess.Popen(
        [
            sys.executable,
            str(REHEARSAL),
            "--log",
            str(log),
            "--port",
            str(port),
            "--mode",
            mode,
            "--crash-after",
            "8",
        ],
        stdout=console,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    remember_pgid(work, rehearsal.pid)
    jsonl = out / "watch.jsonl"  # both modes, one after the other (8 files come back at most)
    stall = ["--stall", "launch=60", "--stall", f"init={args.stall}"]
    argv = [
        sys.executable,
        "-m",
        "kit",
        "watch",
        "--pid",
        str(rehearsal.pid),
        "--log",
        str(log),
        *stall,
        "--json",
    ]
    meta: dict = {
        "type": "gpu-host-check",
        "mode": mode,
        "argv": argv,
        "rehearsal_pid": rehearsal.pid,
        "port": port,
    }
    lines: list[str] = []
    stamps: list[float] = []
    try:
        meta.update(watch_to_verdict(argv, args.watch_limit, lines, stamps))
        code = meta["watch_exit_code"]
        result = result_line(lines)
        if result is not None:
            meta["result_after_s"] = round(
                stamps[lines.index(next(x for x in reversed(lines) if '"result"' in x))], 2
            )

        # Is what the watch watched still there? (It must never signal it.)
        alive = {}
        try:
            launcher = psutil.Process(rehearsal.pid)
            tree = [launcher, *launcher.children(recursive=True)]
            alive = {
                str(p.pid): {
                    "status": p.status(),
                    "cmdline": " ".join(p.cmdline())[:120],
                    "cpu_s": sum(p.cpu_times()[:2]),
                }
                for p in tree
            }
        except psutil.NoSuchProcess:
            alive = {}
        meta["alive_after_watch"] = alive
        meta["rehearsal_returncode"] = rehearsal.poll()
        gpu_now = None
        with contextlib.suppress(Exception):
            from kit.runtime.nvml import open_nvml

            gpus = open_nvml()
            if gpus is not None:
                gpu_now = jsonable(gpus.usage([int(p) for p in alive] or [rehearsal.pid]))
                gpus.close()
        meta["nvml_usage_of_rehearsal_now"] = gpu_now

        for state, text in judge_watch(mode, result, code, lines, alive, meta):
            status.add(state, text)
        if result is None:
            return
        bundle = result.get("bundle")
        if bundle and Path(bundle).is_file() and mode == "hang":
            size = Path(bundle).stat().st_size
            if size < 15 * MIB:
                shutil.copyfile(bundle, out / "bundle-hang.tar.gz")
                status.ok(f"hang: the bundle ({size} bytes) is bundle-hang.tar.gz")
            else:
                status.finding(f"hang: the bundle is {size} bytes, too big to bring back")
    finally:
        stop_rehearsal(rehearsal, console)
        tails = [
            (f"--- rehearsal {mode} log ({log}):", log, 6000),
            (f"--- rehearsal {mode} console:", console_path, 4000),
        ]
        keep_watch(jsonl, lines, meta, tails)
