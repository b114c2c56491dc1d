"""The serving window: after the other checks, requests back to back for smoke.serving_window_s; the
server must still be serving at the end. A crash after READY (every TP rank killed by a structured
output request under MTP, sglang#28407; a TypeError in the mamba cache on 0.5.13-0.5.15, #28484) ends
the window early and is named from the server's own log: its last exception, with the rank."""

from __future__ import annotations

import time

import httpx

from kit.errors import CheckFailed
from kit.runtime.http import server_get
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
    """Back-to-back short greedy requests for the window; alive (running, /health 200) at its end."""
    from kit.testing.speculative import smoke_of

    window = seconds if seconds is not None else smoke_of(spec).serving_window_s
    name = f"serving for {window:g} s"
    started = time.monotonic()
    served, failures = 0, []
    while time.monotonic() - started < window:
        state, code = _status(container)
        if state != "running":
            detail = f"crashed after {served} requests: {name_crash(_logs(container), code)}"
            return CheckResult(name, False, detail, time.monotonic() - started)
        try:
            answers.greedy(
                base_url,
                spec,
                8,
                prompt=f"Request {served}:",
                timeout_s=spec.timing.deadlines["first_token"] + 60,
            )
            served += 1
        except CheckFailed as exc:
            failures.append(exc.one_line())
            time.sleep(1.0)
    state, code = _status(container)
    elapsed = time.monotonic() - started
    if state != "running":
        return CheckResult(name, False, f"crashed: {name_crash(_logs(container), code)}", elapsed)
    try:
        health = server_get(f"{base_url}/health", headers=answers._headers(spec)).status_code
    except httpx.HTTPError as exc:
        health = f"{type(exc).__name__}"  # type: ignore[assignment]
    ok = health == 200 and served > 0 and not failures
    detail = f"{served} requests, {len(failures)} failed, /health {health}"
    if failures:
        detail += f"; first failure: {failures[0][:100]}"
    return CheckResult(name, ok, detail, elapsed)
