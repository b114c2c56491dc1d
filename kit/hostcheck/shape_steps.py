"""Issue 27 item 9's steps: a spinning rank, a cold Triton compile in capture and its quiet control,
and the tiny model's greedy-tie rate in bf16. docs/gpu-host-check.md.

    watch-spin     kit watch --pid on rehearsal/shapes.py --mode spin: HUNG in init, "spinning",
                   TP0's stack in spin_gpu, the process alive after the verdict
    watch-compile  --mode compile: cold Triton compiles after 0.5.23's capture line, log quiet: no
                   verdict while it compiles, compile activity in the watch's samples; HUNG after
    watch-quiet    --mode quiet: the same lines, then a sleep: HUNG in capture within the window
    ties           kit/rehearsal/greedy_ties.py on cuda in bf16 (and float32 for contrast): ties.json

The watches' JSON lines and one `"type": "gpu-host-check"` line each go to OUT/shapes.jsonl. The
judging is judge.py's (pure); watch-quiet itself runs on CPU too (a plain process: no GPU needed
for the quiet control; tests/runtime/test_gpu_shapes.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from kit.hostcheck.judge import compile_seen, judge_compile, judge_stall, result_line
from kit.hostcheck.record import ROOT, dump_json, keep_watch, remember_pgid, sh, stop_rehearsal
from kit.hostcheck.watch import watch_to_verdict

SHAPES = Path(__file__).resolve().parent / "rehearsal" / "shapes.py"


def start_shape(work: Path, mode: str, log: Path, report: Path, console_path: Path, extra: list[str]):
    """rehearsal/shapes.py in MODE in its own session (its group remembered for the check's cleanup),
    its output into CONSOLE_PATH: (the process, the open console file)."""
    for path in (log, report):
        path.unlink(missing_ok=True)
    console = console_path.open("w")
    rehearsal = subprocess.Popen(
        [sys.executable, str(SHAPES), "--log", str(log), "--mode", mode, "--report", str(report), *extra],
        stdout=console,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    remember_pgid(work, rehearsal.pid)
    return rehearsal, console


def run_watch(args, mode: str, stall: list[str], limit: float, extra: list[str]) -> dict:
    """Start the rehearsal, `kit watch --pid` it to its verdict, read what is alive, kill the tree."""
    import psutil

    work = Path(args.work)
    log = work / f"shape-{mode}.log"
    report = work / f"shape-{mode}.report.jsonl"
    console_path = work / f"shape-{mode}.out"
    started_wall = time.time()
    rehearsal, console = start_shape(work, mode, log, report, console_path, extra)
    argv = [sys.executable, "-m", "kit", "watch", "--pid", str(rehearsal.pid), "--log", str(log)]
    argv += [*stall, "--json"]
    meta: dict = {"type": "gpu-host-check", "mode": mode, "argv": argv, "rehearsal_pid": rehearsal.pid}
    lines: list[str] = []
    stamps: list[float] = []
    try:
        meta.update(watch_to_verdict(argv, limit, lines, stamps))
        code = meta["watch_exit_code"]
        result = result_line(lines)
        result_at = None
        if result is not None:
            at = [stamps[i] for i, x in enumerate(lines) if x.startswith("{") and '"result"' in x]
            result_at = round(at[-1], 2) if at else None
        meta["result_after_s"] = result_at
        alive = {}
        try:
            top = psutil.Process(rehearsal.pid)
            alive = {str(p.pid): p.status() for p in [top, *top.children(recursive=True)]}
        except psutil.NoSuchProcess:
            pass
        meta["alive_after_watch"] = alive
        phases = []
        if report.exists():
            for line in report.read_text().splitlines():
                try:
                    phases.append(json.loads(line))
                except ValueError:
                    continue
        # The rehearsal's wall-clock stamps, on the watch's clock (seconds from its start).
        for phase in phases:
            phase["at_s"] = round(phase["t"] - started_wall, 2)
        meta["rehearsal_phases"] = phases
        return {"result": result, "code": code, "result_at": result_at, "lines": lines, "meta": meta}
    finally:
        meta["killed_by_check"] = stop_rehearsal(rehearsal, console)
        tails = [(f"--- shape {mode} log:", log, 3000), (f"--- shape {mode} console:", console_path, 3000)]
        keep_watch(Path(args.out) / "shapes.jsonl", lines, meta, tails)


def alive_line(run: dict, mode: str) -> tuple[str, str]:
    alive = run["meta"]["alive_after_watch"]
    if alive and all(s != "zombie" for s in alive.values()):
        return "ok", f"{mode}: the watched tree was alive after the verdict ({len(alive)} processes)"
    return "error", f"{mode}: the watched process was gone after the watch: {alive or 'no process'}"


def _stall_step(args, status, mode: str, stage: str, window: float, said: str = "") -> None:
    """A shape that must be HUNG in STAGE within its stall WINDOW, its process alive afterwards."""
    stall = ["--stall", "launch=60", "--stall", f"{stage}={window}"]
    run = run_watch(args, mode, stall, args.watch_limit, [])
    state, head = judge_stall(run["result"], run["code"], mode)
    status.add(state, f"{head} [after {run['result_at']} s{said}]")
    status.add(*alive_line(run, mode))


def step_spin(args, status) -> None:
    _stall_step(args, status, "spin", "init", args.stall)


def step_quiet(args, status) -> None:
    _stall_step(
        args, status, "quiet", "capture", args.capture_stall, f", capture window {args.capture_stall} s"
    )


def step_compile(args, status) -> None:
    cache = Path(args.work) / "triton-cache"  # fresh: every kernel a cold compile
    if cache.exists():
        import shutil

        shutil.rmtree(cache)
    cache.mkdir(parents=True)
    os.environ["TRITON_CACHE_DIR"] = str(cache)
    code, fs, _ = sh(["stat", "-f", "-c", "%T", str(cache)], timeout=10)
    stall = ["--stall", "launch=60", "--stall", f"capture={args.capture_stall}"]
    limit = args.compile_seconds + args.capture_stall + 45
    run = run_watch(args, "compile", stall, limit, ["--compile-seconds", str(args.compile_seconds)])
    phases = run["meta"]["rehearsal_phases"]
    if any(p.get("phase") == "no-triton" for p in phases):
        status.finding(
            f"compile: not run here: the rehearsal needs triton (the watch said "
            f"{(run['result'] or {}).get('verdict')} on its exit)"
        )
        return
    begin = next((p for p in phases if p.get("phase") == "capture-begin"), None)
    done = next((p for p in phases if p.get("phase") == "compiled"), None)
    compiled = None
    if begin and done:
        compiled = {**done, "started_at": begin["at_s"], "ended_at": done["at_s"]}
    for state, text in judge_compile(
        run["result"], run["code"], run["result_at"], compiled, compile_seen(run["lines"])
    ):
        status.add(state, text)
    status.add("ok", f"compile: TRITON_CACHE_DIR {cache} on a {fs.strip() if code == 0 else '?'} filesystem")


def sample_shape(pid: int, samples: int = 2, gap_s: float = 3.0) -> tuple[list[str], list[str]]:
    """py-spy dumps of the rehearsal's rank (titled sglang::scheduler_TP0) under PID, without
    suspending it, GAP_S apart; and the compilers alive under it at each sample (by family)."""
    import psutil

    from kit.runtime.compile_cache import is_compiler
    from kit.runtime.processes import py_spy

    dumps, compilers = [], []
    tool = py_spy() or "py-spy"
    for index in range(samples):
        if index:
            time.sleep(gap_s)
        named = []
        try:
            for proc in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    named.append((proc, " ".join(proc.cmdline()), proc.name()))
        except psutil.Error:
            break
        ranks = [proc for proc, title, _ in named if title.startswith("sglang::scheduler_TP0")]
        if not ranks:
            dumps.append("(no stack: the rank is gone)")
            continue
        rank = ranks[0]
        compilers += [name for _, _, name in named if is_compiler(name)]
        done = subprocess.run(
            [tool, "dump", "--nonblocking", "--pid", str(rank.pid)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        dumps.append(done.stdout if done.returncode == 0 else f"(no stack: {done.stderr.strip()[-200:]})")
    return dumps, sorted(set(compilers))


def step_classify(args, status) -> None:
    """A real CUDA spin and a real cold Triton compile (rehearsal/shapes.py), each sampled twice by
    stack while it runs and classified by the kit's stack table: spinning, working."""
    from kit.hostcheck.judge import judge_classified
    from kit.logs.stacks import classify_stack

    work = Path(args.work)
    os.environ["TRITON_CACHE_DIR"] = str(work / "classify-triton-cache")  # cold: a real compile
    for mode, settle in (("spin", 12.0), ("compile", 8.0)):
        log, report = work / f"classify-{mode}.log", work / f"classify-{mode}.report.jsonl"
        extra = ["--compile-seconds", str(args.compile_seconds)] if mode == "compile" else []
        rehearsal, console = start_shape(work, mode, log, report, work / f"classify-{mode}.out", extra)
        try:
            time.sleep(settle)
            said = report.read_text() if report.exists() else ""
            if not said or '"cuda": false' in said or "no-triton" in said:
                why = said.strip()[-120:] or f"the rehearsal wrote no phase (torch missing? {log.name})"
                status.finding(f"classify {mode}: not run here: it needs CUDA and triton ({why})")
                continue
            dumps, compilers = sample_shape(rehearsal.pid)
            stacks = [classify_stack("TP0", dump, rehearsal.pid) for dump in dumps]
            status.add(
                *judge_classified(mode, [s.kind.value for s in stacks], [s.where for s in stacks], compilers)
            )
        finally:
            stop_rehearsal(rehearsal, console)


def step_ties(args, status) -> None:
    out = Path(args.out)
    code, smi, _ = sh(["nvidia-smi", "-L"], timeout=20)
    device = "cuda" if code == 0 and "GPU " in smi else "cpu"
    runs = {}
    for dtype in ("bfloat16", "float32"):
        target = Path(args.work) / f"ties-{dtype}.json"
        argv = [sys.executable, "-m", "kit.rehearsal.greedy_ties", str(target), "--device", device]
        argv += ["--dtype", dtype]
        if device == "cpu":  # the CPU rehearsal of the step: small, so it ends in its limit
            argv += ["--prompts", "1", "--new-tokens", "4"]
        rc, stdout, stderr = sh(argv, timeout=args.ties_limit / 2, cwd=ROOT)
        print(stdout[-2000:], stderr[-3000:], sep="\n")
        if rc != 0 or not target.exists():
            last = (stderr.strip().splitlines() or ["-"])[-1][:200]
            status.error(f"ties {dtype} on {device}: exit {rc}: {last}")
            continue
        runs[dtype] = json.loads(target.read_text())
    dump_json(out / "ties.json", runs)
    for dtype, fig in runs.items():
        below = ", ".join(f"gap<{eps} {v['step_below']:.3f}" for eps, v in fig["below"].items())
        status.ok(
            f"ties {dtype} on {fig['device']} ({fig['positions']} positions, block {fig['block']}): {below}; "
            f"argmax flips step vs verify {fig['flips']} ({fig['flip_rate']:.3f}), largest gap at a flip "
            f"{fig['largest_flip_gap']} (smallest epsilon tried that covers every flip: "
            f"{fig.get('smallest_covering_epsilon')}); torch {fig['torch']}, "
            f"transformers {fig['transformers']}, {fig['seconds']} s"
        )
