"""The evidence a verdict and its likely causes rest on: one record, read by the cause ranking
(kit/logs/causes.py `rank_causes`) and the report. Pure: values in, values out.

The record's slots:

    facts       Facts: what the run is (nodes, a GPU, a proxy in the server's environment): the
                preconditions causes.toml's `needs` name. None is unknown (an offline log): a cause
                whose facts are unknown is kept, never hidden, and its row says which fact was unknown.
    findings    Finding(key, line, rank, pid, t): direct evidence read from the engine, the kernel
                and the processes, each with the line people read. `key` is one of KEYS; a cause
                lists the keys that raise it in causes.toml `raised_by`, and a raised key outranks
                any word.
    upstream    UpstreamWord(source, line, key): the upstream tools' word, as lines: NCCL RAS
                ("nccl-ras"), PyTorch's flight recorder ("flight-recorder"), SGLang's soft watchdog
                ("sglang-watchdog"). Readers live in their own pure modules (kit/logs/ras.py,
                kit/logs/flight_recorder.py) and hand over UpstreamWord values; a word with a `key`
                (one of KEYS: add a line there for a new one) raises the causes that list it, a word
                without one is shown as evidence and searched as text.
    stacks      the last stack sample's RankStack per rank (kit/logs/stacks.py), when one was read.
    log_text    the text searched for a cause's words: kept log lines, notes, error kinds, the GPUs'
                facts, the activity line.
    raised_text the text searched for a cause's exceptions: the exception and traceback, NVML's own
                error, the server's environment facts.
    shape       the activity's shape at the verdict (quiet, spinning), None when it does not fit one.

The builders below turn what the adapters read (the container's State, the cgroup's counters, the
processes' states, SGLang's child-exit lines, the kernel's OOM lines, stacks) into findings; the
watcher and `kit up` call them on every verdict (kit/startup/result.py `evidence_for`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kit.logs.activity import CgroupReading
from kit.logs.events import Phase
from kit.logs.stacks import RankStack, StackKind, StackState

# Direct evidence, by key: what raising it means. causes.toml `raised_by` must name keys from here.
KEYS: Mapping[str, str] = {
    "container-paused": "the engine reports the container Paused (docker pause: the cgroup freezer)",
    "process-frozen": "the server's cgroup is frozen: nothing in it runs",
    "process-stopped": "a rank's process is stopped (SIGSTOP, a debugger, job control)",
    "container-oom-killed": "the engine reports the container OOMKilled",
    "cgroup-oom-kill": "the server cgroup's memory events count an OOM kill",
    "kernel-oom": "the kernel's log names a process of the server killed for memory",
    "killed-by-signal": "a process of the server died by a signal (SIGKILL: exit -9; 137 for a container)",
    "child-crashed": "SGLang's own line: one of its subprocesses crashed with an exit code",
    "exited": "the server's container exited",
    "sglang-teardown": "SGLang ended its own process tree after a child failed (its SIGQUIT handler): "
    "the container's 137 is that, not an outside kill",
    "cpu-throttled": "the cgroup's cpu.stat counts throttled time (a CPU limit)",
    "stack-compiling": "a rank's stack is in a JIT compile or waits on a compiler child",
    "stack-loading": "a rank's stack is loading weights",
    "stack-waiting": "a rank's stack waits for peers (a collective, a barrier, the store, a recv)",
    "stack-spinning": "a rank's stack spins in a CUDA synchronize",
    "stack-planted": "a rank's stack sits in the rehearsal image's planted fault",
    "stack-unreadable": "no stack could be read",
    # The upstream tools' word (UpstreamWord.key): kit/logs/ras.py, flight_recorder.py, soft_watchdog.py.
    "ras-rank-missing": "NCCL RAS: a rank never launched a collective the others launched, fell behind, "
    "or is missing from its communicator (unresponsive, dead)",
    "ras-all-entered": "NCCL RAS: every rank launched the same last collective and none launched another "
    "between two snapshots: all entered it, none finished (the transport stalled)",
    "fr-rank-missing": "PyTorch's flight recorder (fr_trace): a rank never joined a collective the "
    "others joined",
    "fr-all-entered": "PyTorch's flight recorder (fr_trace): every rank entered a collective, none "
    "completed it",
    "soft-watchdog": "SGLang's soft watchdog fired: a scheduler made no forward progress for its timeout",
}
# How much a raised key weighs in the ranking (1 unless listed): the engine's, the cgroup's and the
# kernel's word about memory and freezing names the cause itself, where a bare signal or SGLang's
# child-exit line only says that something died.
WEIGHTS: Mapping[str, int] = {
    "container-paused": 3,
    "process-stopped": 3,
    "container-oom-killed": 3,
    "cgroup-oom-kill": 3,
    "kernel-oom": 3,
    "process-frozen": 2,
    # A rank's own death by a signal outranks what its peers' errors imply (peer-died follows it).
    "killed-by-signal": 2,
}
NEEDS = frozenset({"nodes>1", "gpu", "proxy"})
OOM_KEYS = frozenset({"container-oom-killed", "cgroup-oom-kill", "kernel-oom"})
DEATH_KEYS = OOM_KEYS | {"killed-by-signal", "child-crashed"}


@dataclass(frozen=True, slots=True)
class Facts:
    """What the run is. None: unknown (an offline log, a host that cannot tell)."""

    nodes: int | None = None
    gpu: bool | None = None
    proxy: bool | None = None
    said: Mapping[str, str] = field(default_factory=dict)
    """Where each fact came from, by name (nodes, gpu, proxy): 'the launch line', 'device cpu'."""

    def holds(self, need: str) -> bool | None:
        if need == "nodes>1":
            return None if self.nodes is None else self.nodes > 1
        if need == "gpu":
            return self.gpu
        if need == "proxy":
            return self.proxy
        raise ValueError(f"unknown need {need!r} (use {sorted(NEEDS)})")

    def describe(self, need: str) -> str:
        name = "nodes" if need == "nodes>1" else need
        value = {"nodes": self.nodes, "gpu": self.gpu, "proxy": self.proxy}[name]
        shown = "unknown" if value is None else str(value) if name == "nodes" else ("yes" if value else "no")
        source = self.said.get(name)
        return f"needs {need}: {name} {shown}" + (f" ({source})" if source else "")


@dataclass(frozen=True, slots=True)
class Finding:
    key: str
    line: str
    rank: str | None = None
    pid: int | None = None
    t: float | None = None  # when first seen, on the watch's clock (None: not known)


UPSTREAM_SOURCES = ("nccl-ras", "flight-recorder", "sglang-watchdog")


@dataclass(frozen=True, slots=True)
class UpstreamWord:
    source: str  # one of UPSTREAM_SOURCES
    line: str
    key: str | None = None  # one of KEYS, when the word raises causes


@dataclass(frozen=True)
class Evidence:
    outcome: str  # ready, crashed, hung (deadline verdicts rank as hung: still going)
    phase: Phase | None = None
    phase_known: bool = True
    facts: Facts = field(default_factory=Facts)
    findings: tuple[Finding, ...] = ()
    upstream: tuple[UpstreamWord, ...] = ()
    stacks: tuple[RankStack, ...] = ()
    log_text: str = ""
    raised_text: str = ""
    shape: str | None = None

    def raised(self) -> dict[str, tuple[str, ...]]:
        """Each raised key with the lines that raised it, in the order found."""
        found: dict[str, list[str]] = {}
        for finding in (*self.findings, *stack_findings(self.stacks)):
            lines = found.setdefault(finding.key, [])
            if finding.line not in lines:
                lines.append(finding.line)
        for word in self.upstream:
            if word.key:
                found.setdefault(word.key, []).append(f"{word.source}: {word.line}")
        return {key: tuple(lines) for key, lines in found.items()}

    def lines(self) -> tuple[str, ...]:
        """Every finding and every upstream word that raises causes, as people read them (the
        upstream tools' other lines, "not asked" and the like, are the result's `upstream`)."""
        seen: list[str] = []
        for line in (
            *(f.line for f in self.findings),
            *(f"{w.source}: {w.line}" for w in self.upstream if w.key),
        ):
            if line not in seen:
                seen.append(line)
        return tuple(seen)


# -- builders: what the adapters read -> findings -------------------------------------------------


def container_findings(
    *,
    name: str,
    paused: bool = False,
    paused_for_s: float | None = None,
    oom_killed: bool = False,
    exit_code: int | None = None,
    gone: bool = False,
    running: bool = True,
    t: float | None = None,
    teardown: str | None = None,
) -> tuple[Finding, ...]:
    """The engine's State of the server's container. `teardown`: SGLang's own line that its SIGQUIT
    handler is ending the process tree (a child failed), when the log has one."""
    found = []
    if paused:
        held = f" for {paused_for_s:.0f} s" if paused_for_s is not None else ""
        found.append(
            Finding(
                "container-paused",
                f"container {name} is Paused{held} (docker pause: nothing runs; `docker unpause {name}`)",
                t=t,
            )
        )
    if oom_killed:
        found.append(Finding("container-oom-killed", f"the engine reports container {name} OOMKilled", t=t))
    if gone:
        found.append(Finding("exited", f"container {name} was removed (--rm, or by hand)", t=t))
    elif not running and exit_code is not None:
        found.append(Finding("exited", f"container {name} exited with code {exit_code}", t=t))
        if exit_code in (137, -9) and not oom_killed and teardown is not None:
            # SGLang's SIGQUIT handler calls kill_process_tree(os.getpid()), which SIGKILLs the main
            # process itself (srt/utils/common.py, 0.5.23): its own end, after a child failed.
            line = (
                f"container {name} exit code {exit_code}: SGLang ended itself with SIGKILL after a "
                f"child failed ({teardown.strip()[:160]})"
            )
            found.append(Finding("sglang-teardown", line, t=t))
        elif exit_code in (137, -9) and not oom_killed:
            # 128 + 9 with no SGLang teardown line: sent from outside (docker kill, a supervisor).
            line = f"container {name} exit code {exit_code}: its main process ended by SIGKILL"
            found.append(Finding("killed-by-signal", line, t=t))
    return tuple(found)


def cgroup_findings(
    first: CgroupReading | None, last: CgroupReading | None, t: float | None = None
) -> tuple[Finding, ...]:
    """OOM kills and throttling counted since the watch began; a frozen cgroup."""
    if last is None:
        return ()
    found = []
    base = first or CgroupReading()
    kills = (last.oom_kill or 0) - (base.oom_kill or 0)
    if last.oom_kill is not None and kills > 0:
        found.append(
            Finding(
                "cgroup-oom-kill",
                f"cgroup {last.where}: oom_kill {last.oom_kill} ({kills} during the watch)",
                t=t,
            )
        )
    if last.frozen:
        found.append(
            Finding("process-frozen", f"cgroup {last.where}: frozen (the freezer holds every process)", t=t)
        )
    throttled = (last.throttled_s or 0.0) - (base.throttled_s or 0.0)
    if last.throttled_s is not None and throttled >= 1.0:
        found.append(
            Finding(
                "cpu-throttled",
                f"cgroup {last.where}: cpu.stat throttled {throttled:.1f} s during the watch",
                t=t,
            )
        )
    return tuple(found)


_SIGNALS = {9: "SIGKILL", 15: "SIGTERM", 6: "SIGABRT", 11: "SIGSEGV", 3: "SIGQUIT", 2: "SIGINT"}


def process_findings(
    processes: Iterable[tuple[str, int, str]] | None, t: float | None = None
) -> tuple[Finding, ...]:
    """Ranks stopped (SIGSTOP, a debugger) or dead (a zombie's exit) from (rank, pid, state)."""
    found = []
    for rank, pid, state in processes or ():
        if state in ("stopped", "tracing-stop"):
            found.append(
                Finding(
                    "process-stopped",
                    f"{rank} (pid {pid}) is {state}: it runs nothing until SIGCONT",
                    rank,
                    pid,
                    t,
                )
            )
        elif state.startswith("zombie: killed by"):
            found.append(
                Finding("killed-by-signal", f"{rank} (pid {pid}) {state[len('zombie: ') :]}", rank, pid, t)
            )
    return tuple(found)


# SGLang 0.5.23 srt/utils/watchdog.py (SubprocessWatchdog._check_processes) and
# srt/entrypoints/engine.py (_scheduler_died_error).
_CHILD_CRASHED = re.compile(
    r"Subprocess (?P<name>\S+) \(pid=(?P<pid>\d+)\) crashed with exit code (?P<code>-?\d+)"
)
_RANK_DIED = re.compile(
    r"Rank (?P<rank>\d+) scheduler died during initialization \(exit code: (?P<code>-?\d+)\)"
)


def child_exit_findings(
    lines: Iterable[tuple[float | None, str]], pid_ranks: Mapping[int, str] | None = None
) -> tuple[Finding, ...]:
    """SGLang's own word that a child process died: the process, its pid, its exit code (a negative
    code is the signal that killed it: -9 is SIGKILL)."""
    pid_ranks = pid_ranks or {}
    found = []
    for t, line in lines:
        crashed = _CHILD_CRASHED.search(line)
        died = _RANK_DIED.search(line) if crashed is None else None
        if crashed is None and died is None:
            continue
        code = int((crashed or died).group("code"))  # type: ignore[union-attr]
        pid = int(crashed.group("pid")) if crashed else None
        name = crashed.group("name") if crashed else f"scheduler rank {died.group('rank')}"  # type: ignore[union-attr]
        # SGLang's pid is in the server's own PID namespace (a container's): it names the process
        # in the line, but is no host pid to match the kernel's lines or the samples against.
        rank = pid_ranks.get(pid) if pid is not None else None
        if rank is None and name.startswith("scheduler_") and name[10:].isdigit():
            rank = f"TP{name[10:]}"  # SGLang numbers a node's schedulers in TP order (engine.py)
        if rank is None and died is not None:
            rank = f"TP{died.group('rank')}"
        how = f"killed by {_SIGNALS.get(-code, f'signal {-code}')}" if code < 0 else f"exit code {code}"
        who = f"{rank} ({name}, pid {pid} in its namespace)" if pid is not None else f"{rank or name}"
        found.append(Finding("child-crashed", f"SGLang: {who} crashed, {how}", rank, None, t))
        if code < 0:
            line = f"{who} {how} (SGLang's exit code {code})"
            found.append(Finding("killed-by-signal", line, rank, None, t))
    return tuple(found)


_KERNEL_OOM = re.compile(
    r"(?P<what>Memory cgroup out of memory|Out of memory): Killed process (?P<pid>\d+) \((?P<comm>[^)]*)\)"
)


def kernel_findings(
    lines: Iterable[str], pid_ranks: Mapping[int, str], pids: Iterable[int] = ()
) -> tuple[Finding, ...]:
    """The kernel's OOM kills of the server's processes (`pid_ranks` and `pids`: the ones it had)."""
    ours = set(pids) | set(pid_ranks)
    found = []
    for line in lines:
        match = _KERNEL_OOM.search(line)
        if match is None or int(match.group("pid")) not in ours:
            continue
        pid = int(match.group("pid"))
        rank = pid_ranks.get(pid)
        found.append(Finding("kernel-oom", f"kernel: {match.group(0)}", rank, pid))
    return tuple(found)


def stack_findings(stacks: Sequence[RankStack]) -> tuple[Finding, ...]:
    found = []
    for stack in stacks:
        if stack.held is not None:
            continue  # a stopped or frozen rank does nothing: its process state is the finding
        if stack.state is StackState.UNREADABLE:
            found.append(Finding("stack-unreadable", stack.describe(), stack.rank, stack.pid))
        elif stack.kind is StackKind.PLANTED:
            found.append(Finding("stack-planted", stack.describe(), stack.rank, stack.pid))
        elif stack.kind is StackKind.COMPILE and stack.state is StackState.WORKING:
            found.append(Finding("stack-compiling", stack.describe(), stack.rank, stack.pid))
        elif stack.kind is StackKind.LOADING and stack.state is StackState.WORKING:
            found.append(Finding("stack-loading", stack.describe(), stack.rank, stack.pid))
        elif stack.state is StackState.WAITING:
            found.append(Finding("stack-waiting", stack.describe(), stack.rank, stack.pid))
        elif stack.state is StackState.SPINNING:
            found.append(Finding("stack-spinning", stack.describe(), stack.rank, stack.pid))
    return tuple(found)


# -- the first failure ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FirstFailure:
    """The process that died first and why: the headline of a crash whose last words are its
    peers' (a gloo 'Connection closed by peer' after a rank was killed)."""

    who: str  # "TP1 (pid 123)", "the server's main process"
    why: str  # "killed by the kernel's OOM killer", "killed by SIGKILL", "exit code 1"
    lines: tuple[str, ...]  # the findings it rests on

    def describe(self) -> str:
        return f"{self.who} {self.why} first"


def first_failure(findings: Sequence[Finding]) -> FirstFailure | None:
    """The earliest death among the findings, named with the strongest reason found for it: an OOM
    kill (the kernel's line for its process, else the cgroup's or engine's count) before a signal."""
    deaths = [f for f in findings if f.key in DEATH_KEYS]
    if not deaths:
        return None
    ranked = [f for f in deaths if f.rank is not None or f.pid is not None] or deaths
    first = min(ranked, key=lambda f: (f.t is None, f.t or 0.0, ranked.index(f)))

    def same(f: Finding) -> bool:
        return (first.pid is not None and f.pid == first.pid) or (
            first.rank is not None and f.rank == first.rank
        )

    mine = [f for f in deaths if same(f)]
    # An OOM kill is this process's when the kernel names it, or when a count says one happened
    # and names no process (the cgroup's oom_kill, the engine's OOMKilled).
    oom = [f for f in findings if f.key in OOM_KEYS and (same(f) or (f.rank is None and f.pid is None))]
    if oom:
        why = "was killed by the kernel's OOM killer"
    elif any(f.key == "killed-by-signal" for f in mine or [first]):
        signal = next(f.line for f in mine or [first] if f.key == "killed-by-signal")
        sigkill = "SIGKILL" in signal or "137" in signal
        why = "was killed by SIGKILL (no OOM kill counted)" if sigkill else "was killed by a signal"
    else:
        why = "crashed"
    pid = first.pid or next((f.pid for f in (*mine, *oom) if f.pid), None)
    if first.rank == "main":
        who = "the server's main process" + (f" (pid {pid})" if pid else "")
    elif first.rank:
        who = first.rank + (f" (pid {pid})" if pid else "")
    elif pid:
        who = f"pid {pid}"
    else:
        who = "the server's main process"
    lines = tuple(dict.fromkeys(f.line for f in (*mine, *oom)))
    return FirstFailure(who, why, lines or (first.line,))
