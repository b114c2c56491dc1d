"""The serving window: after the other checks, requests back to back for smoke.serving_window_s; the
server must still be serving at the end. A crash after READY (every TP rank killed by a structured
output request under MTP, sglang#28407; a TypeError in the mamba cache on 0.5.13-0.5.15, #28484) ends
the window early and is named from the server's own log: its last exception, with the rank."""

from __future__ import annotations

import threading
import time

from kit.errors import CheckFailed
from kit.spec import LaunchSpec
from kit.testing import answers
from kit.testing.checks import CheckResult


def name_crash(log_text: str, exit_code: int | None = None) -> str:
    """The crash as one line: the last exception SGLang logged (and which rank), else the exit code.
    Pure: the container's log (and its exit code) in."""
    from kit.logs import parse_text

    errors = [e for e in parse_text(log_text) if e.is_error]
    exit_part = f"exit code {exit_code}" if exit_code is not None else "the server stopped"
    if not errors:
        tail = [line.strip() for line in log_text.splitlines() if line.strip()][-1:]
        return f"{exit_part}; no exception in the log" + (f" (last line: {tail[0][:120]})" if tail else "")
    # The exception a rank raised is the cause; the launcher's sigquit line after it is the effect.
    raised = [e for e in errors if e.fields.get("exception")]
    last = (raised or errors)[-1]
    what = last.fields.get("exception") or last.text.strip()
    return f"{what} ({last.rank_label}, log line {last.line_no}); {exit_part}"


def _status(container) -> tuple[str, int | None]:
    """(docker state, exit code) of a docker SDK container, refreshed."""
    try:
        container.reload()
    except Exception:  # removed under us: that is a stopped server too
        return "removed", None
    state = container.attrs.get("State") or {}
    return str(state.get("Status", "unknown")), state.get("ExitCode")


def _logs(container) -> str:
    try:
        return container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
    except Exception:
        return ""


def serving_window(base_url: str, spec: LaunchSpec, container, seconds: float | None = None) -> CheckResult:
    """Back-to-back short greedy requests for the window while the serving watcher (kit up --serve's
    own, kit/startup/serving.py) follows the container: it must end the window SERVING (or
    DEGRADED with no failed request), never HUNG or CRASHED."""
    from kit.logs.serving import Serving, ServingLimits
    from kit.startup.serving import watch_container
    from kit.testing.speculative import smoke_of

    window = seconds if seconds is not None else smoke_of(spec).serving_window_s
    name = f"serving for {window:g} s"
    started = time.monotonic()
    stop = threading.Event()
    load = _Load(base_url, spec, stop)
    sender = threading.Thread(target=load.run, name="kit-serving-window", daemon=True)
    sender.start()
    limits = ServingLimits(probe_every_s=max(1.0, min(5.0, window / 3)))
    try:
        call, state, _ = watch_container(container, spec, limits, for_s=window)
    finally:
        stop.set()
        sender.join(timeout=spec.timing.deadlines["first_token"] + 90)
    elapsed = time.monotonic() - started
    served, failures = load.served, load.failures
    if call.verdict is Serving.CRASHED:
        _, code = _status(container)
        detail = f"crashed after {served} requests: {name_crash(_logs(container), code)} ({call.why})"
        return CheckResult(name, False, detail, elapsed)
    if call.verdict is Serving.HUNG:
        return CheckResult(name, False, f"hung after {served} requests: {call.why}", elapsed)
    probes = state.summary(time.monotonic())
    ok = served > 0 and not failures
    detail = (
        f"{served} requests, {len(failures)} failed, {call.verdict.value}: {call.why}; "
        f"{probes['probes']} probes, {probes['probes_failed']} failed"
    )
    if failures:
        detail += f"; first failure: {failures[0][:100]}"
    return CheckResult(name, ok, detail, elapsed)


class _Load:
    """Short greedy requests back to back until `stop`."""

    def __init__(self, base_url: str, spec: LaunchSpec, stop: threading.Event):
        self.base_url, self.spec, self.stop = base_url, spec, stop
        self.served = 0
        self.failures: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                answers.greedy(
                    self.base_url,
                    self.spec,
                    8,
                    prompt=f"Request {self.served}:",
                    timeout_s=self.spec.timing.deadlines["first_token"] + 60,
                )
                self.served += 1
            except CheckFailed as exc:
                self.failures.append(exc.one_line())
                self.stop.wait(1.0)
