"""verify's comparison, without Docker: a report that matches its manifest passes, each kind of drift
is one failing row, and a check that could not run is 'not checked' (with why), never 'ok'.

The reports are fixtures: the CPU one was recorded from the built rehearsal image; the GPU one is
CONSTRUCTED (no GPU host was available) in the probe's own schema, and says so in its _source.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from probe_reports import (
    CPU,
    CPU_ACCESS,
    CPU_REPORT,
    CU129,
    CU130,
    GIVEN,
    NO_GPU,
    NONE,
    PROBE_DISTS,
    gpu_report,
)

from kit.errors import KitError
from kit.images.verify import (
    DRIFT,
    MARKER,
    NOT_CHECKED,
    OK,
    PROBE,
    Row,
    arch_names,
    compare,
    parse_probe_output,
    probe_args,
    verdict,
    version_matches,
)


def drifting(rows) -> dict[str, str]:
    return {r.check: r.found for r in rows if r.status == DRIFT}


def unchecked(rows) -> dict[str, str]:
    return {r.check: r.why for r in rows if r.status == NOT_CHECKED}


def row(rows, check: str) -> Row:
    return next(r for r in rows if r.check == check)


# --- the CPU rehearsal ----------------------------------------------------------------------------


def test_the_recorded_cpu_report_passes():
    rows = compare(CPU, CPU_REPORT, access=CPU_ACCESS)
    assert drifting(rows) == {} and unchecked(rows) == {}
    assert verdict(rows, CPU_ACCESS) == "pass"
    assert [r.check for r in rows] == [
        "python", "torch", "torch.version.cuda", "NCCL wheel", "sglang", "sglang-kernel", "flashinfer",
        "torchvision", "compiled arch list", "sgl_kernel op", "all_reduce", "py-spy",
    ]  # fmt: skip
    op = row(rows, "sgl_kernel op")
    assert "stand-in" in op.found and op.why == "the kit's stand-in, not a CUDA kernel"
    assert row(rows, "all_reduce").found.startswith("2 ranks (gloo): 3 on every rank")
    assert row(rows, "py-spy").found == "0.4.3; 'py-spy 0.4.3'"


def _wrong_sum(report):
    report["all_reduce"]["ok"] = False
    report["all_reduce"]["ranks"][0].update(ok=False, low=2.0)


def _stuck(report, stage="all_reduce"):
    ar = report["all_reduce"]
    ar.update(ok=False, timed_out=True)
    ar["ranks"][1].update(ok=False, stage=stage, error=f"stuck in {stage}: did not finish in 90 s (killed)")


@pytest.mark.parametrize(
    ("damage", "check"),
    [
        (lambda r: r["distributions"].update({"sglang": "0.5.22"}), "sglang"),
        (lambda r: r["torch"].update({"version": "2.14.1"}), "torch"),
        (lambda r: r.update({"python": "3.12.3"}), "python"),
        (lambda r: r["torch"].update({"cuda": "13.0"}), "torch.version.cuda"),
        (lambda r: r["torch"].update({"arch_list": ["sm_90"]}), "compiled arch list"),
        (lambda r: r["distributions"].update({"nvidia-nccl-cu13": "2.30.7"}), "NCCL wheel"),
        (lambda r: r["distributions"].update({"sglang-kernel": "0.4.10"}), "sglang-kernel"),
        (lambda r: r["modules"].update({"sgl_kernel": {"found": False}}), "sglang-kernel"),
        (lambda r: r["modules"].update({"sgl_kernel": {"found": True, "origin": "/x", "stand_in": False}}),
         "sglang-kernel"),
        (lambda r: r["distributions"].update({"flashinfer-python": "0.7.2"}), "flashinfer"),
        (lambda r: r["modules"].update({"flashinfer": {"found": True, "origin": "/x"}}), "flashinfer"),
        (lambda r: r["distributions"].update({"torchvision": "0.29.1"}), "torchvision"),
        (lambda r: r["kernels"]["op"]["results"][0].update({"ok": False, "error": "wrote other slots"}),
         "sgl_kernel op"),
        (lambda r: r["kernels"]["op"].update({"stand_in": False, "name": "silu_and_mul"}), "sgl_kernel op"),
        (_wrong_sum, "all_reduce"),
        (_stuck, "all_reduce"),
        (lambda r: r["py_spy"].update({"version": "0.4.1"}), "py-spy"),
        (lambda r: r["py_spy"].update({"rc": 126, "output": "exec format error"}), "py-spy"),
        (lambda r: r["py_spy"].update({"rc": None, "output": None, "error": "no py-spy on PATH"}), "py-spy"),
    ],
)  # fmt: skip
def test_cpu_drift_is_one_failing_row(damage, check):
    report = copy.deepcopy(CPU_REPORT)
    damage(report)
    rows = compare(CPU, report, access=CPU_ACCESS)
    assert list(drifting(rows)) == [check] and unchecked(rows) == {}
    assert verdict(rows, CPU_ACCESS) == "drift"


def test_a_hung_rank_is_named_with_its_stage():
    report = copy.deepcopy(CPU_REPORT)
    _stuck(report, "init")
    found = row(compare(CPU, report, access=CPU_ACCESS), "all_reduce").found
    assert found.startswith("2 ranks (gloo) timed out after 90 s: rank 1: stuck in init")


def test_torch_that_does_not_import_is_one_drift_and_what_needs_it_is_not_checked():
    report = copy.deepcopy(CPU_REPORT)
    report["torch"] = {"imported": False, "error": "ImportError: libgomp.so.1"}
    rows = compare(CPU, report, access=CPU_ACCESS)
    assert list(drifting(rows)) == ["torch"]
    assert unchecked(rows) == {"sgl_kernel op": "torch did not import", "all_reduce": "torch did not import"}


# --- GPU images -----------------------------------------------------------------------------------


@pytest.mark.parametrize("manifest", [CU129, CU130], ids=lambda m: m.name)
def test_a_gpu_report_with_gpus_passes(manifest):
    rows = compare(manifest, gpu_report(manifest), access=GIVEN)
    assert drifting(rows) == {} and unchecked(rows) == {}
    assert verdict(rows, GIVEN) == "pass"
    found = {r.check: r.found for r in rows}
    assert found["NCCL (torch reports)"] == manifest.pins.nccl
    assert "sm_120" in found["compiled arch list"]
    assert found["GPU 3 matmul"].startswith("NVIDIA RTX PRO 6000") and "sm 12.0" in found["GPU 3 matmul"]
    assert found["import sgl_kernel"].startswith("ok in") and found["import flashinfer"].startswith("ok in")
    assert found["sgl_kernel op"].startswith("matches on cuda:0, cuda:1, cuda:2, cuda:3")
    assert found["all_reduce"].startswith("4 GPUs (nccl): 10 on every rank")
    assert all(r.gpu for r in rows if r.check in ("GPU 0 matmul", "sgl_kernel op", "all_reduce"))


def test_a_gpu_image_without_gpus_is_not_a_pass():
    """The issue's bug: a skipped GPU row counted as ok. Now: not checked, with the engine's own
    refusal as the reason, and the verdict says the image was not fully checked."""
    rows = compare(CU130, gpu_report(CU130, gpus=False), access=NO_GPU)
    assert drifting(rows) == {}
    assert set(unchecked(rows)) == {"GPU matmul", "sgl_kernel op", "all_reduce"}
    assert all(why == NO_GPU.why for why in unchecked(rows).values())
    assert "refused a GPU device request" in NO_GPU.why
    assert all(row(rows, c).gpu for c in unchecked(rows))
    # the imports ran anyway: they need no GPU
    assert row(rows, "import sgl_kernel").status == OK and row(rows, "import flashinfer").status == OK
    assert verdict(rows, NO_GPU) == "incomplete"
    # The same rows, turned off on purpose, are a waiver, not a pass.
    waived = compare(CU130, gpu_report(CU130, gpus=False), access=NONE)
    assert set(unchecked(waived).values()) == {"--gpus none"}
    assert verdict(waived, NONE) == "waived"


def test_an_import_that_needs_the_driver_is_not_checked_without_gpus_and_drift_with_them():
    report = gpu_report(CU130, gpus=False)
    error = "ImportError: libcuda.so.1: cannot open shared object file: No such file or directory"
    report["kernels"]["imports"]["sgl_kernel"] = {"found": True, "ok": False, "error": error}
    report["kernels"]["op"] = {
        "ran": False,
        "blocked": True,
        "why": "sgl_kernel did not import",
        "results": [],
    }
    rows = compare(CU130, report, access=NO_GPU)
    imported = row(rows, "import sgl_kernel")
    assert imported.status == NOT_CHECKED and imported.gpu and "needs a GPU driver" in imported.why
    assert verdict(rows, NO_GPU) == "incomplete" and verdict(rows, NONE) == "waived"
    # With GPUs in the container the same error is drift.
    assert row(compare(CU130, report, access=GIVEN), "import sgl_kernel").status == DRIFT


def _rank_stuck_in_init(r):
    """The failing deployment's shape: NCCL communicator set-up never returns on two ranks."""
    ar = r["all_reduce"]
    ar.update(ok=False, timed_out=True, seconds=90.0)
    for rank in (2, 3):
        ar["ranks"][rank] = {
            "rank": rank,
            "stage": "init",
            "ok": False,
            "rc": -9,
            "error": "stuck in init: did not finish in 90 s (killed)",
            "stderr_tail": "NCCL WARN Cuda failure 'peer access is not supported'",
        }


@pytest.mark.parametrize(
    ("damage", "check"),
    [
        (lambda r: r["torch"].update({"nccl": "2.27.5"}), "NCCL (torch reports)"),
        (lambda r: r["distributions"].update({"nvidia-nccl-cu13": "2.28.3"}), "NCCL wheel nvidia-nccl-cu13"),
        (lambda r: r["distributions"].update({"nvidia-nccl-cu12": "2.28.9"}), "NCCL wheel nvidia-nccl-cu12"),
        (lambda r: r["torch"].update({"arch_list": ["sm_80", "sm_90", "sm_100"]}), "compiled arch list"),
        (lambda r: r["torch"].update({"cuda": "12.8"}), "torch.version.cuda"),
        (lambda r: r["env"].update({"CUDA_VERSION": "13.0.2"}), "CUDA toolkit (base image)"),
        (lambda r: r["distributions"].update({"flashinfer-python": "0.7.4"}), "flashinfer-python"),
        (lambda r: r["distributions"].update({"flashinfer-cubin": "0.6.13"}), "flashinfer-cubin"),
        (lambda r: r["distributions"].update({"sglang-kernel": None}), "sglang-kernel"),
        (lambda r: r["distributions"].update({"torchvision": "0.29.1+cu128"}), "torchvision"),
        (lambda r: r["py_spy"].update({"version": None}), "py-spy"),
        (lambda r: r["torch"]["gpus"][0].update({"ok": False, "error": "no kernel image is available"}),
         "GPU 0 matmul"),
        (lambda r: r["kernels"]["imports"]["flashinfer"].update(
            {"ok": False, "error": "RuntimeError: flashinfer-cubin 0.6.13 does not match flashinfer 0.7.2"}),
         "import flashinfer"),
        (lambda r: r["kernels"]["op"]["results"][2].update(
            {"ok": False, "error": "CUDA error: no kernel image is available for execution on the device"}),
         "sgl_kernel op"),
        (lambda r: r["kernels"]["op"].update({"error": "the op never finished: died of signal 11"}),
         "sgl_kernel op"),
        (lambda r: r["kernels"]["op"].update(
            {"ran": False, "results": [], "why": "sgl_kernel has none of silu_and_mul, rmsnorm"}),
         "sgl_kernel op"),
        (_rank_stuck_in_init, "all_reduce"),
    ],
)  # fmt: skip
def test_gpu_drift_is_one_failing_row(damage, check):
    report = gpu_report(CU130)
    damage(report)
    rows = compare(CU130, report, access=GIVEN)
    assert list(drifting(rows)) == [check] and unchecked(rows) == {}


def test_a_p2p_hang_names_the_stuck_ranks_and_nccls_warning():
    report = gpu_report(CU130)
    _rank_stuck_in_init(report)
    stuck = row(compare(CU130, report, access=GIVEN), "all_reduce")
    assert stuck.found.startswith("4 GPUs (nccl) timed out after 90 s: rank 2: stuck in init")
    assert "rank 3: stuck in init" in stuck.found and "peer access is not supported" in stuck.why


def test_gpus_given_but_cuda_sees_none_is_drift_and_what_needs_cuda_is_not_checked():
    report = gpu_report(CU130)
    report["torch"].update(cuda_available=False, device_count=0, gpus=[])
    report["torch"]["cuda_error"] = (
        "RuntimeError: The NVIDIA driver on your system is too old (found version 12080)"
    )
    report["kernels"]["op"] = {"ran": False, "blocked": True, "why": "CUDA sees no GPU", "results": []}
    report["all_reduce"] = {"backend": "nccl", "ran": False, "why": "CUDA sees no GPU"}
    rows = compare(CU130, report, access=GIVEN)
    assert list(drifting(rows)) == ["GPU matmul"] and "too old" in drifting(rows)["GPU matmul"]
    assert unchecked(rows) == {"sgl_kernel op": "CUDA sees no GPU", "all_reduce": "CUDA sees no GPU"}
    assert verdict(rows, GIVEN) == "drift"


def test_a_cuda_torch_without_sm120_is_named():
    report = gpu_report(CU129)
    report["torch"]["arch_list"] = ["sm_80", "sm_90"]
    arch = row(compare(CU129, report, access=GIVEN), "compiled arch list")
    assert arch.status == DRIFT and arch.expected == "covers sm_120" and arch.why == "missing 12.0"


# --- the verdict, over any rows -------------------------------------------------------------------

ROWS = st.lists(
    st.builds(
        Row,
        check=st.sampled_from(["a", "b", "c"]),
        expected=st.just("e"),
        found=st.just("f"),
        status=st.sampled_from([OK, DRIFT, NOT_CHECKED]),
        why=st.sampled_from(["", "--gpus none", "no GPU"]),
        gpu=st.booleans(),
    ),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(ROWS, st.sampled_from([GIVEN, NO_GPU, NONE, CPU_ACCESS]))
def test_the_verdict_never_calls_a_skipped_check_a_pass(rows, access):
    result = verdict(rows, access)
    statuses = {r.status for r in rows}
    assert (result == "drift") == (DRIFT in statuses)
    assert (result == "pass") == (statuses <= {OK})
    if result == "waived":
        assert access.waived and all(r.gpu for r in rows if r.status == NOT_CHECKED)
    if NOT_CHECKED in statuses and DRIFT not in statuses:
        assert result in ("incomplete", "waived")


def _paths(value, prefix=()):
    """Every (path) into a nested report, for deleting parts of it."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*prefix, key)
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, (*prefix, index))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_report_with_parts_missing_still_gives_honest_rows(data):
    """A probe killed half-way reports less: compare never raises, and a missing part never adds
    an ok row that the complete report did not have."""
    manifest, access, complete = data.draw(
        st.sampled_from([(CPU, CPU_ACCESS, CPU_REPORT), (CU130, GIVEN, gpu_report(CU130))])
    )
    report = copy.deepcopy(complete)
    for path in data.draw(st.lists(st.sampled_from(list(_paths(report))), min_size=1, max_size=4)):
        target = report
        try:
            for key in path[:-1]:
                target = target[key]
            del target[path[-1]]
        except (KeyError, IndexError, TypeError):
            continue
    rows = compare(manifest, report, access=access)
    assert all(r.status in (OK, DRIFT, NOT_CHECKED) for r in rows)
    before = {r.check for r in compare(manifest, complete, access=access) if r.status == OK}
    assert {r.check for r in rows if r.status == OK} <= before


@pytest.mark.parametrize(
    ("manifest", "access", "section", "checks"),
    [
        (CPU, CPU_ACCESS, "kernels", {"sgl_kernel op"}),
        (CPU, CPU_ACCESS, "all_reduce", {"all_reduce"}),
        (CPU, CPU_ACCESS, "py_spy", {"py-spy"}),
        (CU130, GIVEN, "kernels", {"import sgl_kernel", "import flashinfer", "sgl_kernel op"}),
        (CU130, GIVEN, "all_reduce", {"all_reduce"}),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_section_the_probe_did_not_report_is_not_checked(manifest, access, section, checks):
    report = copy.deepcopy(CPU_REPORT if manifest is CPU else gpu_report(CU130))
    del report[section]
    rows = compare(manifest, report, access=access)
    assert set(unchecked(rows)) == checks and drifting(rows) == {}
    assert verdict(rows, access) == "incomplete"


# --- small rules ----------------------------------------------------------------------------------


def test_version_rules():
    assert version_matches("2.14.1", "2.14.1+cu130")
    assert not version_matches("2.14.1+cu130", "2.14.1")
    assert not version_matches("2.14.1+cu130", "2.14.1+cu128")
    # PyPI's torch 2.14.1 is the cu130 build: a plain pin in a CUDA 13.0 image takes no other build.
    assert version_matches("2.14.1", "2.14.1+cu130", build="cu130")
    assert not version_matches("2.14.1", "2.14.1+cu128", build="cu130")
    assert not version_matches("0.5.2", "0.5.23")
    assert not version_matches("1", None)
    assert {"sm_120", "compute_120"} <= arch_names("12.0") and "sm_120" in arch_names("12.0+PTX")
    assert "sm_120a" in arch_names("12.0a")


def test_what_the_probe_is_asked_to_run():
    assert probe_args("cpu", gpus=False)[-5:] == ["--skip-gpu", "--all-reduce", "gloo", "--world", "2"]
    with_gpus = probe_args("cuda", gpus=True, collective_timeout_s=30)
    assert with_gpus[-2:] == ["--all-reduce", "nccl"] and "--skip-gpu" not in with_gpus
    assert with_gpus[1:3] == ["--collective-timeout", "30"]
    without = probe_args("cuda", gpus=False)
    assert "--skip-gpu" in without and "--all-reduce" not in without


def test_every_manifest_pins_py_spy_and_verify_reads_the_pin():
    assert {m.pip_pin("py-spy") for m in (CPU, CU129, CU130)} == {"0.4.3"}
    assert CU130.pip_pin("py_spy") == "0.4.3" and CU130.pip_pin("nope") is None


def test_probe_output_is_found_after_banners():
    out = "==========\n== CUDA ==\n==========\nCUDA Version 13.0.1\n" + MARKER + json.dumps(CPU_REPORT) + "\n"
    assert parse_probe_output(out) == CPU_REPORT
    with pytest.raises(KitError, match="printed no result"):
        parse_probe_output("banner only\n")


def test_the_probe_runs_on_a_plain_interpreter():
    """The in-image script is self-contained: here (no torch in the kit's venv) it still prints one
    JSON object, reporting torch as not importable rather than crashing, and its child processes
    (kernels, gloo ranks) report the same instead of hanging."""
    # The venv's bin on PATH, as in the image: the kit's own venv installs py-spy (kit watch --pid).
    path = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"
    done = subprocess.run(
        [sys.executable, str(PROBE), "--skip-gpu", "--all-reduce", "gloo", "--collective-timeout", "30"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": path},
    )
    assert done.returncode == 0, done.stderr
    report = parse_probe_output(done.stdout)
    assert report["schema"] == 2 and report["python"] == ".".join(map(str, sys.version_info[:3]))
    assert set(report["distributions"]) == set(PROBE_DISTS)
    assert set(report["modules"]) == {"sgl_kernel", "torchvision", "flashinfer"}
    assert report["py_spy"]["version"] is None or report["py_spy"]["rc"] == 0
    if report["torch"]["imported"]:  # pragma: no cover - a venv with torch
        assert report["torch"]["gpus"] == []  # --skip-gpu
        return
    assert "error" in report["torch"]
    assert report["kernels"]["ran"] and "No module named 'torch'" in report["kernels"]["error"]
    ranks = report["all_reduce"]["ranks"]
    assert [r["stage"] for r in ranks] == ["error", "error"] and not report["all_reduce"]["ok"]
    assert "No module named 'torch'" in ranks[0]["error"]
