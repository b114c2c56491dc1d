"""What a watch said against what ran: pure functions over `kit watch --json`'s lines and what the
step saw (tests/hostcheck/test_judge.py judges recorded output with them).

    result_line(lines)              the watch's last result object
    judge_watch(...)                watch-hang / watch-crash: the verdict, GPU memory by PID, the tree
    judge_stall(result, code, mode) watch-spin / watch-quiet: HUNG in the expected phase
    compile_seen(lines)             the largest compile figures in the watch's activity samples
    judge_compile(...)              watch-compile: no verdict while compiling, HUNG after
"""

from __future__ import annotations

import contextlib
import json

from kit.hostcheck.record import GIB

# watch-hang and watch-crash: (verdict, exit code) the watch must give.
WATCH_EXPECT = {"hang": ("hung", 4), "crash": ("crashed", 1)}
# The shapes' rehearsal modes: (verdict, exit code, phase).
EXPECT = {
    "spin": ("hung", 4, "init"),
    "quiet": ("hung", 4, "capture"),
}
SPIN_FRAME = "spin_gpu"  # the spin rehearsal's loop, as py-spy names TP0's frame


def result_line(lines: list[str]) -> dict | None:
    """The watch's last `"type": "result"` object among its JSON lines."""
    for line in reversed(lines):
        with contextlib.suppress(ValueError):
            obj = json.loads(line)
            if isinstance(obj, dict) and obj.get("type") == "result":
                return obj
    return None


def judge_watch(
    mode: str, result: dict | None, code: int | None, lines: list[str], alive: dict, meta: dict
) -> list[tuple[str, str]]:
    """watch-hang / watch-crash: (status, line) pairs. `alive`: pid -> {"status", ...} of the watched
    tree after the watch; `meta`: result_after_s, watch_seconds, watch_stderr_tail."""
    if result is None:
        return [
            (
                "error",
                f"{mode}: no result line from kit watch (exit {code}, {meta['watch_seconds']} s): "
                f"{(meta['watch_stderr_tail'].strip().splitlines() or ['-'])[-1][:200]}",
            )
        ]
    expected = WATCH_EXPECT[mode]
    verdict = result.get("verdict")
    activity = result.get("activity") or {}
    stacks = "; ".join(f"{s['rank']} {s['kind']}: {s['where']}" for s in result.get("stacks") or []) or "none"
    headline = (
        f"{mode}: {str(verdict).upper()} in {result.get('phase')} exit {code} "
        f"after {meta.get('result_after_s')} s; activity {activity.get('shape')} "
        f"cpu {activity.get('cpu_cores')} cores, gpu_mem_delta {activity.get('gpu_mem_delta_gib')} GiB, "
        f"gpu_error {result.get('gpu_error') or activity.get('gpu_error')}; stacks {stacks}"
    )
    said = []
    if (verdict, code) == expected:
        said.append(("ok", headline))
    else:
        said.append(("finding", f"expected {expected[0].upper()} exit {expected[1]}; got {headline}"))
    gpu_mems = [json.loads(x).get("gpu_mem_bytes") for x in lines if '"activity"' in x and x.startswith("{")]
    seen = [m for m in gpu_mems if m]
    if seen:
        said.append(("ok", f"{mode}: the watch read GPU memory by PID: up to {max(seen) / GIB:.2f} GiB"))
    else:
        said.append(
            (
                "finding",
                f"{mode}: the watch's activity lines carry no GPU memory (gpu_mem_bytes {set(gpu_mems)})",
            )
        )
    if mode == "hang":
        if alive and all(v["status"] != "zombie" for v in alive.values()):
            said.append(("ok", f"hang: the watched tree is alive after the verdict ({len(alive)} processes)"))
        else:
            said.append(
                ("error", f"hang: the watched process is gone after the watch: {alive or 'no process'}")
            )
        kinds = {s.get("kind") for s in result.get("stacks") or []}
        if "rendezvous" not in kinds:
            said.append(("finding", f"hang: no stack classified as rendezvous (kinds {kinds or 'none'})"))
    return said


def activity_lines(lines: list[str]) -> list[dict]:
    found = []
    for line in lines:
        if line.startswith("{") and '"activity"' in line:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                found.append(obj)
    return found


def compile_seen(lines: list[str]) -> dict:
    """The largest compile figures among the watch's activity samples (None where never known)."""
    samples = activity_lines(lines)
    written = [s.get("compile_bytes") for s in samples if s.get("compile_bytes") is not None]
    compilers = [s.get("compilers") for s in samples if s.get("compilers") is not None]
    return {
        "samples": len(samples),
        "max_compile_bytes": max(written) if written else None,
        "max_compilers": max(compilers) if compilers else None,
    }


# What the stack table (kit/logs/stacks.py) must call each real shape on a GPU host (issue 36 item 6):
# a rank spinning in a CUDA synchronize is "spinning", a rank in a cold Triton compile is "working"
# (and its compiler child, ptxas-blackwell for sm_120, is a compiler by family).
CLASSIFY_EXPECT = {"spin": "spinning", "compile": "working"}


def judge_classified(mode: str, kinds: list[str], wheres: list[str], compilers: list[str]) -> tuple[str, str]:
    """(status, line) for a shape sampled by stack: every sample classified as expected; the compile
    also with a compiler child seen, or its frames in Triton's compiler."""
    want = CLASSIFY_EXPECT[mode]
    head = (
        f"classify {mode}: {len(kinds)} samples {', '.join(kinds) or 'none'}; where "
        f"{' | '.join(wheres) or '-'}; compilers {', '.join(compilers) or 'none'}"
    )
    wrong = []
    if len(kinds) < 2:
        wrong.append("expected two stack samples")
    if any(kind != want for kind in kinds):
        wrong.append(f"expected every sample {want}")
    if mode == "compile" and not compilers and not any("triton" in where for where in wheres):
        wrong.append("expected a compiler child or Triton's compiler in the stack")
    return ("finding", "; ".join(wrong) + "; got " + head) if wrong else ("ok", head)


def judge_stall(result: dict | None, code: int | None, mode: str) -> tuple[str, str]:
    """(status, headline) for the spin and quiet shapes: HUNG in the expected phase, exit 4; the
    spin also "spinning" with TP0's stack in the spin."""
    verdict, exit_code, phase = EXPECT[mode]
    if result is None:
        return "error", f"{mode}: no result line from kit watch (exit {code})"
    activity = result.get("activity") or {}
    stacks = result.get("stacks") or []
    where = "; ".join(f"{s.get('rank')} {s.get('kind')}: {s.get('where')}" for s in stacks) or "none"
    head = (
        f"{mode}: {str(result.get('verdict')).upper()} in {result.get('phase')} exit {code}; "
        f"activity {activity.get('shape')} cpu {activity.get('cpu_cores')} cores "
        f"gpu_util {activity.get('gpu_util')}; stacks {where}"
    )
    wrong = []
    if (result.get("verdict"), code) != (verdict, exit_code):
        wrong.append(f"expected {verdict.upper()} exit {exit_code}")
    if phase not in str(result.get("phase") or ""):
        wrong.append(f"expected phase {phase}")
    if mode == "spin":
        if activity.get("shape") != "spinning":
            wrong.append("expected activity 'spinning'")
        if SPIN_FRAME not in json.dumps(stacks):
            wrong.append(f"expected TP0's stack in {SPIN_FRAME}")
    return ("finding", "; ".join(wrong) + "; got " + head) if wrong else ("ok", head)


def judge_compile(
    result: dict | None,
    code: int | None,
    result_at: float | None,
    compiled: dict | None,
    seen: dict,
) -> list[tuple[str, str]]:
    """The compile shape: no verdict before the compiles ended (times on the watch's clock, seconds
    from its start), compile activity in the samples, and (the quiet after) HUNG in capture."""
    if compiled is None:
        return [("error", "compile: the rehearsal reported no compile (no CUDA or no triton?)")]
    end = compiled["ended_at"]
    said = (
        f"compile: {compiled['kernels']} cold Triton compiles ({compiled.get('how')}) from "
        f"{compiled['started_at']:.1f} s to {end:.1f} s, cache {compiled.get('cache_bytes')} bytes"
    )
    out = []
    if result is not None and result_at is not None and result_at < end:
        out.append(("finding", f"{said}; but the watch said {result.get('verdict')} at {result_at:.1f} s"))
    else:
        out.append(("ok", f"{said}; no verdict while compiling"))
    if seen["max_compile_bytes"] or seen["max_compilers"]:
        out.append(
            (
                "ok",
                f"compile: activity seen: up to {seen['max_compile_bytes']} bytes written, "
                f"{seen['max_compilers']} compilers at once ({seen['samples']} samples)",
            )
        )
    else:
        out.append(("finding", f"compile: no compile activity in the watch's samples: {seen}"))
    if result is None:
        out.append(("finding", f"compile: no verdict after the compiles ended (watch exit {code})"))
    elif result_at is not None and result_at >= end:
        status = "ok" if (result.get("verdict"), code) == ("hung", 4) else "finding"
        out.append(
            (
                status,
                f"compile: then {str(result.get('verdict')).upper()} in {result.get('phase')} exit {code} "
                f"at {result_at:.1f} s, {result_at - end:.1f} s after the last compile",
            )
        )
    return out
