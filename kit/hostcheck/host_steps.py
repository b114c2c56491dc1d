"""The import, env and doctor steps: the kit imports from PYTHONPATH, what the host is (nvidia-smi,
torch, kernel, the PID view: env.txt), and `kit doctor --json` on a host without Docker."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from kit.hostcheck.record import Status, dump_json, read_text, sh
from kit.hostcheck.smi import smi_cuda_version


def step_import(args, status: Status) -> None:
    code, out, err = sh([sys.executable, "-m", "kit", "--help"], timeout=60)
    print(out[-1500:], err[-3000:], sep="\n")
    if code != 0:
        status.error(f"python3 -m kit --help exited {code}: {(err.strip().splitlines() or ['?'])[-1]}")
        return
    # The subprocess above imported kit.cli; this unit does not (docs/layers.toml: nothing imports cli).
    import kit

    spy = shutil.which("py-spy")
    status.ok(
        f"python3 -m kit --help works (kit {kit.__version__} from {Path(kit.__file__).parent}); py-spy: {spy}"
    )
    if not spy:
        status.finding("py-spy is not on PATH: the watch's stacks will say so")


TORCH_PROBE = r"""
import json, sys, time
t0 = time.time()
import torch
info = {"torch": torch.__version__, "cuda": torch.version.cuda, "import_s": round(time.time() - t0, 2)}
try:
    info["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
except Exception as exc:
    info["nccl"] = f"error: {type(exc).__name__}: {exc}"
info["cuda_available"] = torch.cuda.is_available()
info["arch_list"] = torch.cuda.get_arch_list() if torch.cuda.is_available() else []
if torch.cuda.is_available():
    info["devices"] = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        free, total = torch.cuda.mem_get_info(i)
        info["devices"].append({"index": i, "name": p.name, "capability": f"{p.major}.{p.minor}",
                                "total_memory": p.total_memory, "mem_get_info": [free, total]})
    info["cuda_init_s"] = round(time.time() - t0, 2)
print(json.dumps(info))
"""


def step_env(args, status: Status) -> None:
    out_path = Path(args.out) / "env.txt"
    sections: list[tuple[str, str]] = []

    def section(title: str, argv: list[str] | None = None, text: str | None = None, timeout: float = 30):
        if argv is not None:
            code, out, err = sh(argv, timeout=timeout)
            text = out + (f"\n[stderr] {err.strip()}" if err.strip() else "") + f"\n[exit {code}]"
        sections.append((title, text or ""))
        return text or ""

    section("date", ["date", "-Is"])
    section("uname -a", ["uname", "-a"])
    section("/etc/os-release", text=read_text("/etc/os-release", 2000))
    section("python", text=f"{sys.version}\n{sys.executable}\nPYTHONPATH={os.environ.get('PYTHONPATH')}")
    try:
        same_ns = os.readlink("/proc/self/ns/pid") == os.readlink("/proc/1/ns/pid")
    except OSError as exc:
        same_ns = f"unreadable ({exc})"
    container = {
        "/.dockerenv": Path("/.dockerenv").exists(),
        "pid 1": read_text("/proc/1/cmdline", 200).replace("\0", " "),
        "pid namespace of pid 1 is ours": same_ns,
        "cgroup": read_text("/proc/self/cgroup", 500),
        "ptrace_scope": read_text("/proc/sys/kernel/yama/ptrace_scope", 20).strip(),
        "uid": os.getuid(),
        "cpus": os.cpu_count(),
    }
    section("container and process view", text=json.dumps(container, indent=1))
    csv_text = section(
        "nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version,compute_cap --format=csv",
        [
            "nvidia-smi",
            "--query-gpu=index,name,pci.bus_id,memory.total,driver_version,compute_cap",
            "--format=csv",
        ],
    )
    section("nvidia-smi", ["nvidia-smi"])
    section("nvidia-smi topo -m", ["nvidia-smi", "topo", "-m"])
    section("nvidia-smi nvlink -s", ["nvidia-smi", "nvlink", "-s"])
    section(
        "nvidia-smi --query-compute-apps",
        ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv"],
    )
    code, out, err = sh([sys.executable, "-c", TORCH_PROBE], timeout=45)
    section(
        "torch", text=out + (f"\n[stderr tail] {err[-2000:]}" if err.strip() else "") + f"\n[exit {code}]"
    )
    spy = shutil.which("py-spy")
    section("py-spy", [spy, "--version"] if spy else None, text=None if spy else "py-spy not on PATH")
    wheels = Path(args.work) / "wheels.txt"
    section("wheels", text=wheels.read_text() if wheels.exists() else "-")
    query = section("nvidia-smi -q", ["nvidia-smi", "-q"], timeout=30)
    out_path.write_text("".join(f"===== {t}\n{x.rstrip()}\n\n" for t, x in sections), encoding="utf-8")

    if "[exit 0]" not in csv_text:
        status.finding(
            f"nvidia-smi did not answer: {csv_text.strip().splitlines()[-2:] if csv_text.strip() else '-'}"
        )
    else:
        rows = [line for line in csv_text.strip().splitlines()[1:-1] if line.strip()]
        status.ok(f"nvidia-smi: {' | '.join(rows)[:200]}")
    try:
        torch = json.loads(out.strip().splitlines()[-1]) if code == 0 else None
    except (ValueError, IndexError):
        torch = None
    if torch is None:
        status.error(f"torch probe exited {code}: {(err.strip().splitlines() or ['?'])[-1][:200]}")
    elif not torch.get("cuda_available"):
        status.finding(f"torch {torch['torch']} (CUDA build {torch['cuda']}) sees no CUDA device")
    else:
        caps = ",".join(d["capability"] for d in torch.get("devices", []))
        status.ok(
            f"torch {torch['torch']} CUDA {torch['cuda']} NCCL {torch['nccl']}, capability {caps}, "
            f"CUDA init {torch.get('cuda_init_s')} s"
        )
    if same_ns is False:
        status.finding("this shell is not in pid 1's PID namespace: NVML's host PIDs may not be ours")
    elif same_ns is not True:
        status.ok(f"PID namespace against pid 1's: {same_ns}")
    if "CUDA Version" in query:
        status.ok(f"nvidia-smi -q: CUDA Version {smi_cuda_version(query)} ({len(query)} chars in env.txt)")


def step_doctor(args, status: Status) -> None:
    results = {}
    for name, argv in (("host", []), ("qwen-tiny", ["qwen-tiny"])):
        t0 = time.monotonic()
        code, out, err = sh([sys.executable, "-m", "kit", "doctor", *argv, "--json"], timeout=75)
        entry: dict = {
            "argv": ["kit", "doctor", *argv, "--json"],
            "exit_code": code,
            "seconds": round(time.monotonic() - t0, 1),
        }
        try:
            entry["doctor"] = json.loads(out)
        except ValueError:
            entry["stdout"] = out[-5000:]
        entry["stderr_tail"] = err[-3000:]
        results[name] = entry
        if "Traceback" in err or "Traceback" in out:
            status.error(
                f"kit doctor {' '.join(argv)} printed a traceback: {err.strip().splitlines()[-1][:200]}"
            )
        doc = entry.get("doctor")
        if doc is None:
            status.error(f"kit doctor {' '.join(argv)} --json gave no JSON (exit {code})")
            continue
        checks = {c["id"]: c for c in doc.get("checks", [])}
        said = "; ".join(
            f"{cid} {checks[cid]['status']}: {checks[cid]['summary'][:90]}"
            for cid in (
                "docker-engine",
                "nvidia-driver",
                "gpu-count",
                "compute-capability",
                "gpu-busy",
                "p2p-topology",
            )
            if cid in checks
        )
        label = f"doctor {name} exit {code} {doc.get('counts')}"
        status.ok(f"{label}: {said}")
        engine = checks.get("docker-engine", {}).get("status")
        if engine != "fail":
            status.finding(
                f"doctor {name}: docker-engine is {engine!r} (a host without Docker should make it fail)"
            )
        for cid in ("nvidia-driver", "gpu-count", "gpu-busy", "p2p-topology"):
            if checks.get(cid, {}).get("status") in ("fail", "warn"):
                check = checks[cid]
                status.finding(
                    f"doctor {name}: {cid} {check['status']}: {check['summary']} ({check.get('why')})"
                )
    dump_json(Path(args.out) / "doctor.json", results)
