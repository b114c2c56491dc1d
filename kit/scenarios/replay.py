"""Scenarios: start-ups we know from reports (GPU hangs, cold loads, restart loops), replayed on their
own clock through the real watcher, tracker, verdict and first-token code.

A scenario file (kit/scenarios/*.toml, docs/scenarios.md) says when the server wrote what (SGLang's
own wording for the release it names; `\\r` progress included), how busy its processes were (CPU
cores, disk and network rates, GPU memory and utilisation per scheduler, compile-cache writes and
compiler processes), when it stopped or restarted, how its first streamed chat answer looks, and
the verdict the kit must reach. Every entry names its `source`: the public log, issue or release
file its log block and activity shape come from.
`ReplaySource` turns that into a watcher `Source`: bytes through the same line splitter as a
container's output, counters integrated up to the sample time, GPU readings through the kit's real
NVML code over a fake NVML library, and an httpx MockTransport for the first token.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kit.errors import InputError
from kit.logs import ActivitySample
from kit.runtime.nvml import NvmlGpus, open_nvml
from kit.runtime.source import LineSplitter, ProcessStack, SourceState, read_gpu_usage
from kit.scenarios.fake_nvml import FakeNvml

GiB = 1 << 30
MB = 1_000_000
_MAIN_PID, _FIRST_RANK_PID = 100, 1000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Progress(_Strict):
    """A tqdm bar drawn with `\\r` from the entry's time: one redraw every `every_s` seconds."""

    label: str
    total: int = Field(gt=0)
    every_s: float = Field(gt=0)
    stop_after: int | None = None  # redraws before the bar freezes (None: it completes with a '\n')
    prefix: str = ""  # e.g. "[{time} TP0] " when the bar goes through SGLang's logger

    @model_validator(mode="after")
    def _stop_inside(self) -> Progress:
        if self.stop_after is not None and not 0 <= self.stop_after <= self.total:
            raise ValueError(f"stop_after must be between 0 and total ({self.total})")
        return self


class At(_Strict):
    """What happens at `t` seconds. Rates and levels hold until a later entry changes them."""

    t: float = Field(ge=0)
    log: str | None = None  # written at t; '{time}' becomes the wall time of t in SGLang's format
    progress: Progress | None = None
    cpu_cores: float | None = Field(default=None, ge=0)  # container-wide, busy cores
    read_mb_s: float | None = Field(default=None, ge=0)
    net_mb_s: float | None = Field(default=None, ge=0)
    gpu_mem_gib: float | None = Field(default=None, ge=0)  # per scheduler process, from t on
    gpu_mem_gib_s: float | None = Field(default=None, ge=0)  # growth per scheduler process
    gpu_util: int | None = Field(default=None, ge=0, le=100)
    rank_cores: tuple[float, ...] | None = None  # busy cores per scheduler (TP0, TP1, ...), from t on
    compile_mb_s: float | None = Field(default=None, ge=0)  # bytes written into the compile caches
    compilers: int | None = Field(default=None, ge=0)  # compiler processes alive (nvcc, ptxas, ...)
    xid: int | None = Field(default=None, gt=0)  # the driver reports this Xid (an NVML event) at t
    xid_gpu: int = Field(default=0, ge=0)  # on this GPU
    exit_code: int | None = None  # the server stops
    start: bool = False  # the server runs again (after exit_code; a supervisor restarted it)
    source: str = Field(min_length=8)  # where this log block and activity shape come from


class Gpus(_Strict):
    count: int = Field(ge=0, le=16)
    name: str = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    capability: str = "12.0"
    memory_gib: float = 96
    topology: Literal["PIX", "PXB", "PHB", "NODE", "SYS"] = "PHB"
    nvlinks: int = 0
    driver: str = "580.95.05"
    cuda_driver: str = "13.0"


class Expect(_Strict):
    """The verdict the kit must reach, on the scenario's clock."""

    verdict: Literal["ready", "crashed", "hung", "deadline"]
    phase: str | None = None
    quiet_from: float | None = None  # HUNG: when the last progress happened (scenario seconds)
    within_s: float = 5.0  # HUNG: the verdict comes at most this long after quiet_from + the stall window
    stuck: tuple[str, ...] | None = None
    causes_first: tuple[str, ...] = ()  # cause ids that must lead the likely causes (in any order)
    causes_absent: tuple[str, ...] = ()  # cause ids that must not be offered at all
    activity: Literal["quiet", "spinning"] | None = None  # the shape the verdict's activity must have
    survived: int | None = None  # how many errors the server must be seen to go on after
    first_token_in: str | None = None
    phases_s: dict[str, tuple[float, float]] = {}  # phase -> (min, max) seconds the timeline must show
    attempt: int | None = None
    earlier: tuple[str, ...] = ()  # verdicts of the earlier attempts, in order


_TOPOLOGY_LEVEL = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}


class Scenario(_Strict):
    name: str
    title: str
    about: str
    sources: tuple[str, ...] = Field(min_length=1)
    target: str
    image: str | None = None
    log_start: datetime = datetime(2026, 11, 20, 9, 14, 2)
    duration_s: float = Field(gt=0)
    restart_policy: Literal["no", "on-failure", "always"] = "no"
    ranks: int = Field(ge=1)
    gpus: Gpus = Gpus(count=0)
    expect: Expect
    first_token: tuple[dict, ...] = ()  # the streamed chat chunks' JSON payloads, in order
    stacks: dict[str, str] = {}  # process title -> py-spy text
    at: tuple[At, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _ordered(self) -> Scenario:
        times = [a.t for a in self.at]
        if times != sorted(times):
            raise ValueError("`at` entries must be in time order")
        if times[-1] > self.duration_s:
            raise ValueError("an `at` entry lies after duration_s")
        if self.gpus.count and self.gpus.count < self.ranks:
            raise ValueError("fewer GPUs than ranks")
        for entry in self.at:
            if entry.rank_cores is not None and len(entry.rank_cores) != self.ranks:
                raise ValueError(f"`at` t={entry.t:g}: rank_cores needs one figure per rank ({self.ranks})")
        return self

    def wall(self, t: float) -> str:
        """SGLang's log timestamp for scenario time t."""
        return (self.log_start + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S")

    def fake_nvml(self) -> FakeNvml | None:
        g = self.gpus
        if not g.count:
            return None
        major, minor = (int(p) for p in g.capability.split("."))
        cuda = g.cuda_driver.split(".")
        nvml = FakeNvml.of(
            g.count,
            name=g.name,
            capability=(major, minor),
            memory_gib=g.memory_gib,
            driver=g.driver,
            cuda_driver=int(cuda[0]) * 1000 + int(cuda[1]) * 10,
            topology={
                (i, j): _TOPOLOGY_LEVEL[g.topology] for i in range(g.count) for j in range(g.count) if i != j
            },
        )
        for device in nvml.devices:
            device.nvlinks = g.nvlinks
        return nvml


# -- loading ------------------------------------------------------------------------------------------


def _scenario_dir() -> Path:
    return Path(str(resources.files("kit.scenarios")))


def list_scenarios() -> list[str]:
    return sorted(p.stem for p in _scenario_dir().glob("*.toml"))


@cache
def load_scenario(name_or_path: str) -> Scenario:
    """A scenario by name (kit/scenarios/NAME.toml) or path; bad input is an InputError naming the key."""
    path = Path(name_or_path)
    if not path.suffix:
        path = _scenario_dir() / f"{name_or_path}.toml"
        if name_or_path not in list_scenarios():  # only a listed name is opened (no '../x', no 5000 x)
            raise InputError(
                "SCENARIO", f"unknown scenario '{name_or_path}'", f"known: {', '.join(list_scenarios())}"
            )
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        problem = (
            f"cannot read it ({exc.strerror})" if isinstance(exc, OSError) and exc.strerror else str(exc)
        )
        raise InputError("SCENARIO", f"{str(path)[:200]}: {problem}", "fix the file (TOML)") from exc
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "(file)"
        raise InputError(f"{path.name}: {where}", error["msg"], "see docs/scenarios.md") from exc


# -- the timeline -------------------------------------------------------------------------------------


def _tqdm(label: str, done: int, total: int, elapsed: float, every: float) -> str:
    """One redraw in tqdm's default format, as SGLang's loaders print it."""

    def clock(seconds: float) -> str:
        return f"{int(seconds) // 60:02d}:{int(seconds) % 60:02d}"

    pct = 100 * done // total
    eta = (total - done) * every
    return f"{label}: {pct:3d}% Completed | {done}/{total} [{clock(elapsed)}<{clock(eta)}, {every:.2f}s/it]"


@dataclass(frozen=True)
class _Output:
    t: float
    data: bytes


def _outputs(scenario: Scenario) -> list[_Output]:
    out: list[_Output] = []
    for entry in scenario.at:
        if entry.log:
            text = entry.log.replace("{time}", scenario.wall(entry.t))
            out.append(_Output(entry.t, text.lstrip("\n").encode()))
        bar = entry.progress
        if bar is not None:
            redraws = bar.total if bar.stop_after is None else bar.stop_after
            for k in range(redraws + 1):
                t = entry.t + k * bar.every_s
                prefix = bar.prefix.replace("{time}", scenario.wall(t))
                draw = "\r" + prefix + _tqdm(bar.label, k, bar.total, k * bar.every_s, bar.every_s)
                if bar.stop_after is None and k == bar.total:
                    draw += "\n"
                out.append(_Output(t, draw.encode()))
    out.sort(key=lambda o: o.t)  # stable: within one time, file order
    return out


def _level(scenario: Scenario, field: str, t: float) -> tuple[float, float]:
    """(value at the last entry setting it, that entry's time) for a level that holds until changed."""
    value, since = 0.0, 0.0
    for entry in scenario.at:
        if entry.t > t:
            break
        set_to = getattr(entry, field)
        if set_to is not None:
            value, since = float(set_to), entry.t
    return value, since


def _integral(scenario: Scenario, field: str, t: float) -> float:
    """∫ rate dt from 0 to t for a piecewise-constant rate."""
    total, rate, since = 0.0, 0.0, 0.0
    for entry in scenario.at:
        if entry.t > t:
            break
        value = getattr(entry, field)
        if value is not None:
            total += rate * (entry.t - since)
            rate, since = float(value), entry.t
    return total + rate * (t - since)


def _gpu_mem_bytes(scenario: Scenario, t: float) -> int:
    """Each scheduler's GPU memory at t: the last level set, plus growth since (never past the card)."""
    level, level_at = _level(scenario, "gpu_mem_gib", t)
    grown = _integral(scenario, "gpu_mem_gib_s", t) - _integral(scenario, "gpu_mem_gib_s", level_at)
    return int(min(level + grown, scenario.gpus.memory_gib) * GiB)


# -- the source ---------------------------------------------------------------------------------------


class ReplaySource:
    """A scenario as a watcher Source; `clock` starts at 0 and `sleep` advances it."""

    base_url = "http://replay.invalid"

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.name = f"replay:{scenario.name}"
        self.started_at = 0.0
        self.now = 0.0
        self._outputs = _outputs(scenario)
        self._next = 0
        self._splitter = LineSplitter()
        self._written: list[str] = []
        self._nvml = scenario.fake_nvml()
        self._gpus = open_nvml(self._nvml) if self._nvml is not None else None
        self._xids_sent: set[int] = set()
        self.pids = {
            _MAIN_PID: "python3 -m sglang.launch_server",
            **{_FIRST_RANK_PID + r: f"sglang::scheduler_TP{r}" for r in range(scenario.ranks)},
        }

    @property
    def gpus(self) -> NvmlGpus | None:
        return self._gpus

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def finished(self) -> bool:
        return self.now >= self.scenario.duration_s

    def read(self) -> list[tuple[float, str]]:
        lines: list[tuple[float, str]] = []
        while self._next < len(self._outputs) and self._outputs[self._next].t <= self.now:
            out = self._outputs[self._next]
            self._next += 1
            self._written.append(out.data.decode())
            lines.extend((out.t, line) for line in self._splitter.feed(out.data))
        return lines

    def drain(self, timeout_s: float) -> list[tuple[float, str]]:
        return [(self.now, line) for line in self._splitter.flush()]

    def log_text(self) -> str:
        return "".join(self._written)

    def _running(self, t: float) -> tuple[bool, int | None, int]:
        running, code, restarts = True, None, 0
        for entry in self.scenario.at:
            if entry.t > t:
                break
            if entry.exit_code is not None:
                running, code = False, entry.exit_code
            if entry.start and not running:
                running, code, restarts = True, None, restarts + 1
        return running, code, restarts

    def state(self) -> SourceState:
        running, code, restarts = self._running(self.now)
        return SourceState(
            running=running, exit_code=code, restarts=restarts, restart_policy=self.scenario.restart_policy
        )

    def _rank_cpu(self, t: float) -> tuple[tuple[str, float], ...]:
        """CPU seconds per rank where the scenario says how busy each scheduler was."""
        if not any(entry.rank_cores is not None for entry in self.scenario.at):
            return ()
        totals = [0.0] * self.scenario.ranks
        cores, since = [0.0] * self.scenario.ranks, 0.0
        for entry in self.scenario.at:
            if entry.t > t:
                break
            if entry.rank_cores is not None:
                totals = [total + c * (entry.t - since) for total, c in zip(totals, cores, strict=True)]
                cores, since = list(entry.rank_cores), entry.t
        totals = [total + c * (t - since) for total, c in zip(totals, cores, strict=True)]
        return tuple((f"TP{rank}", round(total, 3)) for rank, total in enumerate(totals))

    def sample(self, t: float) -> ActivitySample | None:
        scenario = self.scenario
        gpu_mem, gpu_util, gpu_error = None, (), None
        if self._nvml is not None and self._gpus is not None:
            per_rank = _gpu_mem_bytes(scenario, t)
            util = int(_level(scenario, "gpu_util", t)[0])
            for rank in range(scenario.ranks):
                self._nvml.set_process(rank, _FIRST_RANK_PID + rank, per_rank)
                self._nvml.set_utilization(rank, util)
            for position, entry in enumerate(scenario.at):
                if entry.xid is not None and entry.t <= t and position not in self._xids_sent:
                    self._xids_sent.add(position)
                    self._nvml.xid(entry.xid_gpu, entry.xid)
            gpu_mem, gpu_util, gpu_error = read_gpu_usage(self._gpus, self.pids)
        return ActivitySample(
            t=t,
            cpu_seconds=_integral(scenario, "cpu_cores", t),
            read_bytes=int(_integral(scenario, "read_mb_s", t) * MB),
            net_rx_bytes=int(_integral(scenario, "net_mb_s", t) * MB),
            gpu_mem_bytes=gpu_mem,
            gpu_util=gpu_util,
            compile_bytes=int(_integral(scenario, "compile_mb_s", t) * MB),
            compilers=int(_level(scenario, "compilers", t)[0]),
            rank_cpu_seconds=self._rank_cpu(t),
            gpu_error=gpu_error,
        )

    def stacks(self, want=lambda title: True, *, nonblocking: bool = False) -> list[ProcessStack]:
        return [
            ProcessStack(pid, title, self.scenario.stacks[title])
            for pid, title in sorted(self.pids.items())
            if want(title) and title in self.scenario.stacks
        ]

    def environment(self) -> dict[str, str] | None:
        return None  # a scenario replays GPU conditions, not a server's environment

    def http_transport(self) -> httpx.BaseTransport:
        chunks = self.scenario.first_token

        def handle(request: httpx.Request) -> httpx.Response:
            if request.url.path != "/v1/chat/completions" or not chunks:
                return httpx.Response(404, text="not in this scenario")
            body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=body)

        return httpx.MockTransport(handle)
