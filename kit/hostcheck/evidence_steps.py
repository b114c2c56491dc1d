"""Issue 38's steps: what one lent GPU proves about the evidence the kit reads. Results in
OUT/evidence.json (one key per step).

- xid-events: the kit's NVML reader registers for Xid critical-error events on every GPU
  (kit/runtime/nvml.py) and reads none on a healthy host; the kernel log reader
  (kit/runtime/kernel_log.py) says whether the host's `NVRM: Xid` lines can be read, and any Xid of
  the last hour there is named;
- load-progress: a child maps a shard-sized `*.safetensors` file already in the page cache and
  touches its pages over a few seconds, as 0.5.23's loader does through safe_open; the kit's
  mapped-pages reading (kit/runtime/mapped.py) must climb to the file's size while the child's
  /proc/PID/io read_bytes stays near 0 (no block I/O on a warm cache);
- acceptance: SGLang's own accepted-draft simulation on the GPU (spec_utils.generate_simulated_accept_index
  on CUDA tensors: the CUDA kernel of kernels/ops/speculative/simulated_accept.py) with the smoke's
  env, counted per request as the scheduler counts it, and TokenizerManager's per-request figure:
  where SGLang is importable on the host (it is not installed by the check: then said, not run).

Standard library at module level, as every hostcheck module.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kit.hostcheck.record import MIB, Status, dump_json, jsonable

EVIDENCE = "evidence.json"
SHARD_BYTES = 256 * MIB
# The child of load-progress: map the file, touch one byte a page, a slice at a time, then hold.
_TOUCH = r"""
import mmap, sys, time
path, steps = sys.argv[1], int(sys.argv[2])
with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
    page, size = mmap.PAGESIZE, len(mapped)
    print("MAPPED", flush=True)
    for step in range(steps):
        total = 0
        for offset in range(step * size // steps, (step + 1) * size // steps, page):
            total += mapped[offset]
        time.sleep(0.4)
    print("TOUCHED", flush=True)
    sys.stdin.readline()
"""


def _keep(out: Path, key: str, value) -> None:
    path = out / EVIDENCE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    data[key] = jsonable(value)
    dump_json(path, data)


def step_xid_events(args, status: Status) -> None:
    from kit.runtime.kernel_log import KernelLog
    from kit.runtime.nvml import nvml_missing, open_nvml, xid_note

    record: dict = {"nvml_missing": nvml_missing()}
    gpus = open_nvml()
    if gpus is None:
        status.finding(f"NVML not available: {record['nvml_missing']}")
        _keep(Path(args.out), "xid-events", record)
        return
    log = KernelLog(since_wall=time.time() - 3600)
    try:
        gpus.read_kernel_from(log)
        first = gpus.read_xids()
        time.sleep(2)
        second = gpus.read_xids()
        record.update(
            gpus=gpus.count,
            events_since=gpus.events_since,
            events_note=gpus.events_note,
            kernel_note=log.note,
            xids=[x.describe() for x in (*first, *second)],
            note=xid_note(gpus),
        )
    finally:
        gpus.close()
    _keep(Path(args.out), "xid-events", record)
    if record["events_since"] is None:
        status.finding(f"NVML's Xid events could not be registered here: {record['events_note']}")
    else:
        status.ok(f"Xid events registered on {record['gpus']} GPU(s); {len(record['xids'])} Xid(s) read")
    if record["xids"]:
        status.finding(
            f"Xids on this host (NVML since registration, the kernel log's last hour): {record['xids']}"
        )
    if "cannot be read" in (record["kernel_note"] or ""):
        status.finding(record["kernel_note"])
    else:
        status.ok(f"read {record['kernel_note']}")


def judge_load_progress(samples: list[dict], size: int) -> tuple[str, str]:
    """Pure: ('ok' | 'finding', why) for the mapped-pages samples of a warm-cache load."""
    if not samples:
        return "finding", "no sample of the child's mappings (its /proc/PID/smaps could not be read)"
    top = max(s.get("resident") or 0 for s in samples)
    read = max(s.get("read_bytes") or 0 for s in samples)
    rose = [s.get("resident") or 0 for s in samples]
    moved = len(set(rose)) > 2
    said = f"resident pages rose to {top / MIB:.0f} of {size / MIB:.0f} MiB over {len(samples)} samples"
    said += f", the child's read_bytes {read / MIB:.1f} MiB"
    if top >= 0.9 * size and moved and read < 0.05 * size:
        return "ok", f"page-cache load: {said}: the mapped pages move where block I/O shows nothing"
    return "finding", f"page-cache load not as modelled: {said}"


def step_load_progress(args, status: Status) -> None:
    from kit.runtime.mapped import read_mapped

    folder = Path(tempfile.mkdtemp(prefix="kit-load-", dir=args.work))
    shard = folder / "model-00001-of-00001.safetensors"
    with shard.open("wb") as handle:
        for _ in range(SHARD_BYTES // MIB):
            handle.write(os.urandom(MIB))
    shard.read_bytes()  # into the page cache: what a warm start finds
    child = subprocess.Popen(
        [sys.executable, "-c", _TOUCH, str(shard), "10"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    samples: list[dict] = []
    try:
        assert child.stdout is not None
        child.stdout.readline()  # MAPPED
        io = Path(f"/proc/{child.pid}/io")
        for _ in range(40):
            reading = read_mapped([child.pid])
            try:
                read_bytes = int(dict(line.split(": ") for line in io.read_text().splitlines())["read_bytes"])
            except (OSError, KeyError, ValueError):
                read_bytes = None
            if reading is not None:
                samples.append(
                    {
                        "t": round(time.monotonic(), 2),
                        "resident": reading.resident_bytes,
                        "mapped": reading.mapped_bytes,
                        "storage": reading.storage,
                        "read_bytes": read_bytes,
                    }
                )
            if child.poll() is not None or (reading and reading.resident_bytes >= SHARD_BYTES):
                break
            time.sleep(0.25)
    finally:
        child.kill()
        child.wait()
        shard.unlink(missing_ok=True)
        folder.rmdir()
    verdict, why = judge_load_progress(samples, SHARD_BYTES)
    _keep(Path(args.out), "load-progress", {"samples": samples, "size": SHARD_BYTES, "verdict": why})
    status.add(verdict, why + (f"; storage {samples[-1]['storage']}" if samples else ""))


# SGLang's simulation on CUDA tensors, then its per-request figure (the CPU docker test's probe,
# tests/smoke/test_simulated_acceptance_docker.py, with the tensors on cuda:0).
_ACCEPT = r"""
import json, types, torch
from sglang.srt.speculative import spec_utils as su
device = "cuda" if torch.cuda.is_available() else "cpu"
steps, drafts, wanted = 3, 4, 16
completion, verify_ct, correct = 1, 0, 0
while completion < wanted:
    index = torch.full((1, drafts), -1, dtype=torch.int32, device=device)
    ok = torch.zeros(1, dtype=torch.int32, device=device)
    su.generate_simulated_accept_index(
        index, torch.zeros(drafts, dtype=torch.int32, device=device), ok,
        torch.arange(drafts, device=device).view(1, -1),
        torch.arange(100, 100 + drafts, device=device).view(1, -1), 1, steps,
    )
    completion = min(wanted, completion + int(ok[0]) + 1)
    verify_ct, correct = verify_ct + 1, correct + int(ok[0])
recv = types.SimpleNamespace(completion_tokens=[completion], spec_verify_ct=[verify_ct],
    spec_num_correct_drafts=[correct], spec_correct_drafts_histogram=[[]], spec_num_cap_tokens=None)
meta = {"completion_tokens": completion}
try:  # the tokenizer manager imports SGLang's multimodal stack (torchvision): not on every host
    from sglang.srt.managers.tokenizer_manager import TokenizerManager
    TokenizerManager._calculate_spec_decoding_metrics(types.SimpleNamespace(), meta, recv, 0)
except Exception as exc:  # its import, or its runtime context (get_spec) unpublished: the counts stand
    meta["spec_verify_ct"], meta["error"] = verify_ct, f"{type(exc).__name__}: {exc}"
print("ACCEPT " + json.dumps({"device": device, "meta": meta}))
"""


def step_acceptance(args, status: Status) -> None:
    env = {**os.environ, "SGLANG_SIMULATE_ACC_LEN": "3", "SGLANG_SIMULATE_ACC_TOKEN_MODE": "real-draft-token"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _ACCEPT], capture_output=True, text=True, env=env, timeout=80, check=False
        )
    except subprocess.TimeoutExpired:
        status.error("the acceptance probe ran past 80 s (SGLang's import or the kernel's first compile)")
        return
    lines = [line for line in done.stdout.splitlines() if line.startswith("ACCEPT ")]
    record = {"exit": done.returncode, "stderr_tail": done.stderr[-2000:]}
    if not lines:
        missing = re.search(r"No module named '([^'.]+)", done.stderr)
        _keep(Path(args.out), "acceptance", record)
        if missing:
            status.finding(
                f"{missing[1]} is not installed for this Python: SGLang's simulation kernel was not run here "
                "(the CPU docker test runs its CPU path)"
            )
        else:
            status.error(
                f"the acceptance probe failed (exit {done.returncode}): {done.stderr.strip()[-200:]}"
            )
        return
    found = json.loads(lines[-1].removeprefix("ACCEPT "))
    record.update(found)
    _keep(Path(args.out), "acceptance", record)
    meta = found["meta"]
    steps = meta.get("spec_verify_ct")
    status.ok(
        f"SGLang's simulation on {found['device']}: 16 tokens in {steps} verify steps "
        f"(spec_accept_length {meta.get('spec_accept_length')})"
    )
