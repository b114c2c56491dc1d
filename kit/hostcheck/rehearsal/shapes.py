"""A REHEARSAL of two start-up shapes on a real GPU, not SGLang: a rank that spins, a rank that compiles.

    python3 kit/hostcheck/rehearsal/shapes.py --log FILE --mode spin|compile|quiet [--compile-seconds S]
        [--report JSON]

It exists so that `kit watch --pid N --log FILE` can be pointed at real processes on a GPU host with
no SGLang (kit/hostcheck/shape_steps.py, steps watch-spin, watch-compile, watch-quiet;
docs/gpu-host-check.md). The process tree, the title `sglang::scheduler_TP0` and the launcher are
those of hang.py beside it. Run by path on a Python with torch; it imports nothing of the kit.

- **spin**: the launcher's and TP0's lines up to `Init parallel begin.` (SGLang 0.5.23's own, as in
  hang.py), then TP0 keeps its GPU busy with no log line and no memory growth: a bf16
  matmul into the same output tensor, over and over (`spin_gpu`). The shape of a hung collective
  (GPU at 100 %, a core busy, nothing moving), not a collective: no NCCL code runs. Without CUDA it
  spins the same loop on the CPU.
- **compile**: TP0's lines through `Memory pool end.` (verbatim from the kit's real 0.5.23 run,
  tests/fixtures/kit-logs/sglang-0.5.23-cpu-tiny-tp2-ready.log lines 38, 44, 82, 86, 89, 92), then
  0.5.23's capture line (the format of srt/model_executor/model_runner_components/cuda_graph_setup.py
  in sglang 0.5.23: `Capture target decode CUDA graph begin. backend=..., num_tokens_per_req=1, avail
  mem=... GB`), then real cold Triton compiles (TRITON_CACHE_DIR as given, empty) of distinct
  @triton.jit kernels one after the other for `--compile-seconds`, with the log quiet, then quiet.
  What a first start's JIT does inside capture. Needs triton; without CUDA (the check's CPU
  rehearsal) the same kernels are compiled ahead of time for sm_90 (Triton's compiler and ptxas, no
  launch).
- **quiet**: the same lines to the capture line, then nothing (a sleep): the no-compile control.
  Needs no torch (then it holds no GPU memory: a plain process).

`--report` gets a JSON line per phase change (what was compiled, when, the cache's size), so the
check can set the watch's verdict against what really ran.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

try:  # imported as part of the kit (the tests)
    from kit.hostcheck.rehearsal.hang import HOLD_BYTES, INIT_BEGIN, LAUNCHER_LINES, TITLE, write
except ImportError:  # run by path, where no kit need be importable: hang.py is beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from hang import HOLD_BYTES, INIT_BEGIN, LAUNCHER_LINES, TITLE, write

# TP0's lines after `Init parallel begin.`, verbatim from the kit's real SGLang 0.5.23 run
# (tests/fixtures/kit-logs/sglang-0.5.23-cpu-tiny-tp2-ready.log lines 44, 82, 86, 89, 92).
TO_MEMORY_POOL = (
    "Init parallel ends. elapsed=0.59 s",
    "Load weight begin. avail mem=21.30 GB",
    "Load weight end. elapsed=0.03 s, type=Qwen2ForCausalLM, avail mem=21.29 GB, mem usage=0.01 GB.",
    "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 65536, K size: 0.00 GB, V size: 0.00 GB",
    "Memory pool end. avail mem=21.15 GB",
)
# SGLang 0.5.23 cuda_graph_setup.py: f"Capture {capture_name} {graph_backend[device]} begin. "
# f"backend={decode_backend}, num_tokens_per_req={num_tokens_per_req}, avail mem={before_mem:.2f} GB"
CAPTURE_BEGIN = (
    "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=21.10 GB"
)
SPIN_SIZE = 4096


def report(path: str | None, **fields) -> None:
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"t": round(time.time(), 3), **fields}) + "\n")


def spin_gpu(torch, device: str) -> None:
    """The spin: one matmul after another into the same tensor; no allocation, no line, no end."""
    size, dtype = SPIN_SIZE, torch.bfloat16
    if device == "cpu":  # the CPU rehearsal of the check: one core, a small matrix
        torch.set_num_threads(1)
        size, dtype = 256, torch.float32
    a = torch.randn(size, size, device=device, dtype=dtype)
    out = torch.empty_like(a)
    while True:
        for _ in range(50):
            torch.matmul(a, a, out=out)
        if device != "cpu":
            torch.cuda.synchronize()  # keeps the launch queue short: the stack stays in this loop


try:  # on the GPU host (torch cu130 ships triton); module level, so the kernels' names are globals
    import triton
    import triton.language as tl
except ImportError:
    triton = None

if triton is not None:

    @triton.jit
    def scale_add(x, y, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y + offs, tl.load(x + offs, mask=mask) * SCALE + 1.0, mask=mask)

    @triton.jit
    def gated(x, y, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        v = tl.load(x + offs, mask=mask)
        tl.store(y + offs, v * tl.sigmoid(v * SCALE), mask=mask)

    @triton.jit
    def row_softmax(x, y, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        mask = offs < n
        v = tl.load(x + offs, mask=mask, other=0.0) * SCALE
        e = tl.exp(v - tl.max(v, axis=0))
        tl.store(y + offs, e / tl.sum(e, axis=0), mask=mask)

    # Three distinct kernels; each (kernel, SCALE) pair is a fresh cold compile.
    KERNELS = (scale_add, gated, row_softmax)


def compile_for(torch, seconds: float, report_path: str | None) -> None:
    """Cold compiles for `seconds`. With CUDA: JIT launches (compile, load, run). Without (the CPU
    rehearsal of the check): the same compiles ahead of time for sm_90, Triton's compiler and its
    ptxas, nothing launched."""
    kernels = KERNELS
    how = "jit launches on cuda"
    if torch is not None and torch.cuda.is_available():
        x = torch.randn(1024, device="cuda")
        y = torch.empty_like(x)

        def one(kernel, scale):
            kernel[(1,)](x, y, 1024, SCALE=scale, BLOCK=1024)
            torch.cuda.synchronize()

    else:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource

        signature = {"x": "*fp32", "y": "*fp32", "n": "i32", "SCALE": "constexpr", "BLOCK": "constexpr"}
        how = "ahead of time for sm_90, no GPU"

        def one(kernel, scale):
            source = ASTSource(fn=kernel, signature=signature, constexprs={"SCALE": scale, "BLOCK": 1024})
            triton.compile(source, target=GPUTarget("cuda", 90, 32))

    done, t0, i = [], time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        kernel = kernels[i % len(kernels)]
        scale = 1 + i // len(kernels)  # a new constexpr: a new compile, never a cache hit
        started = time.monotonic()
        one(kernel, scale)
        done.append((getattr(kernel, "__name__", str(i)), scale, time.monotonic() - started))
        i += 1
    cache = Path(os.environ.get("TRITON_CACHE_DIR", "~/.triton/cache")).expanduser()
    size = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()) if cache.is_dir() else None
    report(
        report_path,
        phase="compiled",
        how=how,
        kernels=len(done),
        seconds=round(time.monotonic() - t0, 2),
        each_s=[round(d[2], 2) for d in done],
        cache_dir=str(cache),
        cache_bytes=size,
    )
    print(f"compiled {len(done)} kernels in {time.monotonic() - t0:.1f} s; cache {size} bytes", flush=True)


def scheduler(args: argparse.Namespace) -> int:
    try:
        import torch
    except ImportError:  # quiet needs none (a plain process), nor compile's CPU rehearsal (triton alone)
        if args.mode == "spin":
            raise
        torch = None
    cuda = torch is not None and torch.cuda.is_available()
    held = None
    if cuda:
        torch.cuda.set_device(0)
        held = torch.empty(HOLD_BYTES, dtype=torch.uint8, device="cuda:0")
        held.fill_(1)
        torch.cuda.synchronize()
    print(f"shape rehearsal scheduler pid {os.getpid()}: mode={args.mode} cuda={cuda}", flush=True)
    write(args.log, INIT_BEGIN, "TP0")
    if args.mode == "spin":
        report(args.report, phase="spin", cuda=cuda)
        spin_gpu(torch, "cuda" if cuda else "cpu")
        return 0
    for line in TO_MEMORY_POOL:
        write(args.log, line, "TP0")
    write(args.log, CAPTURE_BEGIN, "TP0")
    report(args.report, phase="capture-begin", cuda=cuda)
    if args.mode == "compile":
        if triton is None:
            print("compile mode needs triton; none here", flush=True)
            report(args.report, phase="no-triton")
            return 3
        compile_for(torch, args.compile_seconds, args.report)
    report(args.report, phase="quiet")
    time.sleep(900)
    return 0


def launcher(args: argparse.Namespace) -> int:
    for line in LAUNCHER_LINES:
        write(args.log, line)
    env = dict(os.environ, PYTHONEXECUTABLE=sys.executable)
    child = subprocess.Popen(
        [TITLE, os.path.abspath(__file__), "--scheduler", *sys.argv[1:]], executable=sys.executable, env=env
    )
    print(f"shape rehearsal launcher pid {os.getpid()}, scheduler pid {child.pid}", flush=True)
    return child.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True)
    parser.add_argument("--mode", choices=("spin", "compile", "quiet"), required=True)
    parser.add_argument("--compile-seconds", type=float, default=40.0)
    parser.add_argument("--report")
    parser.add_argument("--scheduler", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    return scheduler(args) if args.scheduler else launcher(args)


if __name__ == "__main__":
    sys.exit(main())
