"""The nvml step: kit.runtime.nvml's inventory against nvidia-smi, fact by fact, P2P and topology,
and usage by host PID of a child that holds 8 GiB on cuda:0 (against torch's and nvidia-smi's
figures). tests/hostcheck/test_nvml_step.py runs it on an H200-shaped fake NVML."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from kit.hostcheck.record import GIB, MIB, Status, dump_json, jsonable, kill_group, remember_pgid, sh
from kit.hostcheck.smi import (
    SMI_FIELDS,
    compare_inventory,
    parse_smi_csv,
    parse_smi_nvlinks,
    smi_cuda_version,
)

USAGE_ALLOC_BYTES = 8 * GIB
ALLOC_CHILD = r"""
import json, os, sys, time
import torch
info = {"pid": os.getpid(), "cuda": torch.cuda.is_available()}
if info["cuda"]:
    x = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device="cuda:0")
    x.fill_(1)
    torch.cuda.synchronize()
    info["reserved"] = torch.cuda.memory_reserved(0)
    info["allocated"] = torch.cuda.memory_allocated(0)
    info["mem_get_info"] = list(torch.cuda.mem_get_info(0))
print(json.dumps(info), flush=True)
time.sleep(300)
"""


def nvml_processes(lib) -> list[dict]:
    """NVML's raw process lists (compute and graphics) on every device, with /proc visibility."""
    rows = []
    for index in range(lib.nvmlDeviceGetCount()):
        handle = lib.nvmlDeviceGetHandleByIndex(index)
        for kind, call in (
            ("compute", lib.nvmlDeviceGetComputeRunningProcesses),
            ("graphics", lib.nvmlDeviceGetGraphicsRunningProcesses),
        ):
            try:
                found = call(handle)
            except lib.NVMLError as exc:
                rows.append({"index": index, "kind": kind, "error": str(exc)})
                continue
            for p in found:
                rows.append(
                    {
                        "index": index,
                        "kind": kind,
                        "pid": p.pid,
                        "used_bytes": p.usedGpuMemory,
                        "proc_visible": Path(f"/proc/{p.pid}").exists(),
                    }
                )
    return rows


def read_first_line(process: subprocess.Popen, timeout: float) -> str | None:
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return got[0] if got else None


def usage_section(work: Path, status: Status, gpus, lib) -> dict:
    """A child holding 8 GiB on cuda:0: what NVML says by its host PID, against torch and nvidia-smi."""
    result: dict = {"alloc_bytes": USAGE_ALLOC_BYTES}
    child = subprocess.Popen(
        [sys.executable, "-c", ALLOC_CHILD, str(USAGE_ALLOC_BYTES)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    remember_pgid(work, child.pid)
    try:
        line = read_first_line(child, 60)
        if not line:
            child.kill()
            err = child.stderr.read()[-2000:] if child.stderr else ""
            result["child_error"] = err
            status.error(
                f"the 8 GiB child said nothing in 60 s: {(err.strip().splitlines() or ['?'])[-1][:200]}"
            )
            return result
        child_info = json.loads(line)
        result["child"] = child_info
        if not child_info.get("cuda"):
            status.finding("the child has no CUDA device: no GPU memory to look for")
        if gpus is None:
            status.finding("NVML is not available: usage by PID cannot be read")
            return result
        time.sleep(1.0)  # NVML's process list can trail the allocation by a moment
        mine = gpus.usage([child.pid])
        nobody = gpus.usage([os.getpid()])  # this process has no CUDA context
        result["usage_child"] = mine
        result["usage_no_gpu_pid"] = {"pid": os.getpid(), "usage": nobody}
        result["device_usage"] = [
            dict(zip(("index", "used_bytes", "util_pct", "processes"), row, strict=True))
            for row in gpus.device_usage()
        ]
        result["nvml_processes"] = raw = nvml_processes(lib)
        code, out, err = sh(
            [
                "nvidia-smi",
                "--query-compute-apps=pid,process_name,used_memory,gpu_uuid",
                "--format=csv,noheader,nounits",
            ]
        )
        result["smi_compute_apps"] = out if code == 0 else f"exit {code}: {err.strip()}"
        listed = sorted({r["pid"] for r in raw if "pid" in r})
        if child.pid not in listed:
            hidden = [p for p in listed if not Path(f"/proc/{p}").exists()]
            status.finding(
                f"NVML does not list the child's PID {child.pid}; it lists {listed}"
                f"{f' ({len(hidden)} not in our /proc: another PID namespace)' if hidden else ''}"
            )
        if not mine.readings:
            status.finding(
                f"usage([child pid {child.pid}]) is empty: the watch would see no GPU memory by PID"
            )
        else:
            r = mine.readings[0]
            reserved = child_info.get("reserved") or 0
            smi_used = None
            for row in csv.reader(io.StringIO(out if code == 0 else "")):
                if row and row[0].strip() == str(child.pid):
                    with contextlib.suppress(ValueError):
                        smi_used = int(row[2].strip()) * MIB
            text = (
                f"usage(child): GPU {r.index} {r.memory_used_bytes / GIB:.2f} GiB "
                f"({'WHOLE DEVICE stand-in' if r.whole_device else 'per process'}), "
                f"util {r.utilization_pct}%; torch reserved {reserved / GIB:.2f} GiB "
                f"(NVML - reserved = {(r.memory_used_bytes - reserved) / MIB:.0f} MiB: the CUDA context); "
                f"nvidia-smi {'-' if smi_used is None else f'{smi_used / GIB:.2f} GiB'}"
            )
            if r.whole_device:
                status.finding(text)
            else:
                status.ok(text)
        if nobody.readings:
            status.finding(f"usage([a PID without GPU]) is not empty: {jsonable(nobody.readings)}")
        else:
            status.ok(f"usage([pid {os.getpid()}, no CUDA context]) is empty, as it should be")
        return result
    finally:
        kill_group(child.pid)
        with contextlib.suppress(Exception):
            child.wait(10)


def step_nvml(args, status: Status) -> None:
    from kit.runtime import nvml

    data: dict = {}
    try:
        data["nvml_missing"] = nvml.nvml_missing()
        inventory = jsonable(nvml.read_inventory())
        data["inventory"] = inventory
    except Exception as exc:
        status.error(f"read_inventory raised {type(exc).__name__}: {exc}")
        inventory = {"devices": [], "error": str(exc)}
    if inventory.get("error"):
        status.finding(f"NVML not available: {inventory['error']}")
    else:
        devices = inventory.get("devices") or []
        status.ok(
            f"NVML: {len(devices)} GPU(s) "
            + "; ".join(f"{d['name']} cc {d['compute_capability']} nvlinks {d['nvlinks']}" for d in devices)
            + f"; driver {inventory.get('driver_version')} CUDA {inventory.get('cuda_driver_version')}"
        )
        if inventory.get("lost"):
            status.finding(f"NVML reports lost GPUs: {inventory['lost']}")

    code, out, err = sh(
        ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"]
    )
    smi_rows = parse_smi_csv(out) if code == 0 else []
    links_code, links_text, _ = sh(["nvidia-smi", "nvlink", "-s"])
    _, query_text, _ = sh(["nvidia-smi", "-q"], timeout=30)
    data["nvidia_smi"] = {
        "rows": smi_rows,
        "nvlinks": parse_smi_nvlinks(links_text) if links_code == 0 else None,
        "cuda": smi_cuda_version(query_text),
    }
    if code != 0:
        data["nvidia_smi"]["error"] = err.strip() or f"exit {code}"
        status.finding(f"nvidia-smi not available for the comparison ({err.strip()[:120] or code})")
    if not inventory.get("error") or smi_rows:
        rows = compare_inventory(
            inventory, smi_rows, data["nvidia_smi"]["nvlinks"], data["nvidia_smi"]["cuda"]
        )
        data["comparison"] = rows
        bad = [r for r in rows if not r["agree"]]
        table = "\n".join(
            f"  {'' if r['index'] is None else r['index']!s:>3} {r['field']:<20} nvml={r['nvml']!s:<45} "
            f"nvidia-smi={r['nvidia_smi']!s:<45} {'ok' if r['agree'] else 'DIFFERS'} {r.get('note', '')}"
            for r in rows
        )
        print("NVML vs nvidia-smi:\n" + table)
        for r in bad:
            where = "host" if r["index"] is None else f"GPU {r['index']}"
            status.finding(f"NVML vs nvidia-smi, {where} {r['field']}: {r['nvml']!r} vs {r['nvidia_smi']!r}")
        if rows and not bad:
            status.ok(f"NVML and nvidia-smi agree on all {len(rows)} compared facts")

    gpus = None
    try:
        gpus = nvml.open_nvml()
        if gpus is not None:
            data["p2p_matrix"] = gpus.p2p_matrix()
            data["topology"] = gpus.topology()
            data["device_usage_before"] = gpus.device_usage()
            pairs = data["p2p_matrix"] or "{} (one GPU: no pairs)"
            status.ok(f"p2p_matrix {pairs}; topology {data['topology'] or '{}'}")
    except Exception as exc:
        status.error(f"p2p/topology raised {type(exc).__name__}: {exc}")
    try:
        lib = gpus.lib if gpus is not None else None
        data["usage"] = usage_section(Path(args.work), status, gpus, lib)
    except Exception as exc:
        status.error(f"usage by PID raised {type(exc).__name__}: {exc}")
    finally:
        if gpus is not None:
            gpus.close()
    dump_json(Path(args.out) / "nvml.json", data)
