"""A REHEARSAL of the mission's hang, not SGLang: one rank of a TP-2 start-up whose peer never comes.

    python3 kit/hostcheck/rehearsal/hang.py --log FILE --port P [--mode hang|crash] [--crash-after S]

It exists so that `kit watch --pid N --log FILE` (kit/runtime/host_source.py) can be pointed at a
real process that holds a real GPU and waits in torch's TCPStore rendezvous (init_process_group ->
_create_c10d_store), on a machine without SGLang (the GPU host check's watch-hang and watch-crash,
kit/hostcheck/watch.py; docs/gpu-host-check.md). The wait comes before any NCCL communicator
exists, so no NCCL code runs: it rehearses the report's symptom (quiet in init, GPU memory held),
not an NCCL hang.

What is real and what is borrowed:

- **The log lines are SGLang's own words, restamped to now.** The launcher and TP0 lines below are
  copied verbatim (text after the `[YYYY-MM-DD HH:MM:SS]` / `[... TP0]` prefix) from the kit's own
  real SGLang 0.5.23 run, tests/fixtures/kit-logs/sglang-0.5.23-cpu-tiny-tp2-ready.log (lines 13,
  16 and 38). SGLang 0.5.21+ announces distributed init as `Init parallel begin.` (older releases:
  `Init torch distributed begin.`, kit/logs/patterns.toml), so that is the last line before the
  rendezvous. The stamps are rewritten to the current time because the watch skips records stamped
  before the watched process started (docs/baremetal.md). The crash lines (`Scheduler hit an
  exception: ` + the traceback, then the launcher's `Received sigquit from a child process. It
  usually means the child failed.`) are SGLang's formats as in
  tests/fixtures/sglang-logs/20_dsr1-2node-tp16-node2-nccl-connrefused-crash-init-v0.5.8.post1.log;
  the traceback under them is the one torch really raises here.
- **The process tree is SGLang's shape.** This launcher starts one scheduler child whose command
  line reads `sglang::scheduler_TP0 ...` (SGLang sets it with setproctitle; here it is argv[0]), so
  the watch takes its py-spy stack as TP0's. The launcher waits without CPU, as SGLang's does.
- **The GPU and the store wait are real.** The scheduler initialises CUDA on cuda:0 and holds
  ~0.5 GiB besides its context (SGLang holds about 1 GB per GPU at this point), then calls
  `torch.distributed.init_process_group(backend="nccl" if CUDA else "gloo",
  init_method="tcp://127.0.0.1:PORT", world_size=2, rank=0, timeout=...)` with rank 1 never
  started: rank 0 blocks in the TCPStore rendezvous with zero CPU, as the report's ranks sat quiet
  (the backend is named but never reached: NCCL's communicator is made after the store). `--mode
  crash` gives the store a short timeout, so torch raises its own error and the scheduler exits 1
  the way SGLang's does (the launcher then SIGKILLs itself, as SGLang's launcher does).

Without CUDA (the CPU rehearsal of the check) it uses gloo and holds no GPU memory. It is run by path
on a Python with torch and imports nothing of the kit (no kit need be installed there).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import subprocess
import sys
import time
import traceback

# Verbatim from tests/fixtures/kit-logs/sglang-0.5.23-cpu-tiny-tp2-ready.log (SGLang 0.5.23); the
# test tests/hostcheck/test_rehearsal_lines.py holds each to that file.
LAUNCHER_LINES = (
    "Fail to set RLIMIT_NOFILE: current limit exceeds maximum limit",
    "Using default HuggingFace chat template with detected content format: string",
)
INIT_BEGIN = "Init parallel begin."
# SGLang's own formats (scheduler.py's handler, the launcher's SIGQUIT handler), as in
# tests/fixtures/sglang-logs/20_dsr1-2node-tp16-node2-nccl-connrefused-crash-init-v0.5.8.post1.log.
SCHEDULER_EXCEPTION = "Scheduler hit an exception: "
LAUNCHER_SIGQUIT = "Received sigquit from a child process. It usually means the child failed."
TITLE = "sglang::scheduler_TP0"
HOLD_BYTES = 512 << 20


def stamp(rank: str | None = None, now: float | None = None) -> str:
    """SGLang's prefix: '[2026-12-02 13:46:12] ' or '[2026-12-02 13:46:12 TP0] ' (local time)."""
    when = dt.datetime.fromtimestamp(time.time() if now is None else now).strftime("%Y-%m-%d %H:%M:%S")
    return f"[{when} {rank}] " if rank else f"[{when}] "


def write(log: str, text: str, rank: str | None = None) -> None:
    with open(log, "a", encoding="utf-8") as out:
        out.write(stamp(rank) + text + "\n")


def scheduler(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    held = None
    if cuda:
        torch.cuda.set_device(0)
        held = torch.empty(HOLD_BYTES, dtype=torch.uint8, device="cuda:0")
        held.fill_(1)
        torch.cuda.synchronize()
    print(
        f"rehearsal scheduler pid {os.getpid()}: cuda={cuda} "
        f"reserved={torch.cuda.memory_reserved(0) if cuda else 0}",
        flush=True,
    )
    write(args.log, INIT_BEGIN, "TP0")
    timeout = dt.timedelta(seconds=args.crash_after) if args.mode == "crash" else dt.timedelta(minutes=10)
    try:
        dist.init_process_group(
            backend="nccl" if cuda else "gloo",
            init_method=f"tcp://127.0.0.1:{args.port}",
            world_size=2,
            rank=0,
            timeout=timeout,
        )
    except Exception:
        write(args.log, SCHEDULER_EXCEPTION + traceback.format_exc().rstrip("\n"), "TP0")
        return 1
    # Not reached with the peer missing; say so plainly if it ever is.
    print("rehearsal scheduler: init_process_group returned (unexpected: rank 1 never started)", flush=True)
    time.sleep(600)
    return 0


def launcher(args: argparse.Namespace) -> int:
    for line in LAUNCHER_LINES:
        write(args.log, line)
    env = dict(os.environ, PYTHONEXECUTABLE=sys.executable)  # argv[0] is the title, not a path
    child = subprocess.Popen(
        [TITLE, os.path.abspath(__file__), "--scheduler", *sys.argv[1:]], executable=sys.executable, env=env
    )
    print(f"rehearsal launcher pid {os.getpid()}, scheduler pid {child.pid}", flush=True)
    code = child.wait()
    if code != 0:
        write(args.log, LAUNCHER_SIGQUIT)
        os.kill(os.getpid(), signal.SIGKILL)  # what SGLang's launcher does with a failed child
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=("hang", "crash"), default="hang")
    parser.add_argument("--crash-after", type=float, default=8.0, help="crash mode: the store's timeout (s)")
    parser.add_argument("--scheduler", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    return scheduler(args) if args.scheduler else launcher(args)


if __name__ == "__main__":
    sys.exit(main())
