"""Time to bundle a run whose server log has 100k lines (goal: `kit bundle create` under 2 s).

    .venv/bin/python benchmarks/bundle_bench.py [--lines N] [--repeat R]

Builds, in a private kit cache, the runs folder `kit up` leaves after a HUNG verdict: a server.log
of N lines (TP 8 on 0.5.10 wording, NCCL_DEBUG=INFO chatter, seven ranks past distributed init and
TP3 never, an API key in the server_args line), result.json, fingerprint.json (four GPUs through the
kit's NVML code over the fake pynvml), py-spy stacks and a 150-package lock. Then, best of R:

  library     record.bundle_from_run (what kit up calls after the verdict)
  command     `kit bundle create RUN` in a fresh interpreter (imports included: what a person waits)
  from-log    `kit bundle create --from-log` of the same log (offline analysis of all N lines too)

and prints each time against the 2 s goal, the bundle's size and whether the API key stayed out.
Exit code 0 either way: this measures, it does not gate.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a checkout

GOAL_S = 2.0
FROM_LOG_ARGS = ("--target", "qwen-base", "--image", "sglang-0.5.10.post1-cu129-sm120")
API_KEY = "sk-bench-5f2c0d9e8b7a6f5e4d3c2b1a"


def hang_log(lines: int, tp: int = 8, seed: int = 11) -> str:
    """A TP `tp` start-up that hangs in init after `lines` lines, most of them NCCL set-up chatter."""
    rng = random.Random(seed)
    host = "gpu-node-01"
    out = [
        f"[2026-12-02 09:14:02] server_args=ServerArgs(model_path='Qwen/Qwen3.5-122B-A10B', tp_size={tp}, "
        f"api_key='{API_KEY}', host='0.0.0.0', port=30000, attention_backend='triton')",
        *[f"[2026-12-02 09:14:31 TP{r}] Init torch distributed begin." for r in range(tp)],
        "[2026-12-02 09:14:32 TP0] sglang is using nccl==2.28.3",
    ]
    second = 32
    while len(out) < lines - tp:
        r = rng.randrange(tp)
        second += rng.random() < 0.002
        out.append(
            f"{host}:{4000 + r}:{4100 + r} [{r}] NCCL INFO Channel {len(out) % 32:02d}/0 : {r}[{r}] -> "
            f"{(r + 1) % tp}[{(r + 1) % tp}] via P2P/CUMEM/read"
        )
    stamp = f"2026-12-02 09:{15 + second // 60 % 40:02d}:{second % 60:02d}"
    out += [f"[{stamp} TP{r}] Init torch distributed ends. mem usage=0.62 GB" for r in range(tp) if r != 3]
    return "\n".join(out[:lines]) + "\n"


def stack(rank: int, waiting: bool) -> str:
    frames = (
        [
            "all_reduce (torch/distributed/distributed_c10d.py:2806)",
            "init_torch_distributed (model_runner.py:612)",
        ]
        if waiting
        else ["ncclCommInitRank (pynccl_wrapper.py:301)", "init_torch_distributed (model_runner.py:598)"]
    )
    body = "\n".join(f"    {f}" for f in [*frames, "Scheduler.__init__ (scheduler.py:301)"])
    head = f"Process {1000 + rank}: sglang::scheduler_TP{rank}\n\nThread {1000 + rank} (idle): "
    return f'{head}"MainThread"\n{body}\n'


def lock_text(packages: int = 150) -> str:
    pinned = [
        "sglang==0.5.10.post1",
        "torch==2.9.1+cu129",
        "nvidia-nccl-cu12==2.28.3",
        "flashinfer-python==0.6.7.post3",
    ]
    return "\n".join(pinned + [f"package-{i:03d}==1.{i}.0" for i in range(packages - len(pinned))]) + "\n"


def make_run(cache: Path, lines: int) -> tuple[Path, Path, float]:
    """(the runs folder, the log file, seconds to make them)."""
    from kit.diagnose.fact_sources import ReplayFacts
    from kit.diagnose.fingerprint import build
    from kit.diagnose.record import result_from_analysis, write_run_folder
    from kit.diagnose.redact import Redactor
    from kit.launch import resolve
    from kit.logs import analyze_text
    from kit.logs.limits import limits_from_spec
    from kit.runtime.nvml import open_nvml
    from kit.scenarios.fake_nvml import FakeNvml

    start = time.perf_counter()
    log = hang_log(lines)
    spec = resolve("qwen-base", image="sglang-0.5.10.post1-cu129-sm120")
    limits = limits_from_spec(spec)
    result = result_from_analysis(
        analyze_text(log, limits=limits),
        target=spec.target,
        image=spec.image,
        container="kit-qwen-base-bench",
    )
    result.update(verdict="hung", exit_code=4, quiet_for_s=60.0)
    gpus = open_nvml(
        FakeNvml.of(4, name="NVIDIA RTX PRO 6000 Blackwell Workstation Edition", capability=(12, 0))
    )
    fingerprint = build(ReplayFacts(spec, gpus=gpus, scenario="bundle_bench"), limits).fingerprint
    folder = cache / "runs" / "bench0001"
    stacks = {f"TP{r}": stack(r, waiting=r != 3) for r in range(8)}
    redactor = Redactor.for_launch(argv=["--api-key", API_KEY])
    write_run_folder(folder, log, stacks, result, fingerprint, lock_text(), redactor)
    log_file = cache / "pasted.log"
    log_file.write_text(log, encoding="utf-8")
    return folder, log_file, time.perf_counter() - start


def best_of(repeat: int, fn) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds of this process and its children) over `repeat` runs.

    Both, because the CI machine's two cores are shared: a loaded host stretches wall time, while
    CPU time says what the work itself costs."""
    best_wall = best_cpu = float("inf")
    for _ in range(repeat):
        before = _cpu()
        start = time.perf_counter()
        fn()
        best_wall = min(best_wall, time.perf_counter() - start)
        best_cpu = min(best_cpu, _cpu() - before)
    return best_wall, best_cpu


def _cpu() -> float:
    mine = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kit-bundle-bench-") as tmp:
        cache = Path(tmp)
        os.environ["KIT_CACHE_DIR"] = str(cache)
        from kit.diagnose.record import bundle_from_run

        folder, log_file, made_s = make_run(cache, args.lines)
        size_mb = (folder / "server.log").stat().st_size / 1e6
        print(f"runs folder with a {args.lines:,}-line server.log ({size_mb:.1f} MB) made in {made_s:.1f} s")
        out = cache / "bench.tar.gz"
        kit = [sys.executable, "-m", "kit", "bundle", "create"]
        timings = {
            "library (bundle_from_run)": best_of(args.repeat, lambda: bundle_from_run(folder, out)),
            "command (kit bundle create RUN)": best_of(
                args.repeat,
                lambda: subprocess.run([*kit, str(folder), "-o", str(out)], check=True, capture_output=True),
            ),
        }
        size_kb = out.stat().st_size / 1024
        leaked = API_KEY.encode() in out.read_bytes()
        from_log = cache / "from-log.tar.gz"
        timings["from-log (kit bundle create --from-log)"] = best_of(
            args.repeat,
            lambda: subprocess.run(
                [*kit, "--from-log", str(log_file), *FROM_LOG_ARGS, "-o", str(from_log)],
                check=True,
                capture_output=True,
            ),
        )
        verdict = "PASS"
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        for name, (seconds, cpu) in timings.items():
            status = "PASS" if seconds < GOAL_S else "OVER GOAL"
            if name.startswith("command") and seconds >= GOAL_S:
                verdict = "OVER GOAL"
            ratio = f"{seconds / GOAL_S:.2f} x the {GOAL_S:.0f} s goal"
            print(f"{name:<40} wall {seconds:6.3f} s = {ratio}: {status}  (CPU {cpu:.3f} s)")
        print(f"bundle: {size_kb:.0f} KB; the API key in its bytes: {'YES (leak)' if leaked else 'no'}")
        print(f"kit bundle create for a {args.lines:,}-line run: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
