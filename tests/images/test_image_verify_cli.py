"""`kit image verify` at the CLI edge: the table, --json and the exit code tell ok, drift and 'not
checked' apart. The results are built by the real pure core (result_of) from the probe-report
fixtures; only the engine call is replaced, since no GPU image can be built here (the docker tests
run the real thing on the CPU rehearsal image)."""

from __future__ import annotations

import copy
import json

import pytest
from image_helpers import run_kit
from probe_reports import CPU, CPU_ACCESS, CPU_REPORT, CU130, GIVEN, NO_GPU, NONE, gpu_report

from kit.images import verify as verify_module
from kit.images.verify import result_of


@pytest.fixture
def probe_says(monkeypatch):
    """Make `kit image verify` see this report and GPU access instead of running a container."""

    def use(manifest, report, access):
        def fake_verify_image(m, *, gpus="auto", ref=None, collective_timeout_s=90):
            assert m.name == manifest.name
            return result_of(
                m, tag=m.tag, image_id="sha256:" + "0" * 64, report=report, access=access, seconds=1.0
            )

        monkeypatch.setattr(verify_module, "verify_image", fake_verify_image)
        return manifest.name

    return use


def test_a_full_pass_exits_0(probe_says, capsys):
    name = probe_says(CPU, CPU_REPORT, CPU_ACCESS)
    assert run_kit(["image", "verify", name]) == 0
    out = capsys.readouterr().out
    assert "matches its manifest: all 12 checks ran and matched" in out
    assert "not checked" not in out and "DRIFT" not in out


def test_a_gpu_image_without_gpus_exits_3_and_says_not_fully_checked(probe_says, capsys):
    name = probe_says(CU130, gpu_report(CU130, gpus=False), NO_GPU)
    assert run_kit(["image", "verify", name]) == 3
    captured = capsys.readouterr()
    assert "NOT FULLY CHECKED" in captured.out and "matches its manifest" not in captured.out
    assert captured.out.count("not checked") == 3
    assert "could not select device driver" in captured.out  # the engine's refusal, as evidence
    err = captured.err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(
        "kit: error: kit/sglang:sglang-0.5.23-cu130-sm120: no drift, but 3 check(s) not run: "
        "GPU matmul, sgl_kernel op, all_reduce"
    )
    assert "--gpus none to check versions only" in err[0]


def test_json_carries_the_status_of_every_row(probe_says, capsys):
    name = probe_says(CU130, gpu_report(CU130, gpus=False), NO_GPU)
    assert run_kit(["image", "verify", name, "--json"]) == 3
    result = json.loads(capsys.readouterr().out)
    assert result["verdict"] == "incomplete" and result["ok"] is False
    assert result["counts"] == {"ok": 14, "drift": 0, "not checked": 3}
    rows = {r["check"]: r for r in result["rows"]}
    assert rows["all_reduce"]["status"] == "not checked" and rows["all_reduce"]["gpu"] is True
    assert rows["all_reduce"]["why"] == NO_GPU.why
    assert rows["py-spy"]["status"] == "ok"
    assert result["gpus"]["granted"] is False and result["gpus"]["attempts"][0]["how"] == "gpu-request"


def test_gpus_none_is_a_waiver_exit_0_but_never_called_a_full_pass(probe_says, capsys):
    name = probe_says(CU130, gpu_report(CU130, gpus=False), NONE)
    assert run_kit(["image", "verify", name, "--gpus", "none"]) == 0
    out = capsys.readouterr().out
    assert "matches its manifest in the 14 checks that ran" in out
    assert "3 GPU check(s) not run (--gpus none): not a full pass" in out
    assert run_kit(["image", "verify", name, "--gpus", "none", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["verdict"] == "waived" and result["ok"] is False


def test_a_full_gpu_pass_names_how_the_gpus_were_given(probe_says, capsys):
    name = probe_says(CU130, gpu_report(CU130), GIVEN)
    assert run_kit(["image", "verify", name]) == 0
    out = capsys.readouterr().out
    assert "all 20 checks ran and matched" in out
    assert "GPUs: a GPU device request (docker run --gpus all): the nvidia runtime is registered" in out


def test_drift_exits_1_and_wins_over_not_checked(probe_says, capsys):
    report = gpu_report(CU130, gpus=False)
    report["distributions"]["sglang"] = "0.5.22"
    name = probe_says(CU130, report, NO_GPU)
    assert run_kit(["image", "verify", name]) == 1
    captured = capsys.readouterr()
    assert "DRIFT in 1 of 14 checks, 3 not run" in captured.out
    assert "in 1 check(s): sglang" in captured.err


def test_a_hung_all_reduce_is_drift(probe_says, capsys):
    report = copy.deepcopy(CPU_REPORT)
    report["all_reduce"].update(ok=False, timed_out=True)
    report["all_reduce"]["ranks"][1].update(ok=False, stage="all_reduce", error="stuck in all_reduce: killed")
    name = probe_says(CPU, report, CPU_ACCESS)
    assert run_kit(["image", "verify", name]) == 1
    assert "in 1 check(s): all_reduce" in capsys.readouterr().err


def test_collective_timeout_is_checked_at_the_edge(capsys):
    assert run_kit(["image", "verify", "sglang-0.5.23-cpu", "--collective-timeout", "1"]) == 2
    assert "--collective-timeout" in capsys.readouterr().err
