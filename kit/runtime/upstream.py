"""The upstream tools' word on a hang, asked where the server runs: NCCL RAS, PyTorch's flight
recorder, SGLang's soft watchdog. The adapter; the readers are pure (kit/logs/ras.py,
kit/logs/flight_recorder.py, kit/logs/soft_watchdog.py).

`gather(source, soft_watchdog)`, once per verdict and before its causes are ranked (its `words()` go
into the evidence record: kit/logs/evidence.py `UpstreamWord`), runs kit/runtime/upstream_probe.py
with the server's own Python where the server's namespaces are: in its container (`docker exec`: the
container's network namespace, where NCCL's RAS listens on 127.0.0.1:28028, and its torch for
fr_trace), or for a host process with its interpreter. It asks RAS twice, RAS_GAP_S apart, only
where a process has NCCL mapped, and asks every NCCL rank for a flight-recorder dump through its
pipe; elsewhere (the CPU rehearsal: gloo; a replayed scenario; a server that exited) each is skipped
with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docker.errors import DockerException
from requests import RequestException

from kit.logs.evidence import UpstreamWord
from kit.logs.flight_recorder import FlightRecorderReport, parse_report
from kit.logs.flight_recorder import skipped as fr_skipped
from kit.logs.ras import RasFinding, compare, parse_status
from kit.logs.ras import skipped as ras_skipped
from kit.runtime.flight_recorder_env import DUMP_PREFIX, PIPE_PREFIX

RAS_PORT = 28028  # NCCL_RAS_CLIENT_PORT (NCCL src/ras/ras_internal.h at v2.28.7-1)
RAS_GAP_S = 10.0
FR_WAIT_S = 10.0
_PROBE = (Path(__file__).parent / "upstream_probe.py").read_text(encoding="utf-8")
_TIMEOUT_S = 180


@dataclass(frozen=True)
class UpstreamEvidence:
    """What NCCL RAS, the flight recorder and SGLang's soft watchdog said (or why they were not
    asked), as the evidence record's words and as lines, and their raw answers for the bundle
    (upstream/NAME)."""

    ras: RasFinding
    flight_recorder: FlightRecorderReport
    soft_watchdog: tuple[UpstreamWord, ...] = ()
    files: dict[str, str] = field(default_factory=dict)

    def words(self) -> tuple[UpstreamWord, ...]:
        return (*self.soft_watchdog, *self.ras.words(), *self.flight_recorder.words())

    def lines(self) -> tuple[str, ...]:
        return (*(w.line for w in self.soft_watchdog), *self.ras.lines(), *self.flight_recorder.lines())


def _skipped(reason: str, soft_watchdog: tuple[UpstreamWord, ...]) -> UpstreamEvidence:
    return UpstreamEvidence(ras_skipped(reason), fr_skipped(reason), soft_watchdog)


def read_answer(answer: dict[str, Any], soft_watchdog: tuple[UpstreamWord, ...] = ()) -> UpstreamEvidence:
    """The probe's JSON into findings (pure; untrusted input: anything odd is a skip, not a raise)."""
    files: dict[str, str] = {}
    ras_part = answer.get("ras") if isinstance(answer.get("ras"), dict) else {}
    listed = ras_part.get("snapshots")
    snapshots = [s for s in listed if isinstance(s, dict)] if isinstance(listed, list) else []
    for number, snapshot in enumerate(snapshots, start=1):
        files[f"ras-{number}.{'json' if snapshot.get('format') == 'json' else 'txt'}"] = str(
            snapshot.get("text")
        )
    if ras_part.get("skipped") or len(snapshots) < 2:
        ras = ras_skipped(str(ras_part.get("skipped") or "no answer"))
    else:
        try:
            first, second = (parse_status(str(s.get("text"))) for s in snapshots[:2])
            gap = float(snapshots[1].get("at") or RAS_GAP_S) - float(snapshots[0].get("at") or 0.0)
            ras = compare(first, second, gap)
        except ValueError as exc:
            ras = ras_skipped(f"its answer could not be read: {exc}")
    fr_part = answer.get("flight_recorder") if isinstance(answer.get("flight_recorder"), dict) else {}
    if fr_part.get("skipped") or "report" not in fr_part:
        recorder = fr_skipped(str(fr_part.get("skipped") or "no answer"))
    else:
        report = str(fr_part["report"])
        files["fr_trace.txt"] = report
        recorder = parse_report(report)
        if fr_part.get("rc") not in (0, None) and recorder.failed is None:
            last = report.strip().splitlines()[-1:] or ["(no output)"]
            recorder = FlightRecorderReport(failed=f"exit {fr_part.get('rc')}: {last[0][:200]}")
    return UpstreamEvidence(ras, recorder, soft_watchdog, files)


def _args() -> str:
    return json.dumps(
        {
            "ras_port": RAS_PORT,
            "ras_gap_s": RAS_GAP_S,
            "dump_prefix": DUMP_PREFIX,
            "pipe_prefix": PIPE_PREFIX,
            "fr_wait_s": FR_WAIT_S,
        }
    )


def _in_container(container: Any) -> Callable[[], str]:
    def run() -> str:
        result = container.exec_run(["python", "-c", _PROBE, _args()], demux=True)
        out, err = result.output if isinstance(result.output, tuple) else (result.output, b"")
        if result.exit_code != 0:
            tail = (err or out or b"").decode("utf-8", "replace").strip().splitlines()
            raise OSError(f"the probe exited {result.exit_code}: {tail[-1] if tail else ''}")
        return (out or b"").decode("utf-8", "replace")

    return run


def _on_host(pid: int) -> Callable[[], str]:
    def run() -> str:
        python = os.readlink(f"/proc/{pid}/exe")
        done = subprocess.run(
            [python, "-c", _PROBE, _args()], capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
        )
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()
            raise OSError(f"the probe exited {done.returncode}: {tail[-1] if tail else ''}")
        return done.stdout

    return run


def _runner(source: Any) -> tuple[Callable[[], str] | None, str | None]:
    """How to run the probe where SOURCE's server is, or why it cannot be."""
    from kit.runtime.docker_source import DockerSource
    from kit.runtime.host_source import HostSource

    if isinstance(source, DockerSource):
        state = source.container.attrs.get("State") or {}
        if not state.get("Running") or state.get("Paused"):
            return None, "the server's container is not running"
        return _in_container(source.container), None
    if isinstance(source, HostSource):
        pid = source.where.main_pid()
        if pid is None:
            return None, "the server's processes are gone"
        return _on_host(pid), None
    return None, f"{getattr(source, 'name', 'this source')} is no live server"


def gather(source: Any, soft_watchdog: tuple[UpstreamWord, ...] = ()) -> UpstreamEvidence:
    """Ask RAS and the flight recorder where SOURCE's server runs, beside SGLang's soft watchdog's
    words read from its log; never raises for their sake."""
    run, why = _runner(source)
    if run is None:
        return _skipped(why or "no way to reach the server", soft_watchdog)
    try:
        answer = json.loads(run())
    except (OSError, ValueError, subprocess.TimeoutExpired, DockerException, RequestException) as exc:
        return _skipped(f"the probe in the server failed: {exc}", soft_watchdog)
    if not isinstance(answer, dict):
        return _skipped("the probe answered no JSON object", soft_watchdog)
    return read_answer(answer, soft_watchdog)
