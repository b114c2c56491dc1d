"""HTTP to a running SGLang server: first token on streaming chat and /generate, health.

Errors become kit errors here; callers get timings and text. Every request to a server the kit
watches goes direct (`trust_env=False`): a host's HTTP_PROXY/http_proxy would otherwise send the
request for 127.0.0.1 or the published port to the proxy, and a healthy server would read as
failed. The model hub (huggingface_hub) keeps the environment's proxy; it does not use this module.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import httpx

from kit.errors import CheckFailed


@dataclass(frozen=True)
class FirstToken:
    endpoint: str
    first_token_s: float
    total_s: float
    text: str  # the answer's content (chat) or the generated text (/generate)
    chunks: int
    first_in: str = "content"  # the field the first token came in: content, reasoning_content, text
    reasoning: str = ""  # chat with a reasoning parser: the reasoning text


def _timeout(seconds: float) -> httpx.Timeout:
    return httpx.Timeout(seconds, connect=min(10.0, seconds))


def server_client(timeout_s: float, transport: httpx.BaseTransport | None = None) -> httpx.Client:
    """A client for a server the kit watches: never through the environment's proxy."""
    return httpx.Client(timeout=_timeout(timeout_s), transport=transport, trust_env=False)


def server_get(url: str, *, timeout_s: float = 30.0, headers: dict[str, str] | None = None) -> httpx.Response:
    """GET from a watched server, direct (see server_client)."""
    with server_client(timeout_s) as http:
        return http.get(url, headers=headers)


def server_post(
    url: str, *, json_body: object, timeout_s: float, headers: dict[str, str] | None = None
) -> httpx.Response:
    """POST to a watched server, direct (see server_client); the whole answer read."""
    with server_client(timeout_s) as http:
        return http.post(url, json=json_body, headers=headers)


def server_startup_time(
    base_url: str,
    *,
    timeout_s: float = 10.0,
    transport: httpx.BaseTransport | None = None,
    api_key: str | None = None,
) -> dict | None:
    """SGLang's own start-up phases from `/server_info`'s `startup_time` (0.5.23: load_weight,
    kv_cache_allocation, cuda_graph per phase, scheduler_e2e, tokenizer_e2e, in seconds;
    srt/entrypoints/http_server.py server_info, srt/observability/startup_time.py), or None where the
    release has none or the server does not say."""
    try:
        with server_client(timeout_s, transport) as http:
            response = http.get(base_url + "/server_info", headers=_auth(api_key))
        if response.status_code != 200:
            return None
        found = response.json().get("startup_time")
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return found if isinstance(found, dict) and found else None


def _fail(endpoint: str, exc: Exception) -> CheckFailed:
    return CheckFailed(f"{endpoint}: {type(exc).__name__}: {exc}")


def _auth(api_key: str | None) -> dict[str, str]:
    """SGLang's --api-key is a bearer token (an empty key sends nothing)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def chat_first_token(
    base_url: str,
    model: str,
    prompt: str = "Hello",
    *,
    max_tokens: int = 8,
    timeout_s: float = 60.0,
    transport: httpx.BaseTransport | None = None,
    api_key: str | None = None,
) -> FirstToken:
    """Stream /v1/chat/completions greedily; time to the first token, in `content` or, with a
    reasoning parser, in `reasoning_content` (a thinking model's first tokens are reasoning)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    return _stream("/v1/chat/completions", base_url, body, timeout_s, _chat_delta, transport, api_key)


def generate_first_token(
    base_url: str,
    prompt: str = "Hello",
    *,
    max_new_tokens: int = 8,
    timeout_s: float = 60.0,
    transport: httpx.BaseTransport | None = None,
    api_key: str | None = None,
) -> FirstToken:
    """Stream native /generate greedily; its `text` is cumulative."""
    body = {
        "text": prompt,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0},
        "stream": True,
    }
    return _stream("/generate", base_url, body, timeout_s, _generate_text, transport, api_key)


# An extractor turns one streamed JSON chunk into {field: new text} (empty: no token in it).


def _chat_delta(payload: dict) -> dict[str, str]:
    """Content and, with a reasoning parser, reasoning deltas: both are tokens."""
    choices = payload.get("choices") or [{}]
    delta = choices[0].get("delta") or {}
    return {key: delta[key] for key in ("reasoning_content", "content") if delta.get(key)}


def _generate_text(payload: dict) -> dict[str, str]:
    """/generate streams the whole text so far; the caller keeps the latest."""
    return {"text": payload["text"]} if payload.get("text") else {}


def _stream(
    endpoint: str,
    base_url: str,
    body: dict,
    timeout_s: float,
    extract,
    transport: httpx.BaseTransport | None = None,
    api_key: str | None = None,
) -> FirstToken:
    started = time.monotonic()
    first: float | None = None
    first_in = ""
    got: dict[str, str] = {}
    chunks = 0
    try:
        with (
            server_client(timeout_s, transport) as http,
            http.stream("POST", base_url + endpoint, json=body, headers=_auth(api_key)) as response,
        ):
            if response.status_code != 200:
                response.read()
                raise CheckFailed(f"{endpoint}: HTTP {response.status_code}: {response.text[:200]}")
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunks += 1
                pieces = extract(json.loads(data))
                if pieces and first is None:
                    first, first_in = time.monotonic() - started, next(iter(pieces))
                for key, piece in pieces.items():
                    got[key] = piece if key == "text" else got.get(key, "") + piece
                if time.monotonic() - started > timeout_s:
                    raise CheckFailed(f"{endpoint}: no end of stream within {timeout_s:.0f} s")
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        raise _fail(endpoint, exc) from exc
    if first is None:
        raise CheckFailed(f"{endpoint}: the stream ended without a token ({chunks} chunks)")
    text = got.get("text", got.get("content", ""))
    return FirstToken(
        endpoint, first, time.monotonic() - started, text, chunks, first_in, got.get("reasoning_content", "")
    )


def generate_text(
    base_url: str,
    prompt: str,
    *,
    max_new_tokens: int = 16,
    timeout_s: float = 60.0,
    api_key: str | None = None,
) -> str:
    """Greedy, non-streaming /generate: the completion text (for determinism checks)."""
    body = {"text": prompt, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}}
    try:
        response = server_post(
            base_url + "/generate", json_body=body, timeout_s=timeout_s, headers=_auth(api_key)
        )
        response.raise_for_status()
        return str(response.json()["text"])
    except (httpx.HTTPError, KeyError, ValueError) as exc:
        raise _fail("/generate", exc) from exc


def health(
    base_url: str, path: str = "/health_generate", *, timeout_s: float = 30.0, api_key: str | None = None
) -> int:
    """The status code of a health endpoint (0 when nothing answers)."""
    try:
        return server_get(base_url + path, timeout_s=timeout_s, headers=_auth(api_key)).status_code
    except httpx.HTTPError:
        return 0


def probe_health(
    base_url: str,
    path: str = "/health_generate",
    *,
    timeout_s: float = 25.0,
    api_key: str | None = None,
    transport: httpx.BaseTransport | None = None,
) -> tuple[int, str | None]:
    """(HTTP status, why there is none): one health probe; status 0 when nothing answered in time.

    SGLang's /health_generate sends a one-token request through the scheduler and answers 200 once
    anything comes back, 503 after SGLANG_HEALTH_CHECK_TIMEOUT (srt/entrypoints/http_server.py)."""
    try:
        with httpx.Client(timeout=_timeout(timeout_s), transport=transport) as http:
            return http.get(base_url + path, headers=_auth(api_key)).status_code, None
    except httpx.TimeoutException:
        return 0, f"no answer within {timeout_s:.0f} s"
    except httpx.HTTPError as exc:
        return 0, f"{type(exc).__name__}: {exc}"[:200]
