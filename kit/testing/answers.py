"""What a started server answers: greedy token ids, one structured-output request. The checks over
them (kit.testing.checks, speculative, serving) are pass/fail; these are the requests and the pure
judges of their answers.

Both requests go to SGLang's native /generate, which applies no chat template and no reasoning parser:
with a reasoning parser SGLang starts a JSON grammar only after the reasoning ends, which the CPU
rehearsal's random model never reaches, and the token ids come back as `output_ids` (0.5.23:
managers/tokenizer_manager.py builds {"text", "output_ids", "meta_info"}).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from kit.errors import CheckFailed
from kit.launch import api_key_from_env
from kit.runtime.http import server_post
from kit.spec import LaunchSpec

PROMPT = "The capital of France is"

# One small schema whose every answer is short: two enum choices. A frequency/presence penalty keeps a
# model that prefers whitespace (the rehearsal's random one: JSON allows any amount between tokens)
# from spending the budget before the object closes; a real model's answer is the same few tokens.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}, "sure": {"type": "boolean"}},
    "required": ["answer", "sure"],
    "additionalProperties": False,
}
PENALTIES = {"frequency_penalty": 2.0, "presence_penalty": 2.0}  # SGLang allows [-2, 2]


@dataclass(frozen=True)
class Greedy:
    ids: tuple[int, ...]
    text: str
    meta: dict[str, Any]
    seconds: float


def _headers(spec: LaunchSpec) -> dict[str, str]:
    key = api_key_from_env(spec)
    return {"Authorization": f"Bearer {key}"} if key else {}


def generate(base_url: str, spec: LaunchSpec, body: dict[str, Any], timeout_s: float) -> Greedy:
    """POST /generate (not streamed); CheckFailed naming the endpoint on any failure."""
    try:
        answer = server_post(
            f"{base_url}/generate", json_body=body, headers=_headers(spec), timeout_s=timeout_s
        )
        answer.raise_for_status()
        payload = answer.json()
        ids = tuple(int(i) for i in payload.get("output_ids") or ())
        return Greedy(
            ids, str(payload.get("text", "")), payload.get("meta_info") or {}, answer.elapsed.total_seconds()
        )
    except (httpx.HTTPError, ValueError, TypeError) as exc:
        raise CheckFailed(f"/generate: {type(exc).__name__}: {str(exc)[:200]}") from exc


def greedy(
    base_url: str,
    spec: LaunchSpec,
    tokens: int,
    *,
    prompt: str = PROMPT,
    timeout_s: float,
    top_logprobs: int = 0,
) -> Greedy:
    """`tokens` greedy tokens of `prompt` (temperature 0, no stop at EOS: always that many).

    `top_logprobs`: also ask for the top-N logprobs at each output position (GenerateReqInput's
    return_logprob / top_logprobs_num); they come back in meta_info["output_top_logprobs"]."""
    params = {"max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}
    body: dict[str, Any] = {"text": prompt, "sampling_params": params}
    if top_logprobs:
        body.update(return_logprob=True, top_logprobs_num=top_logprobs)
    return generate(base_url, spec, body, timeout_s)


def top2_gaps(meta: dict[str, Any]) -> tuple[float | None, ...]:
    """Per output position, top-1 minus top-2 logprob (nats) from meta_info["output_top_logprobs"].

    0.5.23's tokenizer_manager.py (detokenize_top_logprobs_tokens) gives each position a list of
    (logprob, token_id, text) or None; a position with fewer than two readable entries is None."""
    rows = meta.get("output_top_logprobs")
    gaps: list[float | None] = []
    for row in rows if isinstance(rows, list) else ():
        values = []
        for entry in row if isinstance(row, list) else ():
            if isinstance(entry, list | tuple) and entry and isinstance(entry[0], int | float):
                values.append(float(entry[0]))
        values.sort(reverse=True)
        gaps.append(values[0] - values[1] if len(values) >= 2 else None)
    return tuple(gaps)


def structured_request(max_new_tokens: int = 96) -> dict[str, Any]:
    params = {
        "max_new_tokens": max_new_tokens,
        "temperature": 0,
        "json_schema": json.dumps(SCHEMA),
        **PENALTIES,
    }
    return {"text": "Is Paris the capital of France? Answer in JSON: ", "sampling_params": params}


def judge_structured(text: str, finish: dict[str, Any] | None = None) -> tuple[bool, str]:
    """Does the answer parse as JSON and hold to SCHEMA? Pure: the generated text in, a verdict out."""
    try:
        value = json.loads(text)
    except ValueError:
        why = " (cut off at max_new_tokens)" if (finish or {}).get("type") == "length" else ""
        return False, f"not JSON{why}: {text[:80]!r}"
    if not isinstance(value, dict):
        return False, f"not a JSON object: {text[:80]!r}"
    extra = set(value) - set(SCHEMA["properties"])
    if extra or set(SCHEMA["required"]) - set(value):
        return False, f"keys {sorted(value)} are not {sorted(SCHEMA['properties'])}"
    if value["answer"] not in ("yes", "no") or not isinstance(value["sure"], bool):
        return False, f"values outside the schema: {value}"
    return True, json.dumps(value, separators=(",", ":"))
