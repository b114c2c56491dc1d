"""verify.py's kernels check: import sgl_kernel and flashinfer, run one sgl_kernel op against torch
(on every GPU; in the CPU rehearsal image, the stand-in's op on the CPU). Runs as a child process of
verify.py (`--child-kernels`). Standalone: the standard library, plus torch in the child.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import time

from verify_children import child_env, emit, ended, run_children

KERNEL_MODULES = ("sgl_kernel", "flashinfer")
"""Imported by the kernels child (a CUDA build's import can crash or need a driver)."""
STAND_IN_MARK = "+kit.cpu.rehearsal"
KERNELS_TIMEOUT_S = 240.0
"""Importing flashinfer on a cold page cache takes tens of seconds; a hang is killed here."""


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


def kernels(skip_gpu: bool, probe: str | None) -> dict:
    """The kernels child's report: per module import, and the op's results per device."""
    info: dict = {"ran": False, "imports": {}, "op": {"ran": False, "results": []}}
    if not probe:
        info["why"] = "the probe was not started from a file"
        return info
    command = [sys.executable, probe, "--child-kernels"] + (["--skip-gpu"] if skip_gpu else [])
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
    how = ended(result, KERNELS_TIMEOUT_S)
    for entry in info["imports"].values():
        if entry.get("found") and entry.get("ok") is None:  # began, never finished
            entry.update(ok=False, error=f"the import never finished: {how}")
    if op.pop("began", None):
        op.update(ran=True, error=f"the op never finished: {how}")
    return info
