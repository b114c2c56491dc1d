"""The GPU host check's NVML and pytest steps on this machine (kit/hostcheck/nvml_step.py, preflight.py).

The nvml step on an H200-shaped fake NVML (kit/scenarios/fake_nvml.py) whose processes are this
test's real children: what it can get wrong before a GPU host is lent (usage by PID, NVML against
nvidia-smi); the pytest step for real, where the gpu tests skip.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import psutil

from kit.hostcheck import nvml_step
from kit.hostcheck.record import Status, sh
from kit.hostcheck.runner import main
from kit.runtime.nvml import NvmlGpus, read_inventory
from kit.scenarios.fake_nvml import FakeNvml

ROOT = Path(__file__).resolve().parents[2]


class _ChildrenOnGpu0(FakeNvml):
    """An H200 whose compute processes are this test's children, each using what it really holds in
    memory (its RSS, measured once by psutil when NVML is first asked about it), as NVML lists them."""

    measured: dict[int, int]

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        measured = self.__dict__.setdefault("measured", {})
        for p in psutil.Process().children():
            measured.setdefault(p.pid, p.memory_info().rss)
        return [SimpleNamespace(pid=pid, usedGpuMemory=rss) for pid, rss in measured.items()]


# The child holds SIZE bytes for real and says so, as the torch child reports its reserved memory.
TORCHLESS_CHILD = r"""
import json, os, sys, time
size = int(sys.argv[1])
held = bytearray(b"\x01") * size
print(json.dumps({"pid": os.getpid(), "cuda": True, "reserved": size, "allocated": size}), flush=True)
time.sleep(60)
"""


def test_usage_by_pid_on_an_h200_shaped_nvml(tmp_path, monkeypatch):
    size = 123_456_789  # no round figure: what the line prints must be computed from the readings
    monkeypatch.setattr(nvml_step, "ALLOC_CHILD", TORCHLESS_CHILD)
    monkeypatch.setattr(nvml_step, "USAGE_ALLOC_BYTES", size)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi: its column says '-'
    lib = _ChildrenOnGpu0.of(1, name="NVIDIA H200", capability=(9, 0), memory_gib=140)
    assert read_inventory(lib).devices[0].compute_capability == "9.0"
    lib.nvmlInit()
    gpus = NvmlGpus(lib)
    status = Status(tmp_path, "nvml")

    result = nvml_step.usage_section(tmp_path, status, gpus, lib)

    used = lib.measured[result["child"]["pid"]]  # the child's real memory, which NVML reported
    assert size < used < size + 200 * (1 << 20)  # the buffer it holds, plus an interpreter
    lines = (tmp_path / "status" / "nvml").read_text().splitlines()
    gib, mib = 1 << 30, 1 << 20
    assert lines[0].startswith(f"ok\tusage(child): GPU 0 {used / gib:.2f} GiB (per process)")
    assert f"torch reserved {size / gib:.2f} GiB" in lines[0]
    assert f"NVML - reserved = {(used - size) / mib:.0f} MiB" in lines[0]
    assert lines[1].startswith("ok\tusage([pid ")
    assert result["nvml_processes"][0]["proc_visible"] is True
    assert (tmp_path / "pgids").read_text().strip() == str(result["child"]["pid"])
    assert (
        not psutil.pid_exists(result["child"]["pid"])
        or psutil.Process(result["child"]["pid"]).status() == "zombie"
    )


FAKE_SMI = """#!/bin/sh
case "$*" in
  *--query-gpu=index,name,uuid*)
    echo "0, NVIDIA H200, GPU-fake0000-0000-0000-0000-000000000000, 00000000:17:00.0, 143360, 580.95.05, 9.0"
    ;;
  *--query-compute-apps*) ;;
  "nvlink -s") echo "GPU 0: NVIDIA H200 (UUID: GPU-fake0000-0000-0000-0000-000000000000)"
    i=0; while [ $i -lt 18 ]; do printf '\\t Link %d: 26.562 GB/s\\n' $i; i=$((i+1)); done;;
  "-q") printf 'Driver Version : 580.95.05\\nCUDA Version                          : 13.0\\n';;
esac
"""


def test_the_nvml_step_on_an_h200_shaped_host_agrees_with_its_nvidia_smi(tmp_path, monkeypatch):
    from kit.runtime import nvml

    lib = _ChildrenOnGpu0.of(1, name="NVIDIA H200", capability=(9, 0), memory_gib=140)
    lib.devices[0].nvlinks = 18
    monkeypatch.setattr(nvml, "_pynvml", lambda: lib)
    monkeypatch.setattr(nvml_step, "ALLOC_CHILD", TORCHLESS_CHILD)
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:/usr/bin:/bin")
    args = SimpleNamespace(out=str(tmp_path), work=str(tmp_path))

    nvml_step.step_nvml(args, Status(tmp_path, "nvml"))

    data = json.loads((tmp_path / "nvml.json").read_text())
    assert [r["field"] for r in data["comparison"] if not r["agree"]] == []
    assert data["inventory"]["devices"][0]["nvlinks"] == 18
    statuses = (tmp_path / "status" / "nvml").read_text().splitlines()
    assert [line.split("\t")[0] for line in statuses] == ["ok"] * 5, statuses
    assert "NVML and nvidia-smi agree on all 9 compared facts" in statuses[1]


def test_the_pytest_step_writes_the_log_and_junit_beside_the_summary(tmp_path):
    """The real step on this machine: no GPU here, so the gpu tests skip and the step says it showed
    nothing (a finding), with pytest's own log and JUnit XML in OUT next to summary.txt."""
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    assert main(["pytest", "--out", str(out), "--work", str(work), "--pytest-limit", "300"]) == 0
    assert main(["summary", "--out", str(out), "--work", str(work), "--steps", "pytest"]) == 0
    assert {p.name for p in out.iterdir()} == {"summary.txt", "commit.txt", "pytest.txt", "pytest-junit.xml"}
    summary = (out / "summary.txt").read_text()
    tests = len(
        [line for line in (out / "pytest.txt").read_text().splitlines() if "test_gpu_host.py::" in line]
    )
    assert tests >= 5  # pytest -v printed each gpu test of test_gpu_host.py
    if "GPU " not in (sh(["nvidia-smi", "-L"])[1] or ""):
        assert "pytest       finding  " in summary and "passed, 0 failed, 0 errors" in summary
    assert (out / "commit.txt").read_text().strip() in summary
