"""The preflight run as data: rank events in, step states and a verdict out. Pure (time is passed in).

The ranks (kit/pivot/inimage/ranks.py) print `KIT_PREFLIGHT {json}` lines; `PreflightRun` reads them with
the time they arrived and answers, at any moment, which step is under way, how long it has been
quiet, and whether the run is over: ok, failed (a check found wrong values), crashed (an exception,
a rank or the container gone), hung (a step silent for its stall window) or deadline (a step still
busy at its deadline). NCCL's own lines (NCCL_DEBUG=INFO) are kept and summarised by transport.

Two steps belong to the launcher, before any rank exists: `launch` (the container's Python and
`import torch`) and `setup` (SGLang's own arguments and environment); their events carry rank -1
and count for every rank.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from kit.errors import ExitCode

MARK = "KIT_PREFLIGHT "
STEPS = ("init", "allreduce", "graph", "p2p", "sweep")
LAUNCHER_STEPS = ("launch", "setup")
ALL_STEPS = (*LAUNCHER_STEPS, *STEPS)
LAUNCHER = -1
LIMITS_FILE = Path(__file__).resolve().parent / "preflight.toml"

VERDICT_EXIT = {
    "ok": ExitCode.OK,
    "failed": ExitCode.FAILED,
    "crashed": ExitCode.FAILED,
    "hung": ExitCode.HUNG,
    "deadline": ExitCode.DEADLINE,
    "interrupted": ExitCode.INTERRUPTED,
}


@dataclass(frozen=True)
class StepLimit:
    deadline_s: float
    stall_s: float
    progress: bool = False
    """The step reports progress (the sweep: a line per size), so busy-at-the-deadline is not silence."""


@dataclass(frozen=True)
class DevicePlan:
    """What the ranks do on one device kind, and each step's limits."""

    device: str
    limits: dict[str, StepLimit]
    sweep: dict[str, int]
    p2p_bytes: int

    def limit(self, step: str) -> StepLimit:
        return self.limits[step]


@cache
def _plans() -> dict[str, Any]:
    return tomllib.loads(LIMITS_FILE.read_text(encoding="utf-8"))


def device_plan(device: str, deadlines: dict[str, float] | None = None) -> DevicePlan:
    """The plan for 'cpu' or 'cuda' from preflight.toml, with per-step deadline overrides."""
    table = _plans()[device]
    overrides = deadlines or {}
    limits = {}
    for step in ALL_STEPS:
        deadline = float(overrides.get(step, table["deadlines"][step]))
        stall = table.get("stall", {}).get(step)
        limits[step] = StepLimit(deadline, min(float(stall or deadline), deadline), stall is not None)
    return DevicePlan(device, limits, dict(table["sweep"]), int(table["p2p_bytes"]))


def plan_steps(request: dict) -> list[str]:
    """The rank steps a request asks for, up to `until` (ranks.py reads the request the same way)."""
    wanted = [s for s in request.get("steps", STEPS) if s in STEPS]
    until = request.get("until")
    if until in wanted:
        wanted = wanted[: wanted.index(until) + 1]
    return wanted


def parse_event(line: str) -> dict | None:
    """A rank event from one output line, or None for any other line (NCCL's, a traceback's)."""
    start = line.find(MARK)
    if start < 0:
        return None
    try:
        event = json.loads(line[start + len(MARK) :])
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) and "ev" in event else None


# -- NCCL_DEBUG=INFO ---------------------------------------------------------------------------------

_CHANNEL = re.compile(r"NCCL INFO Channel \d+/\d+ : \d+\[\d+\] -> \d+\[\d+\](?: \[\w+\])? via (\S+)")
_VERSION = re.compile(r"NCCL INFO NCCL version (\S+)")
_KEEP = (" via ", "NCCL version", "Using network", "Init COMPLETE", "NCCL WARN", "P2P", "SHM", "NCCL_")


def is_transport_line(line: str) -> bool:
    return ("NCCL INFO" in line or "NCCL WARN" in line) and any(key in line for key in _KEEP)


def transports(lines: Iterable[str]) -> tuple[str, ...]:
    """The transports NCCL chose between ranks ('P2P/IPC', 'SHM/direct/direct', 'NET/IB/0/GDRDMA')."""
    found = {m.group(1) for line in lines if (m := _CHANNEL.search(line))}
    return tuple(sorted(found))


def nccl_version(lines: Iterable[str]) -> str | None:
    for line in lines:
        if m := _VERSION.search(line):
            return m.group(1)
    return None


# -- the run ----------------------------------------------------------------------------------------


@dataclass
class StepState:
    begun: dict[int, float] = field(default_factory=dict)  # rank -> when its begin arrived
    ended: dict[int, float] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)  # rank -> its own measure of the step
    details: dict[int, dict] = field(default_factory=dict)
    last_heard: float | None = None


@dataclass(frozen=True)
class RunVerdict:
    verdict: str
    """ok | failed | crashed | hung | deadline"""
    step: str | None
    message: str
    ranks: tuple[int, ...] = ()
    """hung/deadline: ranks not through the step; failed/crashed: the ranks that said so."""

    @property
    def exit_code(self) -> int:
        return int(VERDICT_EXIT[self.verdict])


class PreflightRun:
    """Events and their arrival times in; the state of each step and the verdict out."""

    def __init__(self, world: int, steps: Iterable[str], plan: DevicePlan, started_at: float):
        self.world = world
        self.steps = (*LAUNCHER_STEPS, *[s for s in STEPS if s in set(steps)])
        self.plan = plan
        self.started_at = started_at
        self.state = {step: StepState() for step in self.steps}
        self.pids: dict[int, int] = {}
        self.done: set[int] = set()
        self.exits: dict[int, int] = {}
        self.errors: list[dict] = []
        self.failures: list[dict] = []
        self.sweep: list[dict] = []
        self.nccl_lines: list[str] = []
        self.other_lines: list[str] = []
        self.launcher: dict = {}
        self.setup: dict = {}
        """The launcher's setup detail: sglang, recipe, server_args, settings, error."""
        self.container_exit: int | None = None
        self.timed_out = False

    # -- input ------------------------------------------------------------------------------------

    def feed_line(self, line: str, at: float) -> dict | None:
        event = parse_event(line)
        if event is None:
            if is_transport_line(line):
                if len(self.nccl_lines) < 400:
                    self.nccl_lines.append(line.strip())
            else:
                self.other_lines = [*self.other_lines[-59:], line.rstrip()]
            return None
        self.feed(event, at)
        return event

    def feed(self, event: dict, at: float) -> None:
        kind = event.get("ev")
        rank = int(event.get("rank", -1))
        step = event.get("step")
        if kind == "launcher":
            self.launcher = event
            for r in range(self.world):
                self._end("launch", r, at, round(at - self.started_at, 4), {})
        elif kind == "start":
            self.pids[rank] = int(event.get("pid", 0))
            for name in LAUNCHER_STEPS:  # a rank is forked only after the launcher's steps
                if rank not in self.state[name].ended:
                    self._end(name, rank, at, round(at - self.started_at, 4), {})
        elif kind in ("begin", "end") and rank == LAUNCHER and step in self.state:
            for r in range(self.world):
                if kind == "begin":
                    self.state[step].begun[r] = at
                    self.state[step].last_heard = at
                else:
                    self._end(step, r, at, float(event.get("s", 0.0)), event.get("detail") or {})
            if kind == "end" and step == "setup":
                self.setup = event.get("detail") or {}
        elif kind in ("begin", "end", "progress") and step in self.state:
            state = self.state[step]
            state.last_heard = at
            if kind == "begin":
                state.begun[rank] = at
            elif kind == "end":
                state.ended[rank] = at
                state.seconds[rank] = float(event.get("s", 0.0))
                state.details[rank] = event.get("detail") or {}
            elif step == "sweep":
                self.sweep.append({k: v for k, v in event.items() if k not in ("ev", "rank", "step", "t")})
        elif kind == "done":
            self.done.add(rank)
        elif kind == "fail":
            self.failures.append(event)
        elif kind == "error":
            self.errors.append(event)
        elif kind == "exit":
            self.exits[rank] = int(event.get("code", 0))
        elif kind == "timeout":
            self.timed_out = True

    def _end(self, step: str, rank: int, at: float, seconds: float, detail: dict) -> None:
        state = self.state[step]
        state.begun.setdefault(rank, at)
        state.ended[rank] = at
        state.seconds[rank] = seconds
        state.details[rank] = detail
        state.last_heard = at

    def container_exited(self, code: int | None) -> None:
        self.container_exit = -1 if code is None else code

    # -- state ------------------------------------------------------------------------------------

    def complete(self, step: str) -> bool:
        return len(self.state[step].ended) >= self.world

    def active_step(self) -> str | None:
        for step in self.steps:
            if not self.complete(step):
                return step
        return None

    def _since(self, step: str) -> float:
        """When the step started: its first rank's begin, else the end of the step before it."""
        state = self.state[step]
        if state.begun:
            return min(state.begun.values())
        index = self.steps.index(step)
        if index == 0:
            return self.started_at
        before = self.state[self.steps[index - 1]]
        return max(before.ended.values()) if before.ended else self.started_at

    def quiet_for(self, now: float) -> float:
        step = self.active_step()
        if step is None:
            return 0.0
        heard = max(self._since(step), self.state[step].last_heard or 0.0)
        return max(0.0, now - heard)

    def elapsed_in_step(self, now: float) -> float:
        step = self.active_step()
        return 0.0 if step is None else max(0.0, now - self._since(step))

    def not_through(self, step: str) -> tuple[int, ...]:
        return tuple(r for r in range(self.world) if r not in self.state[step].ended)

    def verdict(self, now: float) -> RunVerdict | None:
        """The run's verdict at `now`, or None while it is still going."""
        if self.failures:
            first = self.failures[0]
            ranks = tuple(sorted({int(f.get("rank", -1)) for f in self.failures}))
            return RunVerdict("failed", first.get("step"), str(first.get("error", "")), ranks)
        if self.errors:
            first = self.errors[0]
            ranks = tuple(sorted({int(e.get("rank", -1)) for e in self.errors}))
            return RunVerdict("crashed", first.get("step"), str(first.get("error", "")), ranks)
        step = self.active_step()
        if step is None or len(self.done) >= self.world:
            return RunVerdict("ok", None, "every step passed on every rank")
        dead = {r: c for r, c in self.exits.items() if c != 0}
        if dead:
            rank, code = min(dead.items())
            return RunVerdict("crashed", step, f"rank {rank} exited with code {code}", tuple(sorted(dead)))
        if self.timed_out:
            return RunVerdict("deadline", step, "the in-container run limit ended it", self.not_through(step))
        if self.container_exit is not None:
            last = self.other_lines[-1] if self.other_lines else "no output"
            return RunVerdict(
                "crashed",
                step,
                f"the container exited (code {self.container_exit}) before every rank finished: {last}",
                self.not_through(step),
            )
        limit = self.plan.limit(step)
        late = self.elapsed_in_step(now) >= limit.deadline_s
        if not limit.progress:  # it says nothing until it ends: not through by its deadline is a hang
            if late:
                message = f"{step} not through after {limit.deadline_s:.0f} s"
                return RunVerdict("hung", step, message, self.not_through(step))
            return None
        quiet = self.quiet_for(now)
        if quiet >= limit.stall_s:
            return RunVerdict("hung", step, f"nothing from {step} for {quiet:.0f} s", self.not_through(step))
        if late:
            return RunVerdict(
                "deadline",
                step,
                f"{step} still going after {limit.deadline_s:.0f} s (its deadline)",
                self.not_through(step),
            )
        return None

    def never_began(self, step: str) -> tuple[int, ...]:
        return tuple(r for r in range(self.world) if r not in self.state[step].begun)


# -- what people read --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepRow:
    step: str
    status: str
    """ok | skipped (why: detail) | failed | crashed | hung | deadline | not run"""
    seconds: float | None
    """The slowest rank's own measure of the step (launch: container start to its last rank's first line)."""
    detail: str


@dataclass(frozen=True)
class PairRow:
    src: int
    dst: int
    bytes: int
    seconds: float
    gbps: float | None
    peer_access: bool | None


def _size(value: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale:
            return f"{value / scale:g} {unit}"
    return f"{value:g} B"


def size_text(value: float) -> str:
    return _size(value)


def _detail(step: str, details: dict[int, dict], run: PreflightRun) -> str:
    first = details.get(0) or next(iter(details.values()), {})
    if step == "launch":
        launcher = run.launcher
        return f"python {launcher.get('python', '?')}, torch {launcher.get('torch', '?')}" + (
            f" (import {launcher['import_s']:.1f} s)" if "import_s" in launcher else ""
        )
    if step == "setup":
        return setup_text(run.setup)
    if step == "init":
        recipe = RECIPES.get(str(first.get("recipe")), str(first.get("recipe")))
        built = {"sglang": f"SGLang's groups ({recipe})"}.get(
            str(first.get("groups")), "torch.distributed's groups (not SGLang's)"
        )
        parts = [built, str(first.get("backend", "?"))]
        if first.get("nccl"):
            parts.append(f"NCCL {first['nccl']}")
        if first.get("device"):
            parts.append(str(first["device"]))
        if first.get("groups") == "sglang" and first.get("backend") == "nccl":
            parts.append(f"custom all-reduce {first.get('custom_all_reduce') or 'off'}")
        return ", ".join(parts)
    if step == "allreduce":
        return f"{first.get('elements', '?')} {first.get('dtype', '')} values checked on every rank"
    if step == "graph":
        return graph_text(first)
    if step == "p2p":
        pairs = pair_rows(details)
        speeds = [p.gbps for p in pairs if p.gbps]
        slowest = f", slowest {min(speeds):.2f} GB/s" if speeds else ""
        return f"{len(pairs)} pairs written and checked ({first.get('method', '?')}){slowest}"
    if step == "sweep":
        rows = run.sweep
        if not rows:
            return ""
        peak = max(r["busbw_gbps"] for r in rows)
        return f"{_size(rows[0]['bytes'])} - {_size(rows[-1]['bytes'])}, peak busbw {peak:.2f} GB/s"
    return ""


def graph_text(detail: dict) -> str:
    """The graph step in one line: the path SGLang's dispatch took inside graph_capture(), each width
    with its time per replay (the slowest rank's), and the PyNccl size."""
    if detail.get("skipped"):
        return str(detail["skipped"])
    parts = [
        f"{s['name']} {s['tokens']} x {s['hidden']} ({_size(s['bytes'])}"
        f"{' per rank, all_gather' if s.get('op') == 'all_gather' else ''}) {s['replay_us']:.0f} us"
        for s in detail.get("sizes", ())
    ]
    pynccl = detail.get("pynccl")
    if pynccl:
        busbw = pynccl["busbw_gbps"]
        parts.append(f"PyNccl {_size(pynccl['bytes'])} {pynccl['time_us']:.0f} us, busbw {busbw:.2f} GB/s")
    gathers = any(s.get("op") == "all_gather" for s in detail.get("sizes", ()))
    what = "bf16 all-reduce" + (" and logits all_gather" if gathers else "")
    head = f"{what} captured in graph_capture() and replayed ({detail.get('path', '?')})"
    return head + (": " + "; ".join(parts) if parts else "")


RECIPES = {
    "bootstrap": "distributed/bootstrap.py::init_parallel_runtime",
    "model-runner": "ModelRunner.init_torch_distributed's calls",
}
NOTABLE = ("NCCL_", "CUDA_DEVICE_MAX_CONNECTIONS", "GLOO_")
"""The settings a step row names (the JSON has them all)."""


def setup_text(setup: dict) -> str:
    """One line: which SGLang set the ranks up and the NCCL settings it applied, or why none did."""
    if setup.get("error"):
        return f"{setup['error']}; the groups are plain torch.distributed"
    applied = [
        f"{key}={entry.get('value')}"
        for key, entry in (setup.get("settings") or {}).items()
        if entry.get("source") == "sglang" and key.startswith(NOTABLE)
    ]
    head = f"sglang {setup.get('sglang', '?')}: its arguments and environment"
    return head + (f" ({', '.join(applied)})" if applied else "")


def pair_rows(details: dict[int, dict]) -> tuple[PairRow, ...]:
    rows = [
        PairRow(
            int(p["src"]),
            int(p["dst"]),
            int(p.get("bytes", 0)),
            float(p.get("s", 0.0)),
            p.get("gbps"),
            p.get("peer_access"),
        )
        for detail in details.values()
        for p in detail.get("pairs", ())
    ]
    return tuple(sorted(rows, key=lambda p: (p.src, p.dst)))


def step_rows(run: PreflightRun, verdict: RunVerdict | None) -> tuple[StepRow, ...]:
    rows = []
    for step in run.steps:
        state = run.state[step]
        seconds = round(max(state.seconds.values()), 4) if state.seconds else None
        if run.complete(step) and state.details and all(d.get("skipped") for d in state.details.values()):
            status = "skipped"  # a step this device cannot run (the graph step on CPU): says why
        elif run.complete(step):
            status = "ok"
        elif verdict is not None and verdict.step == step:
            status = verdict.verdict
        else:
            status = "not run"
        detail = _detail(step, state.details, run) if status in ("ok", "skipped") else ""
        if status == "ok" and run.world == 1 and step in PEER_STEPS:
            # A world of one has no peer pairs: the collective ran, but nothing crossed between GPUs.
            detail = f"{detail}; {NO_PEER_TRAFFIC}" if detail else NO_PEER_TRAFFIC
        rows.append(StepRow(step, status, seconds, detail))
    return tuple(rows)


PEER_STEPS = ("allreduce", "graph", "p2p", "sweep")
NO_PEER_TRAFFIC = "one rank: no peer traffic tested"
