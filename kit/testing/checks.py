"""The smoke checks, as functions over a started server: the pytest suite asserts them, `kit smoke`
prints them. Each returns a CheckResult; none raises for a failed check. A server with an API key
(container.api_key_env) gets it on every request, read from the caller's environment by name."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from kit.errors import CheckFailed
from kit.launch import api_key_from_env
from kit.logs import PhaseLimits
from kit.runtime import http
from kit.spec import LaunchSpec
from kit.startup.result import UpResult
from kit.testing.answers import PENALTIES, generate, judge_structured, structured_request


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
    """The same greedy request twice gives the same answer.

    On GPUs only the first token is compared: BF16 kernels are not batch-invariant, so two greedy
    continuations can part after a near-tie without anything being wrong (SGLang's deterministic
    inference mode exists for that, at a cost). The CPU rehearsal compares 16 tokens.
    """
    limit = spec.timing.deadlines["first_token"]
    tokens = 16 if spec.device == "cpu" else 1
    try:
        key = api_key_from_env(spec)
        first = http.generate_text(base_url, prompt, max_new_tokens=tokens, timeout_s=limit, api_key=key)
        second = http.generate_text(base_url, prompt, max_new_tokens=tokens, timeout_s=limit, api_key=key)
    except CheckFailed as exc:
        return CheckResult("greedy answers repeat", False, exc.one_line())
    return CheckResult(
        "greedy answers repeat", first == second, f"{tokens} tokens: {first[:30]!r} vs {second[:30]!r}"
    )


# One tool the model is asked to call. The answer is judged by what SGLang's tool-call parser made
# of it: an OpenAI `tool_calls` entry, not the model's raw <tool_call> text left in the content.
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            # An enum: the rehearsal's random model, held to the tool's grammar, must still finish.
            "properties": {"city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]}},
            "required": ["city"],
        },
    },
}


def tool_call_request(model: str, max_tokens: int = 128) -> dict[str, Any]:
    """128 tokens: a real model's call is about 30 (qwen3_coder's <tool_call><function=...> form); the
    rehearsal's random model fills the budget, and what it wrote by then parses (0.5.23 CPU)."""
    return {
        "model": model,
        "messages": [
            {"role": "user", "content": "What is the weather in Paris right now? Use the get_weather tool."}
        ],
        "tools": [WEATHER_TOOL],
        "tool_choice": "required",
        "max_tokens": max_tokens,
        "temperature": 0,
        # Thinking would spend the token budget before the call; the parser is what is checked.
        "chat_template_kwargs": {"enable_thinking": False},
        # The grammar allows whitespace around a value: a model that prefers it (the rehearsal's random
        # one) would spend the budget there. A real model's call is the same few forced tokens.
        **PENALTIES,
    }


def judge_tool_call(payload: dict[str, Any]) -> tuple[bool, str]:
    """Did the server hand back a parsed tool call? Pure: the response body in, a verdict out."""
    try:
        message = payload["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return False, f"no choices[0].message in the answer: {str(payload)[:120]}"
    calls = message.get("tool_calls") or []
    content = message.get("content") or ""
    if not calls:
        raw = "<tool_call>" in content or "<function" in content
        why = "the model's tool-call text came back unparsed in content" if raw else "no tool_calls"
        return False, f"{why}: {content[:80]!r}"
    function = calls[0].get("function") or {}
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except ValueError:
        return False, f"tool_calls[0] arguments are not JSON: {function.get('arguments')!r:.80}"
    if function.get("name") != "get_weather" or not isinstance(arguments, dict) or "city" not in arguments:
        return False, f"unexpected call {function.get('name')}({arguments})"
    return True, f"get_weather({json.dumps(arguments)})"


def tool_call_parsed(base_url: str, spec: LaunchSpec) -> CheckResult:
    """One tool call through /v1/chat/completions comes back as OpenAI tool_calls (the launch's
    --tool-call-parser at work; tool_choice=required holds the model to the tool's grammar, so the
    rehearsal's random model calls it too, on a start without its reasoning parser)."""
    name = "tool call parsed"
    if "--tool-call-parser" not in spec.argv:
        return CheckResult(
            name, False, "the launch sets no --tool-call-parser (the profile's tool_call_parser)"
        )
    limit = spec.timing.deadlines["first_token"] + 120.0
    try:
        # The runtime's HTTP helpers stream; this one call wants the whole JSON answer.
        answer = http.server_post(
            f"{base_url}/v1/chat/completions",
            json_body=tool_call_request(spec.model_path),
            headers=_auth(spec),
            timeout_s=limit,
        )
        answer.raise_for_status()
        payload = answer.json()
    except (httpx.HTTPError, ValueError) as exc:
        return CheckResult(name, False, f"/v1/chat/completions: {type(exc).__name__}: {exc}", None, limit)
    ok, detail = judge_tool_call(payload)
    return CheckResult(name, ok, detail, answer.elapsed.total_seconds(), limit)


def _auth(spec: LaunchSpec) -> dict[str, str]:
    key = api_key_from_env(spec)
    return {"Authorization": f"Bearer {key}"} if key else {}


def structured_output(base_url: str, spec: LaunchSpec) -> CheckResult:
    """One JSON-schema request (native /generate, greedy): the answer parses and holds to the schema.
    Under MTP on hybrid GDN models such a request killed every TP rank (sglang#28407): the serving
    window after it sees that."""
    name = "structured output (JSON schema)"
    limit = spec.timing.deadlines["first_token"] + 120.0
    try:
        answer = generate(base_url, spec, structured_request(), limit)
    except CheckFailed as exc:
        return CheckResult(name, False, exc.one_line(), None, limit)
    ok, detail = judge_structured(answer.text, answer.meta.get("finish_reason"))
    return CheckResult(name, ok, detail, answer.seconds, limit)


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
