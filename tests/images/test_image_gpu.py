"""The real GPU path of `kit image verify`, where a GPU exists: with a built GPU image, every row is
ok: sgl_kernel and flashinfer import, silu_and_mul matches torch on every GPU, a matmul runs on each,
and an NCCL all_reduce over every GPU (one process each) finishes within the timeout. It is the
same probe code the CPU rehearsal runs over gloo, with another device. Elsewhere it skips, naming
what is missing. KIT_GPU_IMAGE chooses the manifest (default: the current release's)."""

from __future__ import annotations

import json
import os

import pytest
from image_helpers import run_kit

pytestmark = [pytest.mark.gpu, pytest.mark.docker]

GPU_IMAGE = os.environ.get("KIT_GPU_IMAGE", "sglang-0.5.23-cu130-sm120")


@pytest.fixture(scope="module")
def gpu_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:
        pytest.skip(f"no NVIDIA GPU here (NVML: {exc})")
    if not count:
        pytest.skip("no NVIDIA GPU: NVML sees none")
    return count


@pytest.fixture(scope="module")
def gpu_image(gpu_count, built_image) -> str:
    from kit.errors import EnvironmentProblem
    from kit.images.inspect import image_info
    from kit.images.manifest import load_manifest

    manifest = load_manifest(GPU_IMAGE)
    try:
        built = image_info(manifest.tag)
    except EnvironmentProblem as exc:
        pytest.skip(exc.one_line())
    if built is None:
        built_image(manifest.tag, GPU_IMAGE)
    return GPU_IMAGE


def test_verify_runs_the_kernels_and_an_nccl_all_reduce_on_every_gpu(gpu_image, gpu_count, capsys):
    code = run_kit(["image", "verify", gpu_image, "--gpus", "all", "--json"])
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    rows = {r["check"]: r for r in result["rows"]}
    # The figures, for whoever reads the run (the closing note quotes them).
    print(json.dumps({c: [r["status"], r["found"]] for c, r in rows.items()}, indent=1))
    print(json.dumps({"gpus": result["gpus"], "seconds": result["seconds"]}, indent=1))
    assert code == 0, captured.err
    assert result["verdict"] == "pass" and result["gpus"]["granted"]
    assert rows["import sgl_kernel"]["status"] == rows["import flashinfer"]["status"] == "ok"
    assert [rows[f"GPU {i} matmul"]["status"] for i in range(gpu_count)] == ["ok"] * gpu_count
    op = result["report"]["kernels"]["op"]
    assert op["name"] == "silu_and_mul" and [r["ok"] for r in op["results"]] == [True] * gpu_count
    reduce = result["report"]["all_reduce"]
    assert reduce["backend"] == "nccl" and reduce["world"] == gpu_count and reduce["ok"]
    want = gpu_count * (gpu_count + 1) / 2
    assert all(r["low"] == r["high"] == want for r in reduce["ranks"])
