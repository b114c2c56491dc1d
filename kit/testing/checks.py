"""The smoke checks, as functions over a started server: the pytest suite asserts them, `kit smoke`
prints them. Each returns a CheckResult; none raises for a failed check. A server with an API key
(container.api_key_env) gets it on every request, read from the caller's environment by name."""

from __future__ import annotations

from dataclasses import dataclass

from kit.errors import CheckFailed
from kit.launch import api_key_from_env
from kit.logs import PhaseLimits
from kit.runtime import http
from kit.spec import LaunchSpec
from kit.startup.result import UpResult


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str
    seconds: float | None = None
    limit_s: float | None = None


def init_within_deadline(result: UpResult, spec: LaunchSpec) -> CheckResult:
    """Every rank left distributed init, each within the profile's init deadline."""
    limit = spec.timing.deadlines["init"]
    spans = {s.rank: s for s in result.timeline if s.phase == "init"}
    ranks = sorted(r for r in spans if r != "main")
    finished = [spans[r] for r in ranks if not spans[r].open]
    slowest = max((s.elapsed_s for s in finished), default=None)
    ok = len(finished) == spec.ranks and slowest is not None and slowest <= limit
    detail = f"{len(finished)}/{spec.ranks} ranks finished init ({', '.join(ranks) or 'none seen'})"
    return CheckResult("distributed init", ok, detail, slowest, limit)


def _first_token(name: str, call, limit: float) -> CheckResult:
    try:
        token = call()
    except CheckFailed as exc:
        return CheckResult(name, False, exc.one_line(), None, limit)
    ok = token.first_token_s <= limit
    return CheckResult(
        name, ok, f"{token.chunks} chunks, text {token.text[:40]!r}", token.first_token_s, limit
    )


def first_token_chat(base_url: str, spec: LaunchSpec) -> CheckResult:
    limit = spec.timing.deadlines["first_token"]
    return _first_token(
        "first token /v1/chat/completions",
        lambda: http.chat_first_token(
            base_url, spec.model_path, timeout_s=limit, api_key=api_key_from_env(spec)
        ),
        limit,
    )


def first_token_generate(base_url: str, spec: LaunchSpec) -> CheckResult:
    limit = spec.timing.deadlines["first_token"]
    return _first_token(
        "first token /generate",
        lambda: http.generate_first_token(base_url, timeout_s=limit, api_key=api_key_from_env(spec)),
        limit,
    )


def health_generate(base_url: str, spec: LaunchSpec) -> CheckResult:
    status = http.health(base_url, spec.health_path, api_key=api_key_from_env(spec))
    return CheckResult(f"health {spec.health_path}", status == 200, f"HTTP {status or 'no answer'}")


def greedy_repeatable(
    base_url: str, spec: LaunchSpec, prompt: str = "The capital of France is"
) -> CheckResult:
    limit = spec.timing.deadlines["first_token"]
    try:
        key = api_key_from_env(spec)
        first = http.generate_text(base_url, prompt, timeout_s=limit, api_key=key)
        second = http.generate_text(base_url, prompt, timeout_s=limit, api_key=key)
    except CheckFailed as exc:
        return CheckResult("greedy answers repeat", False, exc.one_line())
    return CheckResult("greedy answers repeat", first == second, f"{first[:30]!r} vs {second[:30]!r}")


def planted_hang_named(result: UpResult, limits: PhaseLimits, slack_s: float = 5.0) -> CheckResult:
    """A planted init hang ends HUNG in init, within the init stall window (+ slack) of the last line."""
    window = limits.stall_window_s.init
    ok = (
        result.verdict == "hung"
        and result.phase == "init"
        and result.quiet_for_s is not None
        and result.quiet_for_s <= window + slack_s
        and bool(result.missing_ranks)
    )
    detail = (
        f"verdict {result.verdict} in {result.phase}; waiting {', '.join(result.waiting_ranks) or '-'}; "
        f"missing {', '.join(result.missing_ranks) or '-'}"
    )
    return CheckResult("planted init hang named", ok, detail, result.quiet_for_s, window + slack_s)


def planted_crash_named(result: UpResult, phase: str = "load") -> CheckResult:
    ok = result.verdict == "crashed" and result.phase == phase and bool(result.exception)
    return CheckResult(
        "planted crash named", ok, f"verdict {result.verdict} in {result.phase}: {result.exception}"
    )
