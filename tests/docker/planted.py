"""Plant a failure in a real `kit up --json` start and record when each line came (monotonic time).

`plant(args, act)` runs the kit in a subprocess and hands every JSON line, as it arrives, to `act`,
which may do something to the server (pause it, kill a rank, lower its memory limit) through the
`Server` it is given. What was done and when is kept beside the lines, so a test can assert how
long after the deed each line came: the verdict's timing is measured, never assumed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from kit.logs.stacks import rank_of_process
from kit.runtime.engine import client

KIT = [sys.executable, "-m", "kit"]


@dataclass
class Server:
    """The server container the kit started, and the deeds done to it (name -> monotonic time)."""

    name: str
    done: dict[str, float] = field(default_factory=dict)
    stop_kit: Callable[[], None] = lambda: None
    """SIGTERM to the kit: it ends INTERRUPTED and removes the server (a test that has seen enough)."""

    @property
    def container(self):
        return client().containers.get(self.name)

    def mark(self, deed: str) -> None:
        self.done.setdefault(deed, time.monotonic())

    def pause(self) -> None:
        self.container.pause()
        self.mark("paused")

    def processes(self) -> list[psutil.Process]:
        root = psutil.Process(self.container.attrs["State"]["Pid"])
        return [root, *root.children(recursive=True)]

    def rank_pid(self, rank: str) -> int:
        for proc in self.processes():
            if rank_of_process(" ".join(proc.cmdline())) == rank:
                return proc.pid
        raise LookupError(f"no process for {rank} in {self.name}")

    def launcher_pid(self) -> int:
        """The SGLang launcher: the child of docker-init (the kit starts servers with --init)."""
        root, *rest = self.processes()
        return next(p.pid for p in rest if p.ppid() == root.pid) if root.name() == "docker-init" else root.pid

    def signal(self, pid: int, signum: int, deed: str) -> None:
        os.kill(pid, signum)  # the host's pid: the tests run as root, as CI does
        self.mark(deed)

    def compilers(self) -> list[str]:
        names = []
        for proc in self.processes():
            try:
                if proc.name() in ("cc1", "cc1plus", "as", "ld"):
                    names.append(proc.name())
            except psutil.Error:
                continue
        return names

    def limit_memory(self, headroom: int) -> None:
        """Cap the container's memory at what it uses now plus `headroom` bytes (docker update)."""
        usage = self.container.stats(stream=False)["memory_stats"]["usage"]
        limit = usage + headroom
        self.container.update(mem_limit=limit, memswap_limit=limit)

    def go(self) -> None:
        """Arm the rehearsal image's oom fault (it waits for this file)."""
        self.container.exec_run(["touch", "/tmp/kit-fault-go"])
        self.mark("go")


@dataclass
class Run:
    code: int
    lines: list[tuple[float, dict]]
    server: Server | None
    stderr: str

    @property
    def result(self) -> dict:
        return self.lines[-1][1]

    def first(self, kind: str) -> tuple[float, dict] | None:
        return next(((t, line) for t, line in self.lines if line.get("type") == kind), None)

    def at(self, kind: str) -> float:
        found = self.first(kind)
        assert found is not None, f"no {kind!r} line: {[line.get('type') for _, line in self.lines]}"
        return found[0]

    @property
    def result_at(self) -> float:
        return self.lines[-1][0]

    def brief(self) -> str:
        keys = ("verdict", "phase", "exception", "first_failure", "rests_on", "kept", "direct_evidence")
        causes = [(c["id"], c["evidence"][:2]) for c in self.result.get("likely_causes", [])[:3]]
        return f"{ {k: self.result.get(k) for k in keys} } causes={causes} stderr={self.stderr[-600:]}"


Act = Callable[[Server, dict], None]


def plant(
    args: list[str], act: Act | None = None, *, env: dict[str, str] | None = None, timeout: float = 420
) -> Run:
    """`kit ARGS --json`, each line handed to `act(server, line)` as it comes (in this thread: keep
    deeds short, or start a thread)."""
    proc = subprocess.Popen(
        [*KIT, *args, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env or dict(os.environ),
    )
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    lines: list[tuple[float, dict]] = []
    server: Server | None = None
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            if not raw.startswith("{"):
                continue
            line = json.loads(raw)
            lines.append((time.monotonic(), line))
            if line.get("type") == "start":
                server = Server(line["container"], stop_kit=proc.terminate)
            if act is not None and server is not None:
                act(server, line)
        proc.wait()
    finally:
        killer.cancel()
    stderr = proc.stderr.read() if proc.stderr else ""
    assert lines and lines[-1][1].get("type") == "result", f"no result line: {stderr[-1500:]}"
    return Run(proc.returncode, lines, server, stderr)


def kernel_kill_time(pid: int) -> float | None:
    """When the kernel's OOM killer killed PID, on the monotonic clock (its log's own timestamp)."""
    for record in _kmsg():
        head, _, message = record.partition(";")
        if f"Killed process {pid} " in message:
            return int(head.split(",")[2]) / 1e6
    return None


def _kmsg() -> list[str]:
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    records = []
    try:
        while True:
            try:
                records.append(os.read(fd, 8192).decode("utf-8", "replace"))
            except BlockingIOError:
                return records
    finally:
        os.close(fd)
