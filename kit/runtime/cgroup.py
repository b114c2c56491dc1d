"""The server's cgroup as evidence: OOM kills, the freezer, CPU throttling. (The kernel's OOM lines
come from kit/runtime/kernel_log.py.)

A process's cgroup comes from /proc/PID/cgroup. On cgroup v2 (one unified tree) its folder holds
memory.events (`oom`, `oom_kill`), cgroup.events (`frozen 1` while `docker pause` holds it) and
cpu.stat (`throttled_usec`); on v1 each controller has its own tree: memory.oom_control (`oom_kill`,
Linux 4.13+), freezer.state (FROZEN) and cpu.stat (`throttled_time`, ns). Docs:
https://docs.kernel.org/admin-guide/cgroup-v2.html and
https://docs.kernel.org/admin-guide/cgroup-v1/memory.html, .../cgroup-v1/freezer-subsystem.html.

Once a container exits its cgroup is removed, so the watcher reads these on every sample and keeps
the last reading. Nothing here writes to a cgroup.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from kit.logs.activity import CgroupReading

ROOT = Path("/sys/fs/cgroup")


def cgroup_dirs(pid: int, proc: Path = Path("/proc"), root: Path = ROOT) -> dict[str, Path]:
    """{controller: folder} of PID's cgroups: 'memory', 'freezer', 'cpu' on v1; 'unified' on v2."""
    try:
        text = (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return {}
    found: dict[str, Path] = {}
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        relative = path.lstrip("/")
        if controllers == "":
            unified = root / "unified" if (root / "unified").is_dir() else root
            found["unified"] = unified / relative
            continue
        for controller in controllers.split(","):
            if controller in ("memory", "freezer", "cpu", "cpuacct"):
                folder = root / controller / relative
                if not folder.is_dir():  # co-mounted: cpu,cpuacct
                    folder = root / controllers / relative
                found.setdefault(controller, folder)
    return found


def _keyed(path: Path) -> dict[str, int] | None:
    """A flat-keyed cgroup file ('oom_kill 1' per line) as numbers; None when unreadable."""
    try:
        text = path.read_text()
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            values[key] = int(value)
    return values


def _shown(folder: Path, root: Path) -> str:
    """A cgroup folder as people read it: 'memory/docker/<id>' under the cgroup root."""
    try:
        return str(folder.relative_to(root))
    except ValueError:
        return str(folder)


def read_cgroup(pid: int | None, proc: Path = Path("/proc"), root: Path = ROOT) -> CgroupReading | None:
    """The cgroup counters of PID's cgroup (the container's init); None where nothing is readable."""
    if not pid:
        return None
    dirs = cgroup_dirs(pid, proc, root)
    oom = oom_kill = None
    frozen: bool | None = None
    throttled: float | None = None
    where = ""
    memory, freezer, cpu = dirs.get("memory"), dirs.get("freezer"), dirs.get("cpu")
    if memory is not None and (events := _keyed(memory / "memory.oom_control")) is not None:
        oom_kill, where = events.get("oom_kill"), _shown(memory, root)
        oom = events.get("under_oom")
    if freezer is not None:
        with contextlib.suppress(OSError):
            frozen = (freezer / "freezer.state").read_text().strip() in ("FROZEN", "FREEZING")
    if cpu is not None and (stat := _keyed(cpu / "cpu.stat")) is not None and "throttled_time" in stat:
        throttled = stat["throttled_time"] / 1e9
    unified = dirs.get("unified")
    if unified is not None:
        if oom_kill is None and (events := _keyed(unified / "memory.events")) is not None:
            oom, oom_kill, where = events.get("oom"), events.get("oom_kill"), _shown(unified, root)
        if frozen is None and (state := _keyed(unified / "cgroup.events")) is not None and "frozen" in state:
            frozen = bool(state["frozen"])
        stat = _keyed(unified / "cpu.stat") if throttled is None else None
        if stat is not None and "throttled_usec" in stat:
            throttled = stat["throttled_usec"] / 1e6
    if oom_kill is None and frozen is None and throttled is None:
        return None
    return CgroupReading(oom=oom, oom_kill=oom_kill, frozen=frozen, throttled_s=throttled, where=where)
