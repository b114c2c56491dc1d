"""scripts/gpu-host-check's pure parts, and its GPU-shaped path on the fake NVML library.

The check itself runs once on a lent GPU host (docs/gpu-host-check.md); these hold what it can get
wrong before it gets there: the rehearsal's log lines are SGLang's real ones and read as the mission's
init phase, the wheel choice never shadows a newer package of the host, nvidia-smi's text is read
right, and the usage-by-PID step reads an H200-shaped NVML without a driver.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from kit.logs import analyze_text
from kit.runtime.nvml import NvmlGpus, read_inventory
from kit.scenarios.fake_nvml import FakeNvml

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


sys.path.insert(0, str(ROOT / "scripts"))  # as tests/runtime/test_gpu_host.py: one module object each
check = importlib.import_module("gpu_host_check")
rehearsal = importlib.import_module("gpu_hang_rehearsal")


def _texts(path: Path) -> set[str]:
    """Each line's text after SGLang's '[YYYY-MM-DD HH:MM:SS( TPn)] ' prefix."""
    return {line.split("] ", 1)[1] for line in path.read_text().splitlines() if line.startswith("[20")}


def test_the_rehearsal_prints_sglang_0_5_23s_own_lines():
    real = _texts(FIXTURES / "kit-logs" / "sglang-0.5.23-cpu-tiny-tp2-ready.log")
    assert set(rehearsal.LAUNCHER_LINES) | {rehearsal.INIT_BEGIN} <= real
    crash = (
        FIXTURES / "sglang-logs" / "20_dsr1-2node-tp16-node2-nccl-connrefused-crash-init-v0.5.8.post1.log"
    ).read_text()
    assert rehearsal.SCHEDULER_EXCEPTION + "Traceback (most recent call last):" in crash
    assert rehearsal.LAUNCHER_SIGQUIT in crash


def test_the_rehearsal_log_reads_as_init_begun_then_a_rendezvous_crash():
    now = 1_780_000_000.0
    lines = [rehearsal.stamp(now=now) + text for text in rehearsal.LAUNCHER_LINES]
    lines.append(rehearsal.stamp("TP0", now=now + 1) + rehearsal.INIT_BEGIN)
    hung = analyze_text("\n".join(lines) + "\n")
    assert (hung.outcome, hung.last_milestone, hung.phase) == ("hung", "init.begin", "init")
    assert hung.dialect and "0.5.21" in hung.dialect

    lines.append(
        rehearsal.stamp("TP0", now=now + 9)
        + rehearsal.SCHEDULER_EXCEPTION
        + "Traceback (most recent call last):\n"
        + '  File "x.py", line 1, in <module>\n'
        + "torch.distributed.DistStoreError: Timed out after 9 seconds waiting for clients. "
        + "1/2 clients joined."
    )
    lines.append(rehearsal.stamp(now=now + 9) + rehearsal.LAUNCHER_SIGQUIT)
    crashed = analyze_text("\n".join(lines) + "\n")
    assert (crashed.outcome, crashed.phase) == ("crashed", "init")
    assert "rendezvous-timeout" in [c.id for c in crashed.likely_causes]


@pytest.mark.parametrize(
    ("wheel", "expected"),
    [
        (
            "pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
            ("pydantic-core", "2.50.5"),
        ),
        ("py_spy-0.4.3-py2.py3-none-manylinux1_x86_64.manylinux_2_5_x86_64.whl", ("py-spy", "0.4.3")),
        ("typing_extensions-4.16.0-py3-none-any.whl", ("typing-extensions", "4.16.0")),
        ("not-a-wheel.tar.gz", None),
    ],
)
def test_wheel_names(wheel, expected):
    assert check.wheel_name_version(wheel) == expected


def test_a_wheel_goes_in_only_where_the_host_lacks_it_or_has_it_older():
    wheels = [
        "pydantic-2.14.4-py3-none-any.whl",
        "typing_extensions-4.16.0-py3-none-any.whl",
        "idna-3.20-py3-none-any.whl",
        "certifi-2026.10.19.post1-py3-none-any.whl",
    ]
    installed = {"pydantic": None, "typing-extensions": "4.12.2", "idna": "3.20", "certifi": "2027.1.1"}
    take, skip = check.wheels_to_install(wheels, installed)
    assert take == ["pydantic-2.14.4-py3-none-any.whl", "typing_extensions-4.16.0-py3-none-any.whl"]
    assert [s.split(" ")[0] for s in skip] == [
        "certifi-2026.10.19.post1-py3-none-any.whl",
        "idna-3.20-py3-none-any.whl",
    ]


SMI_CSV = "0, NVIDIA H200, GPU-1111, 00000000:19:00.0, 143771, 580.95.05, 9.0\n"
SMI_NVLINK = "\n".join(
    [
        "GPU 0: NVIDIA H200 (UUID: GPU-1111)",
        "\t Link 0: 26.562 GB/s",
        "\t Link 1: 26.562 GB/s",
        "\t Link 2: <inactive>",
    ]
)


def test_nvidia_smi_text_is_read():
    assert check.parse_smi_csv(SMI_CSV) == [
        {
            "index": "0",
            "name": "NVIDIA H200",
            "uuid": "GPU-1111",
            "pci.bus_id": "00000000:19:00.0",
            "memory.total": "143771",
            "driver_version": "580.95.05",
            "compute_cap": "9.0",
        }
    ]
    assert check.parse_smi_nvlinks(SMI_NVLINK) == {0: 2}
    assert (
        check.smi_cuda_version("Driver Version : 580.95.05\nCUDA Version                   : 13.0\n")
        == "13.0"
    )
    assert check.bus_id_key("00000000:19:00.0") == check.bus_id_key("0000:19:00.0")


def test_nvml_against_nvidia_smi_names_each_disagreement():
    inventory = {
        "driver_version": "580.95.05",
        "cuda_driver_version": "13.0",
        "devices": [
            {
                "index": 0,
                "name": "NVIDIA H200",
                "uuid": "GPU-1111",
                "compute_capability": "9.0",
                "memory_total_bytes": 143771 * (1 << 20) + 5,
                "pci_bus_id": "0000:19:00.0",
                "nvlinks": 18,
            }
        ],
    }
    rows = check.compare_inventory(inventory, check.parse_smi_csv(SMI_CSV), {0: 2}, "13.0")
    differ = {r["field"] for r in rows if not r["agree"]}
    assert differ == {"nvlinks"}
    bus = next(r for r in rows if r["field"] == "pci_bus_id")
    assert bus["note"] == "same device, spelled differently"
    assert {r["field"] for r in rows} >= {
        "count",
        "name",
        "uuid",
        "memory_total_mib",
        "compute_capability",
        "driver_version",
    }


def test_the_summary_leads_with_each_steps_worst_line():
    text = check.summarise(
        [
            ("nvml", [("ok", "1 GPU"), ("finding", "memory differs"), ("finding", "second")], "3 s"),
            ("doctor", [("ok", "exit 1 as expected")], ""),
            ("watch-hang", [], "TIMED OUT"),
        ]
    )
    head = text.splitlines()
    assert head[0] == "gpu-host-check: 3 steps: 1 ok, 1 finding, 1 error"
    assert head[2].split()[:3] == ["nvml", "finding", "memory"]
    assert head[4].startswith("watch-hang") and "no result recorded" in head[4] and "[TIMED OUT]" in head[4]


def test_result_line_is_the_watchs_last_result():
    lines = ['{"type":"activity","t":1}', "not json", '{"type":"result","verdict":"hung","exit_code":4}']
    assert check.result_line(lines)["verdict"] == "hung"
    assert check.result_line(lines[:2]) is None


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
    monkeypatch.setattr(check, "ALLOC_CHILD", TORCHLESS_CHILD)
    monkeypatch.setattr(check, "USAGE_ALLOC_BYTES", size)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi: its column says '-'
    lib = _ChildrenOnGpu0.of(1, name="NVIDIA H200", capability=(9, 0), memory_gib=140)
    assert read_inventory(lib).devices[0].compute_capability == "9.0"
    lib.nvmlInit()
    gpus = NvmlGpus(lib)
    status = check.Status(tmp_path, "nvml")

    result = check.usage_section(tmp_path, status, gpus, lib)

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
    monkeypatch.setattr(check, "ALLOC_CHILD", TORCHLESS_CHILD)
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:/usr/bin:/bin")
    args = SimpleNamespace(out=str(tmp_path), work=str(tmp_path))

    check.step_nvml(args, check.Status(tmp_path, "nvml"))

    data = json.loads((tmp_path / "nvml.json").read_text())
    assert [r["field"] for r in data["comparison"] if not r["agree"]] == []
    assert data["inventory"]["devices"][0]["nvlinks"] == 18
    statuses = (tmp_path / "status" / "nvml").read_text().splitlines()
    assert [line.split("\t")[0] for line in statuses] == ["ok"] * 5, statuses
    assert "NVML and nvidia-smi agree on all 9 compared facts" in statuses[1]


def test_the_summary_names_the_commit_the_run_used(tmp_path):
    text = check.summarise([("env", [("ok", "1 GPU")], "1 s")], commit="0" * 40)
    assert text.splitlines()[:2] == [
        "gpu-host-check: 1 steps: 1 ok, 0 finding, 0 error",
        f"commit: {'0' * 40}",
    ]
    # Given (a device machine's copy has no .git), else git's own answer, else it says it does not know.
    assert check.commit_of(tmp_path, "abc123") == "abc123 (KIT_CHECK_COMMIT)"
    assert check.commit_of(tmp_path, None).startswith("unknown: not a git checkout")
    head = check.commit_of(ROOT, None)
    assert head.split()[0] == check.sh(["git", "-C", str(ROOT), "rev-parse", "HEAD"])[1].strip()


def test_the_pytest_step_writes_the_log_and_junit_beside_the_summary(tmp_path):
    """The real step on this machine: no GPU here, so the gpu tests skip and the step says it showed
    nothing (a finding), with pytest's own log and JUnit XML in OUT next to summary.txt."""
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    assert check.main(["pytest", "--out", str(out), "--work", str(work), "--pytest-limit", "300"]) == 0
    assert check.main(["summary", "--out", str(out), "--work", str(work), "--steps", "pytest"]) == 0
    assert {p.name for p in out.iterdir()} == {"summary.txt", "commit.txt", "pytest.txt", "pytest-junit.xml"}
    summary = (out / "summary.txt").read_text()
    tests = len(
        [line for line in (out / "pytest.txt").read_text().splitlines() if "test_gpu_host.py::" in line]
    )
    assert tests >= 5  # pytest -v printed each gpu test of test_gpu_host.py
    if "GPU " not in (check.sh(["nvidia-smi", "-L"])[1] or ""):
        assert "pytest       finding  " in summary and "passed, 0 failed, 0 errors" in summary
    assert (out / "commit.txt").read_text().strip() in summary
