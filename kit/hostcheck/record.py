"""Recording a step: its verdict lines, JSON that always serialises, and the process helpers each step
shares. A step writes `ok|finding|error<TAB>one line` into WORK/status/STEP; report.summarise reads
them back. Standard library only (the wheels step runs before the kit's dependencies are there)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30
MIB = 1 << 20
STATUSES = ("ok", "finding", "error")


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


def stop_rehearsal(rehearsal: subprocess.Popen, console) -> bool:
    """Kill the rehearsal's process group (the watch never signals it), wait for it, close its console
    file. Whether it is gone now."""
    kill_group(rehearsal.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        rehearsal.wait(10)
    console.close()
    return rehearsal.poll() is not None


def keep_watch(jsonl: Path, lines: list[str], meta: dict, tails: list[tuple[str, Path, int]]) -> None:
    """Append the watch's JSON lines and META to JSONL (what comes back from the device), then print
    the last characters of each (heading, file, characters) for the call's output."""
    with jsonl.open("a", encoding="utf-8") as out_file:
        for line in lines:
            out_file.write(line + "\n")
        out_file.write(json.dumps(jsonable(meta)) + "\n")
    for heading, path, chars in tails:
        print(heading)
        print(path.read_text(errors="replace")[-chars:] if path.exists() else "(none)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
