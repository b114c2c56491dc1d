"""The steps of scripts/gpu-host-check: what the kit's GPU half only models, tried on a real GPU host.

Each step is one subcommand, run by the bash entry under `timeout`, so a stuck step costs only its
own limit. A step writes its results into $OUT (at most 11 files in all come back from the device
machine) and its verdict lines into WORK/status/STEP as `ok|finding|error<TAB>one line`; `summary`
turns those into $OUT/summary.txt. No step raises past its own main: every error is recorded and
the next step runs. docs/gpu-host-check.md says what each step proves.

    python3 scripts/gpu_host_check.py STEP --out OUT --work WORK

Steps: wheels (no kit import: puts the missing wheels on PYTHONPATH), import, env, nvml, doctor,
watch-hang, watch-crash, preflight, pytest (tests/runtime/test_gpu_host.py: its log and JUnit XML
beside the summary), watch-spin, watch-compile, watch-quiet, ties (scripts/gpu_shape_steps.py),
summary (with the commit that ran, commit.txt). Everything but `wheels`
imports the kit from PYTHONPATH.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REHEARSAL = ROOT / "scripts" / "gpu_hang_rehearsal.py"
GIB = 1 << 30
MIB = 1 << 20
USAGE_ALLOC_BYTES = 8 * GIB
SMI_FIELDS = ("index", "name", "uuid", "pci.bus_id", "memory.total", "driver_version", "compute_cap")
STATUSES = ("ok", "finding", "error")


# -- recording ----------------------------------------------------------------------------------


class Status:
    """One step's verdict lines in WORK/status/STEP: the worst status leads the summary's line."""

    def __init__(self, work: Path, step: str):
        self.path = work / "status" / step
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.step = step

    def add(self, status: str, text: str) -> None:
        assert status in STATUSES, status
        line = " ".join(str(text).split())
        with self.path.open("a", encoding="utf-8") as out:
            out.write(f"{status}\t{line}\n")
        print(f"[{self.step}] {status}: {line}", flush=True)

    def ok(self, text: str) -> None:
        self.add("ok", text)

    def finding(self, text: str) -> None:
        self.add("finding", text)

    def error(self, text: str) -> None:
        self.add("error", text)


def jsonable(value):
    if hasattr(value, "model_dump"):  # the kit's pydantic rows
        return jsonable(value.model_dump(mode="json"))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def dump_json(path: Path, data) -> None:
    path.write_text(json.dumps(jsonable(data), indent=1) + "\n", encoding="utf-8")


def sh(argv: list[str], timeout: float = 30, **kw) -> tuple[int | None, str, str]:
    """(exit code or None when it could not run / timed out, stdout, stderr)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    except FileNotFoundError as exc:
        return None, "", f"{argv[0]}: not found ({exc.strerror})"
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return None, out, f"{' '.join(argv)}: timed out after {timeout} s"
    return done.returncode, done.stdout, done.stderr


def read_text(path: str, limit: int) -> str:
    try:
        return Path(path).read_bytes()[:limit].decode(errors="replace")
    except OSError as exc:
        return f"(unreadable: {exc.strerror or exc})"


def remember_pgid(work: Path, pgid: int) -> None:
    """Process groups the bash entry kills at the end, should a step die before its own cleanup."""
    with (work / "pgids").open("a") as out:
        out.write(f"{pgid}\n")


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- pure parts (tests/runtime/test_gpu_host_check.py) -----------------------------------------


_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


def wheel_name_version(filename: str) -> tuple[str, str] | None:
    """'pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.whl' -> ('pydantic-core', '2.50.5')."""
    match = _WHEEL.match(filename)
    if not match:
        return None
    return re.sub(r"[-_.]+", "-", match["name"]).lower(), match["version"]


def version_key(text: str) -> tuple:
    """A sortable key: numeric release parts first ('4.12.2' < '4.16.0'); other text compares last."""
    parts = []
    for piece in re.split(r"[.+-]", text):
        parts.append((0, int(piece), "") if piece.isdigit() else (1, 0, piece))
    return tuple(parts)


def wheels_to_install(wheels: list[str], installed: dict[str, str | None]) -> tuple[list[str], list[str]]:
    """(to install, already here): a wheel goes in when its distribution is absent or older here.

    A newer one already installed stays (torch's typing_extensions, say), so nothing the host's own
    packages rely on is shadowed by an older copy from .devwheels.
    """
    take, skip = [], []
    for wheel in sorted(wheels):
        parsed = wheel_name_version(wheel)
        if parsed is None:
            take.append(wheel)
            continue
        name, version = parsed
        have = installed.get(name)
        if have is None or version_key(have) < version_key(version):
            take.append(wheel)
        else:
            skip.append(f"{wheel} ({name} {have} is here)")
    return take, skip


def parse_smi_csv(text: str) -> list[dict[str, str]]:
    """`nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits` -> one dict per GPU."""
    rows = []
    for row in csv.reader(io.StringIO(text)):
        if not row or not "".join(row).strip():
            continue
        cells = [c.strip() for c in row]
        rows.append(dict(zip(SMI_FIELDS, cells, strict=False)))
    return rows


def parse_smi_nvlinks(text: str) -> dict[int, int]:
    """`nvidia-smi nvlink -s`: active links per GPU index ('Link 3: <inactive>' does not count)."""
    links: dict[int, int] = {}
    gpu = None
    for line in text.splitlines():
        head = re.match(r"^GPU (\d+):", line)
        if head:
            gpu = int(head[1])
            links.setdefault(gpu, 0)
        elif gpu is not None and re.match(r"^\s*Link \d+:", line) and "inactive" not in line.lower():
            links[gpu] += 1
    return links


def smi_cuda_version(query_text: str) -> str | None:
    """'CUDA Version : 13.0' from `nvidia-smi -q`."""
    match = re.search(r"^\s*CUDA Version\s*:\s*(\S+)", query_text, re.M)
    return match[1] if match else None


def bus_id_key(bus_id: str | None) -> str | None:
    """'00000000:19:00.0' and '0000:19:00.0' name one device: domain as a number, the rest lower."""
    if not bus_id:
        return None
    parts = bus_id.strip().lower().split(":")
    if len(parts) == 3:
        with contextlib.suppress(ValueError):
            parts[0] = str(int(parts[0], 16))
    return ":".join(parts)


def compare_inventory(
    inventory: dict, smi_rows: list[dict[str, str]], smi_links: dict[int, int] | None, smi_cuda
):
    """Rows {index, field, nvml, nvidia_smi, agree, note} for every fact both sides give."""
    rows = [
        {
            "index": None,
            "field": "count",
            "nvml": len(inventory.get("devices") or ()),
            "nvidia_smi": len(smi_rows),
        },
        {
            "index": None,
            "field": "cuda_driver_version",
            "nvml": inventory.get("cuda_driver_version"),
            "nvidia_smi": smi_cuda,
        },
    ]
    by_index = {int(r["index"]): r for r in smi_rows if r.get("index", "").isdigit()}
    for device in inventory.get("devices") or ():
        smi = by_index.get(device["index"], {})
        memory = smi.get("memory.total", "")
        smi_mib = int(memory) if memory.isdigit() else None
        pairs = {  # field: (NVML's answer, nvidia-smi's)
            "name": (device["name"], smi.get("name")),
            "uuid": (device["uuid"], smi.get("uuid")),
            "memory_total_mib": (device["memory_total_bytes"] // MIB, smi_mib),
            "compute_capability": (device["compute_capability"], smi.get("compute_cap")),
            "pci_bus_id": (device["pci_bus_id"], smi.get("pci.bus_id")),
            "driver_version": (inventory.get("driver_version"), smi.get("driver_version")),
            "nvlinks": (device["nvlinks"], None if smi_links is None else smi_links.get(device["index"], 0)),
        }
        rows += [
            {"index": device["index"], "field": field, "nvml": nvml, "nvidia_smi": theirs}
            for field, (nvml, theirs) in pairs.items()
        ]
    for row in rows:
        a, b = row["nvml"], row["nvidia_smi"]
        if row["field"] == "pci_bus_id" and a != b and bus_id_key(a) == bus_id_key(b):
            row["agree"], row["note"] = True, "same device, spelled differently"
        else:
            row["agree"] = a == b
    return rows


def result_line(lines: list[str]) -> dict | None:
    """The watch's last `"type": "result"` object among its JSON lines."""
    for line in reversed(lines):
        with contextlib.suppress(ValueError):
            obj = json.loads(line)
            if isinstance(obj, dict) and obj.get("type") == "result":
                return obj
    return None


def summarise(steps: list[tuple[str, list[tuple[str, str]], str]], commit: str | None = None) -> str:
    """summary.txt: one headline per step (its worst status, first line of that status), then details.

    `steps`: (name, [(status, text), ...], extra) where extra is e.g. '12.3 s' or 'timed out'.
    `commit`: the repository commit the run used, said under the headline.
    """
    rank = {s: i for i, s in enumerate(STATUSES)}
    head, detail = [], []
    counts = dict.fromkeys(STATUSES, 0)
    for name, lines, extra in steps:
        if not lines:
            lines = [("error", "no result recorded (the step died before saying anything)")]
        worst = max(lines, key=lambda item: rank[item[0]])[0]
        counts[worst] += 1
        first = next(text for status, text in lines if status == worst)
        head.append(f"{name:<12} {worst:<8} {first}{f'  [{extra}]' if extra else ''}")
        detail += [f"{name:<12} {status:<8} {text}" for status, text in lines]
    total = ", ".join(f"{counts[s]} {s}" for s in STATUSES)
    top = [f"gpu-host-check: {len(steps)} steps: {total}", *([f"commit: {commit}"] if commit else [])]
    return "\n".join([*top, "", *head, "", "all lines:", *detail, ""])


def commit_of(root: Path, given: str | None) -> str:
    """The commit this copy of the repository is: KIT_CHECK_COMMIT where the copy has no .git (a
    device machine gets the working tree only), else git's own answer, '+ local changes' if dirty."""
    if given:
        return f"{given} (KIT_CHECK_COMMIT)"
    code, head, _ = sh(["git", "-C", str(root), "rev-parse", "HEAD"], timeout=10)
    if code != 0 or not re.fullmatch(r"[0-9a-f]{40}", head.strip()):
        return "unknown: not a git checkout and KIT_CHECK_COMMIT unset"
    code, changes, _ = sh(
        ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], timeout=10
    )
    return head.strip() + (" + local changes" if code == 0 and changes.strip() else "")


# -- wheels (no kit import) ---------------------------------------------------------------------


def installed_versions(names: list[str], leave_out: Path) -> dict[str, str | None]:
    """The host's own versions: sys.path without `leave_out` (the folder about to be refilled)."""
    from importlib import metadata

    gone = leave_out.resolve()
    paths = [
        p
        for p in sys.path
        if not (Path(p or ".").resolve() == gone or gone in Path(p or ".").resolve().parents)
    ]
    found: dict[str, str | None] = {}
    for name in names:
        dist = next(iter(metadata.distributions(name=name, path=paths)), None)
        found[name] = dist.version if dist is not None else None
    return found


def unpack_wheel(wheel: Path, dest: Path) -> None:
    """What `pip install --target` does for these wheels, for a host without pip: unzip, then move
    NAME.data/scripts/* to dest/bin (py-spy's binary) and NAME.data/{purelib,platlib} to dest."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(dest)
    for data in dest.glob("*.data"):
        for kind in ("purelib", "platlib"):
            for item in (data / kind).glob("*") if (data / kind).is_dir() else ():
                shutil.move(str(item), dest / item.name)
        scripts = data / "scripts"
        if scripts.is_dir():
            (dest / "bin").mkdir(exist_ok=True)
            for item in scripts.iterdir():
                target = dest / "bin" / item.name
                shutil.move(str(item), target)
                target.chmod(0o755)
        shutil.rmtree(data, ignore_errors=True)


def step_wheels(args, status: Status) -> None:
    src, dest = Path(args.wheels), Path(args.deps)
    wheels = sorted(p.name for p in src.glob("*.whl")) if src.is_dir() else []
    if not wheels:
        status.error(f"no wheels in {src} (run scripts/gpu-host-check --fetch-wheels here, carry .devwheels)")
        return
    names = [parsed[0] for w in wheels if (parsed := wheel_name_version(w))]
    take, skip = wheels_to_install(wheels, installed_versions(names, dest))
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    (Path(args.work) / "wheels.txt").write_text(
        "installed into "
        + str(dest)
        + ":\n  "
        + "\n  ".join(take)
        + "\nalready here:\n  "
        + "\n  ".join(skip)
        + "\n"
    )
    if not take:
        status.ok(f"nothing to install: {len(skip)} wheels already satisfied")
        return
    code, out, err = sh(
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--target", str(dest)]
        + [str(src / w) for w in take],
        timeout=120,
    )
    print(out[-3000:], err[-3000:], sep="\n")
    if code != 0:
        status.finding(f"pip install --target failed (exit {code}); unpacking the wheels by hand instead")
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        for w in take:
            unpack_wheel(src / w, dest)
    spy = dest / "bin" / "py-spy"
    status.ok(
        f"{len(take)} wheels into {dest} ({', '.join(wheel_name_version(w)[0] for w in take)}); "
        f"{len(skip)} already here; py-spy binary {'present' if spy.exists() else 'ABSENT'}"
    )


# -- import ------------------------------------------------------------------------------------


def step_import(args, status: Status) -> None:
    code, out, err = sh([sys.executable, "-m", "kit", "--help"], timeout=60)
    print(out[-1500:], err[-3000:], sep="\n")
    if code != 0:
        status.error(f"python3 -m kit --help exited {code}: {(err.strip().splitlines() or ['?'])[-1]}")
        return
    import kit
    import kit.cli

    spy = shutil.which("py-spy")
    status.ok(
        f"python3 -m kit --help works (kit {kit.__version__} from {Path(kit.__file__).parent}); py-spy: {spy}"
    )
    if not spy:
        status.finding("py-spy is not on PATH: the watch's stacks will say so")


# -- env ---------------------------------------------------------------------------------------

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


# -- nvml (and usage by host PID) --------------------------------------------------------------

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


# -- doctor ------------------------------------------------------------------------------------


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


# -- watch: the mission's hang through the real host path --------------------------------------


def watch_to_verdict(argv: list[str], limit: float, lines: list[str], stamps: list[float]) -> dict:
    """Run `kit watch ... --json` to its end (past `limit`: SIGINT, then kill). Its stdout lines and
    their times (seconds from its start) go into `lines` and `stamps` as they come, so a step that is
    stopped keeps them; a watch still running when this returns or raises is stopped too."""
    t0 = time.monotonic()
    watch = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:

        def pump():
            for line in watch.stdout:
                lines.append(line.rstrip("\n"))
                stamps.append(time.monotonic() - t0)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        errs: list[str] = []
        err_reader = threading.Thread(target=lambda: errs.append(watch.stderr.read()), daemon=True)
        err_reader.start()
        ran: dict = {}
        try:
            code = watch.wait(limit)
        except subprocess.TimeoutExpired:
            watch.send_signal(signal.SIGINT)
            try:
                code = watch.wait(15)
            except subprocess.TimeoutExpired:
                watch.kill()
                code = watch.wait()
            ran["watch_timed_out"] = limit
        reader.join(5)
        err_reader.join(5)
        ran["watch_exit_code"] = code
        ran["watch_seconds"] = round(time.monotonic() - t0, 2)
        ran["watch_stderr_tail"] = (errs[0] if errs else "")[-3000:]
        return ran
    finally:
        if watch.poll() is None:  # the step was stopped: the watch goes too
            watch.send_signal(signal.SIGINT)
            try:
                watch.wait(5)
            except subprocess.TimeoutExpired:
                watch.kill()


def step_watch(args, status: Status, mode: str) -> None:
    import psutil

    work, out = Path(args.work), Path(args.out)
    log = work / f"rehearsal-{mode}.log"
    log.unlink(missing_ok=True)
    console = (work / f"rehearsal-{mode}.out").open("w")
    port = free_port()
    expected = {"hang": ("hung", 4), "crash": ("crashed", 1)}[mode]
    rehearsal = subprocess.Popen(
        [
            sys.executable,
            str(REHEARSAL),
            "--log",
            str(log),
            "--port",
            str(port),
            "--mode",
            mode,
            "--crash-after",
            "8",
        ],
        stdout=console,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    remember_pgid(work, rehearsal.pid)
    jsonl = out / "watch.jsonl"  # both modes, one after the other (8 files come back at most)
    stall = ["--stall", "launch=60", "--stall", f"init={args.stall}"]
    argv = [
        sys.executable,
        "-m",
        "kit",
        "watch",
        "--pid",
        str(rehearsal.pid),
        "--log",
        str(log),
        *stall,
        "--json",
    ]
    meta: dict = {
        "type": "gpu-host-check",
        "mode": mode,
        "argv": argv,
        "rehearsal_pid": rehearsal.pid,
        "port": port,
    }
    lines: list[str] = []
    stamps: list[float] = []
    try:
        meta.update(watch_to_verdict(argv, args.watch_limit, lines, stamps))
        code = meta["watch_exit_code"]
        result = result_line(lines)
        if result is not None:
            meta["result_after_s"] = round(
                stamps[lines.index(next(x for x in reversed(lines) if '"result"' in x))], 2
            )

        # Is what the watch watched still there? (It must never signal it.)
        alive = {}
        try:
            launcher = psutil.Process(rehearsal.pid)
            tree = [launcher, *launcher.children(recursive=True)]
            alive = {
                str(p.pid): {
                    "status": p.status(),
                    "cmdline": " ".join(p.cmdline())[:120],
                    "cpu_s": sum(p.cpu_times()[:2]),
                }
                for p in tree
            }
        except psutil.NoSuchProcess:
            alive = {}
        meta["alive_after_watch"] = alive
        meta["rehearsal_returncode"] = rehearsal.poll()
        gpu_now = None
        with contextlib.suppress(Exception):
            from kit.runtime.nvml import open_nvml

            gpus = open_nvml()
            if gpus is not None:
                gpu_now = jsonable(gpus.usage([int(p) for p in alive] or [rehearsal.pid]))
                gpus.close()
        meta["nvml_usage_of_rehearsal_now"] = gpu_now

        verdict = result.get("verdict") if result else None
        if result is None:
            status.error(
                f"{mode}: no result line from kit watch (exit {code}, {meta['watch_seconds']} s): "
                f"{(meta['watch_stderr_tail'].strip().splitlines() or ['-'])[-1][:200]}"
            )
            return
        activity = result.get("activity") or {}
        stacks = (
            "; ".join(f"{s['rank']} {s['kind']}: {s['where']}" for s in result.get("stacks") or []) or "none"
        )
        headline = (
            f"{mode}: {str(verdict).upper()} in {result.get('phase')} exit {code} "
            f"after {meta.get('result_after_s')} s; activity {activity.get('shape')} "
            f"cpu {activity.get('cpu_cores')} cores, gpu_mem_delta {activity.get('gpu_mem_delta_gib')} GiB, "
            f"gpu_error {result.get('gpu_error') or activity.get('gpu_error')}; stacks {stacks}"
        )
        if (verdict, code) == expected:
            status.ok(headline)
        else:
            status.finding(f"expected {expected[0].upper()} exit {expected[1]}; got {headline}")
        gpu_mems = [
            json.loads(x).get("gpu_mem_bytes") for x in lines if '"activity"' in x and x.startswith("{")
        ]
        seen = [m for m in gpu_mems if m]
        if seen:
            status.ok(f"{mode}: the watch read GPU memory by PID: up to {max(seen) / GIB:.2f} GiB")
        else:
            status.finding(
                f"{mode}: the watch's activity lines carry no GPU memory (gpu_mem_bytes {set(gpu_mems)})"
            )
        if mode == "hang":
            if alive and all(v["status"] != psutil.STATUS_ZOMBIE for v in alive.values()):
                status.ok(f"hang: the watched tree is alive after the verdict ({len(alive)} processes)")
            else:
                status.error(f"hang: the watched process is gone after the watch: {alive or 'no process'}")
            kinds = {s.get("kind") for s in result.get("stacks") or []}
            if "rendezvous" not in kinds:
                status.finding(f"hang: no stack classified as rendezvous (kinds {kinds or 'none'})")
        bundle = result.get("bundle")
        if bundle and Path(bundle).is_file() and mode == "hang":
            size = Path(bundle).stat().st_size
            if size < 15 * MIB:
                shutil.copyfile(bundle, out / "bundle-hang.tar.gz")
                status.ok(f"hang: the bundle ({size} bytes) is bundle-hang.tar.gz")
            else:
                status.finding(f"hang: the bundle is {size} bytes, too big to bring back")
    finally:
        kill_group(rehearsal.pid)
        with contextlib.suppress(Exception):
            rehearsal.wait(10)
        console.close()
        with jsonl.open("a", encoding="utf-8") as out_file:
            for line in lines:
                out_file.write(line + "\n")
            out_file.write(json.dumps(jsonable(meta)) + "\n")
        print(f"--- rehearsal {mode} log ({log}):")
        print(log.read_text(errors="replace")[-6000:] if log.exists() else "(none)")
        print(f"--- rehearsal {mode} console:")
        print((work / f"rehearsal-{mode}.out").read_text(errors="replace")[-4000:])


# -- summary -----------------------------------------------------------------------------------


# -- preflight: the rank script's group path on NCCL (peer traffic only with two GPUs), the probe --


def ranks_run(
    work: Path, world: int, timeout: float, *, gpus: bool = True, python: str = sys.executable
) -> dict:
    """The in-image rank script (kit/pivot/inimage/ranks.py) on this host's PYTHON, with the request
    `kit preflight` sends (rank_request over the default target of a host with or without GPUs: NCCL
    on cuda, else gloo), read back through the kit's own PreflightRun. Only torch's timeouts are
    this check's own, so a rank that never comes costs TIMEOUT, not the plan's minutes.
    tests/runtime/test_gpu_host.py runs it too."""
    from kit.pivot.preflight import preflight_spec, rank_request
    from kit.pivot.preflight_container import RANKS_SCRIPT, SGLANG_GROUPS
    from kit.pivot.steps import STEPS, PreflightRun, device_plan, nccl_version, step_rows, transports

    folder = work / f"preflight-{world}"
    folder.mkdir(parents=True, exist_ok=True)
    for script in (RANKS_SCRIPT, SGLANG_GROUPS):
        shutil.copyfile(script, folder / script.name)
    spec = preflight_spec(None, overrides=(f"tp={world}",), host_has_gpus=gpus)
    plan = device_plan(spec.device)
    request = {
        **rank_request(spec, world, plan, None, {"NCCL_DEBUG": "INFO"}),
        "collective_timeout_s": timeout,
        "run_timeout_s": timeout,
    }
    (folder / "request.json").write_text(json.dumps(request))
    t0 = time.monotonic()
    code, stdout, stderr = sh(
        [python, "-u", str(folder / RANKS_SCRIPT.name), str(folder / "request.json")],
        timeout=timeout + 15,
        cwd=folder,
        env={**os.environ, "NCCL_DEBUG": "INFO"},
    )
    seconds = round(time.monotonic() - t0, 1)
    run = PreflightRun(world, STEPS, plan, 0.0)
    for line in (stdout + "\n" + stderr).splitlines():
        run.feed_line(line, 1.0)
    verdict = run.verdict(1.0) or run.verdict(1e9)
    return {
        "world_size": world,
        "device": spec.device,
        "exit_code": code,
        "seconds": seconds,
        "verdict": None if verdict is None else jsonable(verdict),
        "steps": [jsonable(row) for row in step_rows(run, verdict)],
        "sweep": list(run.sweep),
        "nccl": nccl_version(run.nccl_lines),
        "transports": list(transports(run.nccl_lines)),
        "setup": jsonable(run.setup),
        "errors": [jsonable(e) for e in run.errors + run.failures],
        "nccl_lines": run.nccl_lines[:60],
        "stdout_tail": stdout[-4000:],
        "stderr_tail": stderr[-4000:],
    }


def step_preflight(args, status: Status) -> None:
    work, data = Path(args.work), {}
    try:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception as exc:  # recorded, the step goes on
        status.error(f"torch: {type(exc).__name__}: {exc}")
        gpus = 0
    device = "cuda" if gpus else "cpu"
    if gpus == 0:  # the same code on gloo: a rehearsal of this step, not a GPU result
        status.finding("no CUDA device: the rank run is rehearsed on gloo (cpu), the probe not tried")
    for world in sorted({1, min(gpus, 2) or 1, gpus + 1}) if gpus else [2]:
        name = f"ranks-{world}-{device}"
        try:
            result = data[name] = ranks_run(work, world, timeout=40, gpus=bool(gpus))
        except Exception as exc:
            status.error(f"{name}: {type(exc).__name__}: {exc}")
            continue
        verdict = result["verdict"] or {}
        said = (
            f"{name}: {verdict.get('verdict')} (exit {result['exit_code']}, {result['seconds']} s); "
            f"NCCL {result['nccl']}; transports {result['transports']}; "
            f"steps {[(r.get('step'), r.get('status')) for r in result['steps']]}"
        )
        if world == 1:  # a world of one has no peer pairs: nothing crossed between GPUs
            said += "; one rank: no peer traffic tested"
        # more ranks than GPUs: the kit must name the failure, not hang or pass
        if device == "cuda" and world > gpus:
            failed = verdict.get("verdict") not in (None, "ok")
            (status.ok if failed else status.finding)(
                f"{said}; errors {[str(e)[:160] for e in result['errors'][:2]]}"
            )
        else:
            (status.ok if verdict.get("verdict") == "ok" else status.finding)(said)
    if gpus:
        probe = ROOT / "kit" / "images" / "inimage" / "verify.py"
        code, stdout, stderr = sh(
            [sys.executable, str(probe), "--all-reduce", "nccl", "--collective-timeout", "40"], timeout=90
        )
        marked = [line for line in stdout.splitlines() if line.startswith("KIT-VERIFY-JSON ")]
        try:
            answer = json.loads(marked[-1].split(" ", 1)[1]) if marked else None
        except ValueError:
            answer = None
        data["image-probe"] = {
            "exit_code": code,
            "answer": answer,
            "stdout_tail": stdout[-3000:],
            "stderr_tail": stderr[-3000:],
        }
        if answer is None:
            status.error(f"image probe: no KIT-VERIFY-JSON line (exit {code}): {stderr.strip()[-200:]}")
        else:
            keys = ("all_reduce", "collective", "kernels", "gpus", "cuda")
            status.ok("image probe: " + "; ".join(f"{k}={str(answer[k])[:160]}" for k in keys if k in answer))
    dump_json(Path(args.out) / "preflight.json", data)


# -- pytest: the same results as gpu tests, their log and JUnit XML beside the summary ------------

GPU_HOST_TESTS = "tests/runtime/test_gpu_host.py"


def step_pytest(args, status: Status) -> None:
    """tests/runtime/test_gpu_host.py under pytest on this host: pytest.txt and pytest-junit.xml in OUT,
    so a GPU run's summary and its test report are committed side by side (docs/evidence/)."""
    from kit.testing.junit import counts

    out = Path(args.out)
    junit = out / "pytest-junit.xml"
    code, smi, _ = sh(["nvidia-smi", "-L"], timeout=20)
    gpus = code == 0 and "GPU " in smi
    # The kit's pytest plugin: by its entry point where the kit is installed, else named (a bare copy).
    from importlib.metadata import entry_points

    installed = any(e.value.startswith("kit.testing.plugin") for e in entry_points(group="pytest11"))
    argv = [sys.executable, "-m", "pytest", *([] if installed else ["-p", "kit.testing.plugin"])]
    argv += ["-m", "gpu", GPU_HOST_TESTS]
    argv += ["-v", "-rs", "-p", "no:cacheprovider", f"--junitxml={junit}"]
    argv += ["--kit-require-gpu"] if gpus else []
    env = {**os.environ, "KIT_TORCH_PYTHON": os.environ.get("KIT_TORCH_PYTHON", sys.executable)}
    code, stdout, stderr = sh(argv, timeout=args.pytest_limit, cwd=ROOT, env=env)
    (out / "pytest.txt").write_text(f"$ {' '.join(argv)}\n{stdout}{stderr}\nexit {code}\n", encoding="utf-8")
    tail = (stdout.strip().splitlines() or ["(no output)"])[-1]
    if not junit.exists():
        status.error(f"pytest wrote no JUnit XML (exit {code}): {tail}")
        return
    tally = counts(junit.read_text(encoding="utf-8"))
    said = f"{tally.line()} (exit {code}{'' if gpus else ', no GPU: gpu tests skip'}): {tail.strip('= ')}"
    # A run that skipped everything showed nothing: a finding, as a failed test is.
    (status.ok if code == 0 and tally.ran else status.finding)(said)


def step_summary(args, status: Status | None = None) -> None:
    work = Path(args.work)
    extras = {}
    timing = work / "timing"
    if timing.exists():
        for line in timing.read_text().splitlines():
            name, _, extra = line.partition("\t")
            extras[name] = extra
    steps = []
    for name in args.steps.split(","):
        path = work / "status" / name
        lines = []
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                state, _, text = line.partition("\t")
                if state in STATUSES:
                    lines.append((state, text))
        steps.append((name, lines, extras.get(name, "")))
    commit = commit_of(ROOT, os.environ.get("KIT_CHECK_COMMIT"))
    (Path(args.out) / "commit.txt").write_text(commit + "\n", encoding="utf-8")
    text = summarise(steps, commit)
    (Path(args.out) / "summary.txt").write_text(text, encoding="utf-8")
    print(text)


STEPS = {
    "wheels": step_wheels,
    "import": step_import,
    "env": step_env,
    "nvml": step_nvml,
    "doctor": step_doctor,
    "watch-hang": lambda a, s: step_watch(a, s, "hang"),
    "watch-crash": lambda a, s: step_watch(a, s, "crash"),
    "preflight": step_preflight,
    "pytest": step_pytest,
}
# Issue 27 item 9: a spinning rank, a cold Triton compile in capture and its control, greedy ties.
SHAPE_STEPS = ("watch-spin", "watch-compile", "watch-quiet", "ties")


def shape_step(name: str):
    def run(args, status: Status) -> None:
        import gpu_shape_steps  # beside this file

        gpu_shape_steps.STEPS[name](args, status)

    return run


STEPS.update({name: shape_step(name) for name in SHAPE_STEPS})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=[*STEPS, "summary"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--wheels", default=str(ROOT / ".devwheels"))
    parser.add_argument("--deps", default="/tmp/kitdeps")
    parser.add_argument("--stall", type=int, default=20, help="watch: the init stall window (s)")
    parser.add_argument("--watch-limit", type=float, default=75, help="watch: its own time limit (s)")
    parser.add_argument("--steps", default=",".join(STEPS), help="summary: the steps, in order")
    parser.add_argument("--pytest-limit", type=float, default=150, help="pytest: its own time limit (s)")
    parser.add_argument("--capture-stall", type=int, default=15, help="capture window (s)")
    parser.add_argument("--compile-seconds", type=float, default=40, help="watch-compile: compiling time (s)")
    parser.add_argument("--ties-limit", type=float, default=150, help="ties: both runs' time limit (s)")
    args = parser.parse_args(argv)
    # `timeout` sends SIGTERM: end through the finally blocks (they kill what the step started).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.step == "summary":
        step_summary(args)
        return 0
    status = Status(Path(args.work), args.step)
    try:
        STEPS[args.step](args, status)
    except SystemExit:
        status.error("stopped by its time limit (SIGTERM)")
        raise
    except BaseException as exc:
        import traceback

        traceback.print_exc()
        status.error(f"raised {type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
