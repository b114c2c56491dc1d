"""What this image really has and does, as one JSON object on stdout: `python /opt/kit/verify.py`.

Copied into every kit image at /opt/kit/verify.py; `kit image verify NAME` copies the kit's own
version of this file into a fresh container of the image, runs it, and compares the answer with
images/NAME.toml. It must stay self-contained: the standard library, plus torch when the image has
it.

Besides versions it runs three things, each in child processes of its own (started from this file)
so that a crash or a hang in one is reported, not fatal, and is killed at a deadline:
- kernels: imports sgl_kernel and flashinfer and runs one sgl_kernel op against torch (on every GPU;
  in the CPU rehearsal image, the stand-in's op on the CPU);
- an all_reduce over N ranks, one process per rank: NCCL with one GPU per rank, or gloo on the CPU.
  The same code either way; only the backend and the device differ;
- `py-spy --version`.

Options: --skip-gpu (never touch CUDA devices), --all-reduce nccl|gloo (--world N for gloo; NCCL
takes every visible GPU), --collective-timeout S, --no-kernels, --pretty (indented JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

MARKER = "KIT-VERIFY-JSON "
"""Prefixes the JSON line: base images may print banners to stdout before any command runs."""
EVENT = "KIT-EVENT "
"""Prefixes a child process's progress lines, so the parent knows where a killed child stood."""
SCHEMA = 2

# The distributions a manifest pins, plus the ones that would betray drift if present.
DISTRIBUTIONS = (
    "torch",
    "torchvision",
    "torchaudio",
    "sglang",
    "sglang-kernel",
    "sgl-kernel",
    "flashinfer-python",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
    "nvidia-nccl-cu12",
    "nvidia-nccl-cu13",
    "triton",
    "transformers",
)
# Modules the CPU rehearsal replaces with stand-ins (kit/rehearsal/shims); located here, never
# imported in this process unless they are the stand-ins, which are plain Python.
MODULES = ("sgl_kernel", "torchvision", "flashinfer")
# Imported by the kernels child (a CUDA build's import can crash or need a driver).
KERNEL_MODULES = ("sgl_kernel", "flashinfer")
STAND_IN_MARK = "+kit.cpu.rehearsal"

KERNELS_TIMEOUT_S = 240.0
"""Importing flashinfer on a cold page cache takes tens of seconds; a hang is killed here."""
GRACE_S = 5.0
"""Once one rank has failed, how long the others get before they are killed (they would wait
for the failed rank until the collective timeout)."""
ALL_REDUCE_ELEMENTS = 1 << 20
"""4 MiB of float32: big enough for NCCL's ring/P2P protocols, not only its small-message path."""

SELF = globals().get("__file__")
"""This file, which the child processes run; None when the probe was started with `python -c`."""


# --- facts of this process ----------------------------------------------------------------------


def dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def locate_module(name: str) -> dict:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        return {"found": False, "error": f"{type(exc).__name__}: {exc}"}
    if spec is None:
        return {"found": False}
    origin = spec.origin or next(iter(spec.submodule_search_locations or [""]))
    info: dict = {"found": True, "origin": origin, "stand_in": False, "version": None}
    # The kit's stand-ins live under /opt/kit/rehearsal and say so in __version__; only they are
    # imported here (they are plain Python over torch).
    if origin and "/rehearsal/shims/" in origin:
        try:
            module = __import__(name)
            info["version"] = getattr(module, "__version__", None)
            info["stand_in"] = str(info["version"] or "").endswith(STAND_IN_MARK)
        except Exception as exc:  # report, never crash: the host decides what it means
            info["error"] = f"{type(exc).__name__}: {exc}"
    return info


def torch_facts(skip_gpu: bool) -> dict:
    try:
        import torch
    except Exception as exc:
        return {"imported": False, "error": f"{type(exc).__name__}: {exc}"}
    facts: dict = {
        "imported": True,
        "version": str(torch.__version__),
        "cuda": torch.version.cuda,
        "nccl": None,
        "arch_list": [],
        "cuda_available": False,
        "device_count": 0,
        "gpus": [],
    }
    if torch.version.cuda:
        try:
            version = torch.cuda.nccl.version()
            facts["nccl"] = ".".join(str(p) for p in version) if isinstance(version, tuple) else str(version)
        except Exception as exc:
            facts["nccl_error"] = f"{type(exc).__name__}: {exc}"
        try:
            facts["arch_list"] = list(torch.cuda.get_arch_list())
        except Exception as exc:
            facts["arch_list_error"] = f"{type(exc).__name__}: {exc}"
    if skip_gpu or not torch.version.cuda:
        return facts
    try:
        facts["cuda_available"] = bool(torch.cuda.is_available())
        facts["device_count"] = torch.cuda.device_count() if facts["cuda_available"] else 0
        if not facts["cuda_available"]:
            torch.cuda.init()  # raises the reason is_available() only warns about (no driver, too old)
    except Exception as exc:
        facts["cuda_error"] = f"{type(exc).__name__}: {exc}"
        return facts
    for index in range(facts["device_count"]):
        facts["gpus"].append(gpu_op(torch, index))
    return facts


def gpu_op(torch, index: int) -> dict:
    """A small matmul on one GPU, checked against the CPU: proves a kernel image for this GPU exists
    and runs (capability alone is not proof)."""
    entry: dict = {"index": index, "name": None, "capability": None, "ok": False, "ms": None, "error": None}
    try:
        entry["name"] = torch.cuda.get_device_name(index)
        major, minor = torch.cuda.get_device_capability(index)
        entry["capability"] = f"{major}.{minor}"
        generator = torch.Generator().manual_seed(index)
        a = torch.randn(256, 256, generator=generator)
        b = torch.randn(256, 256, generator=generator)
        started = time.perf_counter()
        with torch.cuda.device(index):
            got = (a.to(f"cuda:{index}") @ b.to(f"cuda:{index}")).cpu()
            torch.cuda.synchronize(index)
        entry["ms"] = round((time.perf_counter() - started) * 1000, 2)
        want = a @ b
        # Loose enough for TF32, tight enough that garbage fails.
        entry["ok"] = bool(torch.allclose(got, want, rtol=1e-2, atol=1e-1))
        if not entry["ok"]:
            entry["error"] = f"matmul differs from the CPU (max |diff| {float((got - want).abs().max()):.3g})"
    except Exception as exc:
        entry["error"] = f"{type(exc).__name__}: {exc}"
    return entry


def py_spy_facts() -> dict:
    """py-spy is how the kit dumps a hung rank's stack: it must be there and run."""
    path = shutil.which("py-spy")
    facts: dict = {"version": dist_version("py-spy"), "path": path, "output": None, "rc": None, "error": None}
    if not path:
        facts["error"] = "no py-spy on PATH"
        return facts
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        facts["rc"] = done.returncode
        facts["output"] = (done.stdout.strip() or done.stderr.strip())[:200]
    except Exception as exc:
        facts["error"] = f"{type(exc).__name__}: {exc}"
    return facts


# --- child processes ----------------------------------------------------------------------------


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


def _ended(result: dict, timeout_s: float) -> str:
    """How a child that never reported its end ended."""
    if result["killed"]:
        return f"did not finish in {timeout_s:g} s (killed)"
    rc = result["rc"]
    if rc is not None and rc < 0:
        return f"the process died of signal {-rc}"
    return f"the process exited {rc}"


# --- kernels: import sgl_kernel and flashinfer, run one sgl_kernel op ----------------------------


def _stand_in_op(sgl_kernel, torch) -> dict:
    """The CPU stand-in's one real op, which SGLang calls on every prefill, against plain indexing."""
    req_to_token = torch.zeros((3, 8), dtype=torch.int32)
    out_cache_loc = torch.tensor([10, 11, 12, 20, 21], dtype=torch.int64)
    sgl_kernel.assign_req_to_token_pool_cpu(
        torch.tensor([2, 0]), req_to_token, torch.tensor([1, 0]), torch.tensor([4, 2]), out_cache_loc, 8
    )
    want = torch.zeros((3, 8), dtype=torch.int32)
    want[2, 1:4] = torch.tensor([10, 11, 12], dtype=torch.int32)
    want[0, 0:2] = torch.tensor([20, 21], dtype=torch.int32)
    ok = bool(torch.equal(req_to_token, want))
    return {"device": "cpu", "ok": ok, "error": None if ok else "the stand-in wrote other slots than torch"}


def _silu_and_mul(sgl_kernel, torch, index: int) -> dict:
    """SiLU(x[:, :d]) * x[:, d:] (every Qwen MLP layer runs it) on one GPU, against torch."""
    generator = torch.Generator().manual_seed(1000 + index)
    x = torch.randn(64, 2 * 512, generator=generator).to(torch.float16)
    d = x.shape[-1] // 2
    want = torch.nn.functional.silu(x[:, :d].float()) * x[:, d:].float()
    got = sgl_kernel.silu_and_mul(x.to(f"cuda:{index}"))
    torch.cuda.synchronize(index)
    diff = float((got.float().cpu() - want).abs().max())
    ok = bool(torch.allclose(got.float().cpu(), want, rtol=2e-2, atol=2e-2))
    return {
        "max_diff": round(diff, 6),
        "ok": ok,
        "error": None if ok else f"differs from torch by {diff:.3g}",
    }


def _rmsnorm(sgl_kernel, torch, index: int) -> dict:
    generator = torch.Generator().manual_seed(2000 + index)
    x = torch.randn(64, 1024, generator=generator).to(torch.float16)
    w = torch.randn(1024, generator=generator).to(torch.float16)
    xf = x.float()
    want = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    got = sgl_kernel.rmsnorm(x.to(f"cuda:{index}"), w.to(f"cuda:{index}"), 1e-6)
    torch.cuda.synchronize(index)
    diff = float((got.float().cpu() - want).abs().max())
    ok = bool(torch.allclose(got.float().cpu(), want, rtol=2e-2, atol=5e-2))
    return {
        "max_diff": round(diff, 6),
        "ok": ok,
        "error": None if ok else f"differs from torch by {diff:.3g}",
    }


GPU_OPS = (("silu_and_mul", _silu_and_mul), ("rmsnorm", _rmsnorm))
"""The first one this sgl_kernel has is run."""


def kernels_child(skip_gpu: bool) -> int:
    try:
        import torch
    except Exception as exc:
        emit(stage="torch", ok=False, error=f"{type(exc).__name__}: {exc}")
        return 1
    modules = {}
    for name in KERNEL_MODULES:
        if importlib.util.find_spec(name) is None:
            emit(stage="import", module=name, found=False)
            continue
        emit(stage="import begin", module=name)
        started = time.perf_counter()
        try:
            module = importlib.import_module(name)
        except BaseException as exc:  # SystemExit and friends from a broken build are reported too
            emit(
                stage="import", module=name, found=True, ok=False, error=f"{type(exc).__name__}: {exc}"[:1000]
            )
            continue
        modules[name] = module
        version = getattr(module, "__version__", None)
        emit(
            stage="import",
            module=name,
            found=True,
            ok=True,
            seconds=round(time.perf_counter() - started, 2),
            version=str(version) if version is not None else None,
            stand_in=str(version or "").endswith(STAND_IN_MARK),
        )
    sgl_kernel = modules.get("sgl_kernel")
    if sgl_kernel is None:
        emit(stage="op", ran=False, blocked=True, why="sgl_kernel did not import")
        return 0
    if str(getattr(sgl_kernel, "__version__", "")).endswith(STAND_IN_MARK):
        emit(stage="op begin", name="assign_req_to_token_pool_cpu", device="cpu")
        try:
            result = _stand_in_op(sgl_kernel, torch)
        except Exception as exc:
            result = {"device": "cpu", "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        emit(stage="op result", **result)
        emit(stage="op", ran=True, stand_in=True, name="assign_req_to_token_pool_cpu")
        return 0
    if skip_gpu:
        emit(stage="op", ran=False, blocked=True, why="--skip-gpu")
        return 0
    if not torch.cuda.is_available():
        emit(stage="op", ran=False, blocked=True, why="CUDA sees no GPU")
        return 0
    name, op = next(((n, f) for n, f in GPU_OPS if hasattr(sgl_kernel, n)), (None, None))
    if op is None:
        emit(stage="op", ran=False, why=f"sgl_kernel has none of {', '.join(n for n, _ in GPU_OPS)}")
        return 0
    emit(stage="op begin", name=name, device="cuda")
    for index in range(torch.cuda.device_count()):
        try:
            result = op(sgl_kernel, torch, index)
        except Exception as exc:
            result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:1000]}
        emit(stage="op result", device=f"cuda:{index}", **result)
    emit(stage="op", ran=True, stand_in=False, name=name)
    return 0


def kernels(skip_gpu: bool) -> dict:
    """The kernels child's report: per module import, and the op's results per device."""
    info: dict = {"ran": False, "imports": {}, "op": {"ran": False, "results": []}}
    if not SELF:
        info["why"] = "the probe was not started from a file"
        return info
    command = [sys.executable, SELF, "--child-kernels"] + (["--skip-gpu"] if skip_gpu else [])
    (result,), seconds = run_children([command], KERNELS_TIMEOUT_S, child_env(hide_gpus=skip_gpu))
    info.update(ran=True, seconds=seconds, rc=result["rc"], killed=result["killed"])
    info["stderr_tail"] = result["stderr_tail"]
    op = info["op"]
    for event in result["events"]:
        stage = event.pop("stage", None)
        if stage == "torch":
            info["error"] = event.get("error")
        elif stage == "import begin":
            info["imports"][event["module"]] = {"found": True, "ok": None}
        elif stage == "import":
            info["imports"][event.pop("module")] = event
        elif stage == "op begin":
            op.update(name=event.get("name"), device=event.get("device"), began=True)
        elif stage == "op result":
            op["results"].append(event)
        elif stage == "op":
            op.update(event)
            op.pop("began", None)
    ended = _ended(result, KERNELS_TIMEOUT_S)
    for entry in info["imports"].values():
        if entry.get("found") and entry.get("ok") is None:  # began, never finished
            entry.update(ok=False, error=f"the import never finished: {ended}")
    if op.pop("began", None):
        op.update(ran=True, error=f"the op never finished: {ended}")
    return info


# --- all_reduce over N ranks ---------------------------------------------------------------------


def rank_child(rank: int, world: int, backend: str, port: int, timeout_s: float) -> int:
    emit(stage="start", rank=rank)
    try:
        import torch
        import torch.distributed as dist

        device = torch.device("cpu")
        if backend == "nccl":
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
        kwargs: dict = {
            "backend": backend,
            "init_method": f"tcp://127.0.0.1:{port}",
            "rank": rank,
            "world_size": world,
            "timeout": datetime.timedelta(seconds=timeout_s),
        }
        # NCCL builds its communicator lazily unless given the device: eager, a hang in NCCL's
        # own set-up (P2P, ACS) shows as the init stage, not as the collective.
        if backend == "nccl" and "device_id" in inspect.signature(dist.init_process_group).parameters:
            kwargs["device_id"] = device
        emit(stage="init")
        started = time.perf_counter()
        dist.init_process_group(**kwargs)
        init_s = round(time.perf_counter() - started, 3)
        emit(stage="all_reduce", init_s=init_s)
        tensor = torch.full((ALL_REDUCE_ELEMENTS,), float(rank + 1), dtype=torch.float32, device=device)
        started = time.perf_counter()
        dist.all_reduce(tensor)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        reduce_s = round(time.perf_counter() - started, 3)
        want = world * (world + 1) / 2
        low, high = float(tensor.min()), float(tensor.max())
        emit(stage="done", ok=low == high == want, low=low, high=high, want=want, all_reduce_s=reduce_s)
        dist.destroy_process_group()
    except Exception as exc:
        emit(stage="error", error=f"{type(exc).__name__}: {exc}"[:1000])
        return 1
    return 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def all_reduce(backend: str, world: int, timeout_s: float) -> dict:
    """Sum of (rank + 1) over `world` ranks, one process each; every rank must see the same sum."""
    info: dict = {
        "backend": backend,
        "device": "cuda" if backend == "nccl" else "cpu",
        "world": world,
        "elements": ALL_REDUCE_ELEMENTS,
        "timeout_s": timeout_s,
        "ran": False,
    }
    if world < 1:
        info["why"] = "CUDA sees no GPU" if backend == "nccl" else "no ranks"
        return info
    if not SELF:
        info["why"] = "the probe was not started from a file"
        return info
    port = str(free_port())
    commands = [
        [sys.executable, SELF, "--child-rank", str(rank), "--world", str(world), "--backend", backend,
         "--port", port, "--collective-timeout", str(timeout_s)]
        for rank in range(world)
    ]  # fmt: skip
    results, seconds = run_children(commands, timeout_s, child_env())
    ranks = []
    for rank, result in enumerate(results):
        last = result["events"][-1] if result["events"] else {"stage": "start"}
        entry = {"rank": rank, "stage": last.get("stage"), "ok": bool(last.get("ok")), "rc": result["rc"]}
        entry.update({k: last[k] for k in ("low", "high", "want", "all_reduce_s") if k in last})
        init = next((e["init_s"] for e in result["events"] if "init_s" in e), None)
        if init is not None:
            entry["init_s"] = init
        if last.get("stage") == "error":
            entry["error"] = last.get("error")
        elif last.get("stage") != "done":
            entry["error"] = f"stuck in {last.get('stage')}: {_ended(result, timeout_s)}"
        if not entry["ok"]:
            entry["stderr_tail"] = result["stderr_tail"]
        ranks.append(entry)
    info.update(
        ran=True,
        ok=all(r["ok"] for r in ranks),
        seconds=seconds,
        timed_out=any(r["killed"] for r in results),
        ranks=ranks,
    )
    return info


# --- the report ---------------------------------------------------------------------------------


def collect(
    skip_gpu: bool = False,
    *,
    collective: str | None = None,
    world: int = 2,
    collective_timeout_s: float = 90.0,
    run_kernels: bool = True,
) -> dict:
    facts = torch_facts(skip_gpu)
    report = {
        "schema": SCHEMA,
        "python": platform.python_version(),
        "executable": sys.executable,
        "env": {k: os.environ.get(k) for k in ("CUDA_VERSION", "NCCL_VERSION", "TORCH_CUDA_ARCH_LIST")},
        "distributions": {name: dist_version(name) for name in DISTRIBUTIONS},
        "modules": {name: locate_module(name) for name in MODULES},
        "torch": facts,
        "py_spy": py_spy_facts(),
    }
    if run_kernels:
        report["kernels"] = kernels(skip_gpu)
    if collective == "nccl":
        if skip_gpu:
            report["all_reduce"] = {"backend": "nccl", "ran": False, "why": "--skip-gpu"}
        else:
            report["all_reduce"] = all_reduce("nccl", facts.get("device_count") or 0, collective_timeout_s)
    elif collective == "gloo":
        report["all_reduce"] = all_reduce("gloo", world, collective_timeout_s)
    return report


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="verify.py", description=__doc__.splitlines()[0])
    parser.add_argument("--skip-gpu", action="store_true", help="never touch CUDA devices")
    parser.add_argument("--all-reduce", choices=("nccl", "gloo"), help="run an all_reduce on this backend")
    parser.add_argument("--world", type=int, default=2, help="gloo ranks (NCCL: every visible GPU)")
    parser.add_argument("--collective-timeout", type=float, default=90.0, help="seconds for the all_reduce")
    parser.add_argument("--no-kernels", action="store_true", help="skip importing sgl_kernel/flashinfer")
    parser.add_argument("--pretty", action="store_true", help="indented JSON without the marker")
    # Internal: the child processes this file starts.
    parser.add_argument("--child-kernels", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = _arguments(argv)
    if args.child_kernels:
        return kernels_child(args.skip_gpu)
    if args.child_rank is not None:
        return rank_child(args.child_rank, args.world, args.backend, args.port, args.collective_timeout)
    report = collect(
        args.skip_gpu,
        collective=args.all_reduce,
        world=args.world,
        collective_timeout_s=args.collective_timeout,
        run_kernels=not args.no_kernels,
    )
    text = json.dumps(report, indent=2 if args.pretty else None, sort_keys=True)
    sys.stdout.write(("" if args.pretty else MARKER) + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
