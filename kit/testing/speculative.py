"""Checks that catch a bad speculative decoder after READY, where a first token proves nothing.

- **The greedy answer is the reference profile's.** Speculative decoding verifies every draft token
  against the target model, so at temperature 0 it cannot change what is generated. A start of the
  reference profile (the model's non-speculative `base`, same image and TP) records its greedy token
  ids; a start of the speculative profile must give the same ids. Upstream failures after READY on
  hybrid GDN models with NEXTN (token id 0 loops, sglang#36537) differ at once.
- **SGLang's acceptance length**, printed and held to the profile's floor (smoke.min_accept_length,
  default 1.0: accepted drafts + 1 per verify step can only be lower when something is broken).
  Read from each response's own meta_info (0.5.23, srt/managers/tokenizer_manager.py
  `_calculate_spec_decoding_metrics`): `spec_accept_length` = completion_tokens / spec_verify_ct of
  that request, with `spec_verify_ct` and `completion_tokens` beside it: exact, and there on the
  first response. Not /server_info's `internal_states[].avg_spec_accept_length` nor /metrics'
  `sglang:spec_accept_length` (which needs --enable-metrics): the scheduler refreshes those totals
  every 40th decode step (`decode_log_interval`, scheduler_components/metrics_reporter.py), so a
  short start reads none, or a value up to 39 steps old.

On a random-weight model (qwen-tiny-mtp) both need care:

- **Ties are not failures.** Exact greedy equality between speculative and plain decoding is not
  guaranteed: verify runs 4-token shapes, and where the target's top two logits lie within bf16
  rounding of each other the argmax can flip. The reference run records, per position, the gap
  between its top-1 and top-2 logprobs (/generate with return_logprob, top_logprobs_num=2); a first
  difference where that gap is within `smoke.greedy_tie_epsilon` is a tie (the tokens after it follow
  different prefixes and are not compared), one above it fails.
- **Accepted drafts, committed.** A random MTP head's drafts are all refused (acceptance 1.0), so the
  paths that commit accepted drafts (mamba extra_buffer state, KV slot moves) never run. With
  `smoke.simulate_accept_length` the smoke also starts the profile under SGLang's own simulation:
  SGLANG_SIMULATE_ACC_LEN=L with SGLANG_SIMULATE_ACC_TOKEN_MODE=real-draft-token. In 0.5.23
  (srt/speculative/eagle_utils.py `eagle_sample`, srt/speculative/spec_utils.py
  `sample_simulated_acc_len`, `generate_simulated_accept_index`, and the CUDA kernel
  kernels/ops/speculative/simulated_accept.py) every verify step then accepts L tokens (method
  `match-expected`: floor(L) or floor(L)+1 with the fraction as weight, clamped to steps + 1): the
  first L-1 are the draft's own tokens (topk 1), the last the target's token at that position. The
  responses' own acceptance (three requests, their tokens over their verify steps) must lie within
  `smoke.accept_length_tolerance` of L: each request's first token comes from prefill, not a verify
  step, and its last step may be cut by max_new_tokens (16 tokens at L=3 read 16/5 = 3.2, 32 read 32/11)
  (tests/smoke/test_simulated_acceptance_docker.py runs that accounting through 0.5.23's own code on
  CPU); the greedy comparison does not apply there (forced drafts change the text).

The reference lives in the kit's cache (~/.cache/kit/smoke/greedy/), keyed by model, revision, image,
profile, TP, prompt and length, so the base and MTP starts may be separate jobs (the nightly workflow
carries the file from one to the other).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit import paths
from kit.catalog import Smoke, load_catalog
from kit.errors import CheckFailed
from kit.spec import LaunchSpec
from kit.testing import answers
from kit.testing.checks import CheckResult

MIN_ACCEPT_LENGTH = 1.0
# SGLang 0.5.23's simulation switches (srt/environ.py: SGLANG_SIMULATE_ACC_LEN EnvFloat(-1) = off,
# SGLANG_SIMULATE_ACC_TOKEN_MODE EnvStr("fixed")); "fixed" would emit token id 100 for every accepted
# token, "real-draft-token" commits the draft's own tokens (eagle_utils.py eagle_sample).
SIMULATE_ENV = "SGLANG_SIMULATE_ACC_LEN"
SIMULATE_MODE_ENV = "SGLANG_SIMULATE_ACC_TOKEN_MODE"
SIMULATE_MODE = "real-draft-token"


def smoke_of(spec: LaunchSpec) -> Smoke:
    return Smoke.model_validate(spec.smoke)


def is_speculative(spec: LaunchSpec) -> bool:
    return any(a.startswith("--speculative-algo") for a in spec.argv)


def simulated_overrides(spec: LaunchSpec) -> tuple[str, ...]:
    """The --set overrides of the simulated-acceptance start (empty: the profile asks for none)."""
    length = smoke_of(spec).simulate_accept_length
    if length is None or not is_speculative(spec):
        return ()
    return (f"env.{SIMULATE_ENV}={length:g}", f"env.{SIMULATE_MODE_ENV}={SIMULATE_MODE}")


def simulated_length(spec: LaunchSpec) -> float | None:
    """The acceptance length SGLang simulates in this start (its env), None when it does not."""
    try:
        value = float(spec.env.get(SIMULATE_ENV, "-1"))
    except ValueError:
        return None
    return value if value > 0 else None


def expected_accept_length(simulated: float, spec: LaunchSpec) -> float:
    """What SGLang's counters average to under the simulation: L clamped to [1, steps + 1]."""
    steps = _num_steps(spec)
    return max(1.0, min(simulated, steps + 1)) if steps else max(1.0, simulated)


def _num_steps(spec: LaunchSpec) -> int | None:
    argv = list(spec.argv)
    for i, arg in enumerate(argv):
        if arg.startswith("--speculative-num-steps"):
            value = arg.split("=", 1)[1] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            return int(value) if value.isdigit() else None
    return None


def reference_profile(spec: LaunchSpec) -> str | None:
    """The profile whose greedy answer a speculative profile must reproduce (None: not speculative)."""
    if not is_speculative(spec):
        return None
    named = smoke_of(spec).greedy_reference
    if named:
        return named
    profiles = load_catalog().models[spec.model].profiles
    base = profiles.get("base")
    return "base" if base is not None and not base.get("speculative") else None


def references_wanted(spec: LaunchSpec) -> bool:
    """Does a speculative profile of this model compare against this (non-speculative) profile?"""
    if is_speculative(spec):
        return False
    for table in load_catalog().models[spec.model].profiles.values():
        if not table.get("speculative"):
            continue
        named = (table.get("smoke") or {}).get("greedy_reference") or "base"
        if named == spec.profile:
            return True
    return False


@dataclass(frozen=True)
class ReferenceKey:
    model: str
    revision: str
    image: str
    profile: str
    tp: int
    prompt: str
    tokens: int

    @property
    def file(self) -> Path:
        digest = hashlib.sha256(json.dumps(self.__dict__, sort_keys=True).encode()).hexdigest()[:16]
        return reference_dir() / f"{self.model}-{self.profile}-{digest}.json"


def reference_dir() -> Path:
    return paths.cache_dir() / "smoke" / "greedy"


def key_for(spec: LaunchSpec, profile: str) -> ReferenceKey:
    tokens = smoke_of(spec).greedy_tokens
    return ReferenceKey(
        spec.model, spec.hf_revision or "-", spec.image, profile, spec.ranks, answers.PROMPT, tokens
    )


def save_reference(key: ReferenceKey, target: str, answer: answers.Greedy) -> Path:
    """The reference's ids, text and per-position top-1/top-2 logprob gaps (where it asked for them)."""
    key.file.parent.mkdir(parents=True, exist_ok=True)
    record = {"key": key.__dict__, "target": target, "ids": list(answer.ids), "text": answer.text}
    gaps = answers.top2_gaps(answer.meta)
    if gaps:
        record["top2_gaps"] = list(gaps)
    record["recorded_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    tmp = key.file.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, key.file)
    return key.file


def load_reference(key: ReferenceKey) -> dict[str, Any] | None:
    try:
        record = json.loads(key.file.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("key") == key.__dict__ else None


def first_difference(a: tuple[int, ...] | list[int], b: tuple[int, ...] | list[int]) -> int | None:
    """Index of the first token that differs (or where one ends), None when equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _timeout(spec: LaunchSpec) -> float:
    return spec.timing.deadlines["first_token"] + 120.0


def greedy_reference_recorded(base_url: str, spec: LaunchSpec) -> CheckResult:
    """A non-speculative profile that a speculative one compares against records its greedy ids."""
    name = "greedy reference recorded"
    key = key_for(spec, spec.profile)
    try:
        answer = answers.greedy(base_url, spec, key.tokens, timeout_s=_timeout(spec), top_logprobs=2)
    except CheckFailed as exc:
        return CheckResult(name, False, exc.one_line())
    if len(answer.ids) != key.tokens:
        return CheckResult(
            name, False, f"asked for {key.tokens} tokens, got {len(answer.ids)}", answer.seconds
        )
    path = save_reference(key, spec.target, answer)
    return CheckResult(name, True, f"{key.tokens} tokens {answer.text[:30]!r} -> {path}", answer.seconds)


def greedy_matches_reference(base_url: str, spec: LaunchSpec) -> CheckResult:
    """The speculative profile's greedy ids equal the reference profile's, token for token."""
    name = "greedy answer = reference profile's"
    profile = reference_profile(spec)
    if profile is None:
        return CheckResult(name, False, f"{spec.profile} names no reference profile (smoke.greedy_reference)")
    key = key_for(spec, profile)
    record = load_reference(key)
    if record is None:
        return CheckResult(
            name,
            False,
            f"no greedy answer of profile '{profile}' recorded for {spec.model} on {spec.image} "
            f"(TP {spec.ranks}): run the smoke of a '{profile}' target first (it records {key.file.name})",
        )
    try:
        answer = answers.greedy(base_url, spec, key.tokens, timeout_s=_timeout(spec))
    except CheckFailed as exc:
        return CheckResult(name, False, exc.one_line())
    ok, detail = judge_greedy(answer, record, smoke_of(spec).greedy_tie_epsilon)
    return CheckResult(name, ok, detail, answer.seconds)


def judge_greedy(answer: answers.Greedy, record: dict[str, Any], epsilon: float) -> tuple[bool, str]:
    """Pure: the speculative run's greedy ids against the reference record. Equal passes; a first
    difference where the reference's top-1/top-2 logprob gap is within `epsilon` is a tie and passes
    (what follows it continues another prefix); any other difference fails, with the gap named."""
    at = first_difference(answer.ids, record["ids"])
    if at is None:
        return True, f"{len(answer.ids)} tokens equal to {record['target']}'s: {answer.text[:30]!r}"
    gap = tie_gap(record, at)
    if gap is not None and gap <= epsilon:
        return True, (
            f"equal to {record['target']}'s up to token {at}, a tie there (its top-1/top-2 logprob gap "
            f"{gap:.4f} <= {epsilon:g}); the tokens after it follow another prefix"
        )
    zeros = sum(1 for i in answer.ids if i == 0)
    aside = f"; {zeros} of them token id 0" if zeros else ""
    ours, theirs = list(answer.ids[at : at + 4]), record["ids"][at : at + 4]
    margin = (
        f"; {record['target']}'s top-1/top-2 gap there {gap:.4f} > {epsilon:g}: no tie"
        if gap is not None
        else "; no top-2 logprobs recorded there: a tie cannot be told"
    )
    return False, (
        f"token {at} differs from {record['target']}'s: {ours} vs {theirs}"
        f" ({answer.text[:30]!r} vs {record['text'][:30]!r}){aside}{margin}"
    )


def tie_gap(record: dict[str, Any], at: int) -> float | None:
    """The reference run's top-1/top-2 logprob gap at position `at`, None where it was not recorded."""
    gaps = record.get("top2_gaps")
    if not isinstance(gaps, list) or at >= len(gaps):
        return None
    gap = gaps[at]
    return float(gap) if isinstance(gap, int | float) and not isinstance(gap, bool) else None


# -- acceptance length ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Acceptance:
    """One response's own acceptance, as SGLang 0.5.23 computes it for that request
    (srt/managers/tokenizer_manager.py `_calculate_spec_decoding_metrics`): its completion tokens over
    its verify steps (the bonus token included)."""

    length: float
    """meta_info["spec_accept_length"] = completion_tokens / spec_verify_ct."""
    verify_steps: int | None
    """meta_info["spec_verify_ct"]."""
    tokens: int | None
    """meta_info["completion_tokens"]."""


def acceptance_of(meta: dict[str, Any] | None) -> Acceptance | None:
    """The response's own acceptance from its meta_info, or None where SGLang wrote none (a server
    without speculative decoding, or a request with no verify step)."""
    meta = meta or {}
    length = meta.get("spec_accept_length")
    if not isinstance(length, int | float) or isinstance(length, bool):
        return None

    def count(key: str) -> int | None:
        value = meta.get(key)
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else None

    return Acceptance(float(length), count("spec_verify_ct"), count("completion_tokens"))


def pooled(acceptances: list[Acceptance]) -> float:
    """Several requests' acceptance as one: all their tokens over all their verify steps (each
    request's mean where a count is missing)."""
    if all(a.verify_steps and a.tokens is not None for a in acceptances):
        return sum(a.tokens or 0 for a in acceptances) / sum(a.verify_steps or 0 for a in acceptances)
    return sum(a.length for a in acceptances) / len(acceptances)


NOT_REPORTED = (
    "the response's meta_info has no spec_accept_length (SGLang 0.5.23 writes it on every response "
    "with a verify step: srt/managers/tokenizer_manager.py _calculate_spec_decoding_metrics)"
)
SOURCE = "each response's meta_info spec_accept_length"


def _requests(base_url: str, spec: LaunchSpec, count: int) -> list[Acceptance] | str:
    """COUNT greedy requests' own acceptance, or why not (a failed request, or none reported)."""
    found = []
    for _ in range(count):
        try:
            answer = answers.greedy(base_url, spec, smoke_of(spec).greedy_tokens, timeout_s=_timeout(spec))
        except CheckFailed as exc:
            return exc.one_line()
        accepted = acceptance_of(answer.meta)
        if accepted is None:
            return f"not reported: {NOT_REPORTED}"
        found.append(accepted)
    return found


def accept_length(base_url: str, spec: LaunchSpec) -> CheckResult:
    """SGLang's acceptance length for a greedy request (its response's own figure, exact: not
    /server_info's totals, which the scheduler refreshes every 40th decode step, decode_log_interval
    in scheduler_components/metrics_reporter.py) against the floor; in a start under SGLang's
    simulation (simulated_length), several requests' against the simulated length instead."""
    name = "speculative acceptance length"
    simulated = simulated_length(spec)
    if simulated is not None:
        return _near_simulated(base_url, spec, simulated)
    floor = smoke_of(spec).min_accept_length or MIN_ACCEPT_LENGTH
    found = _requests(base_url, spec, 1)
    if isinstance(found, str):
        return CheckResult(name, False, found)
    (accepted,) = found
    detail = f"{accepted.length:.2f} (floor {floor:g}) from {SOURCE}{_counts([accepted])}"
    return CheckResult(name, accepted.length >= floor, detail)


def _counts(acceptances: list[Acceptance]) -> str:
    if not all(a.verify_steps and a.tokens is not None for a in acceptances):
        return ""
    tokens = sum(a.tokens or 0 for a in acceptances)
    steps = sum(a.verify_steps or 0 for a in acceptances)
    return f" ({tokens} tokens / {steps} verify steps)"


def _near_simulated(base_url: str, spec: LaunchSpec, simulated: float) -> CheckResult:
    expected = expected_accept_length(simulated, spec)
    # A few requests: a fractional length is drawn per verify step, so one short request varies.
    found = _requests(base_url, spec, 3)
    if isinstance(found, str):
        return CheckResult("simulated acceptance length", False, found)
    return judge_simulated(found, expected, smoke_of(spec).accept_length_tolerance)


def judge_simulated(acceptances: list[Acceptance], expected: float, tolerance: float) -> CheckResult:
    """Pure: the responses' own acceptance (pooled) against the simulated length."""
    value = pooled(acceptances)
    ok = abs(value - expected) <= tolerance
    each = ", ".join(f"{a.length:.2f}" for a in acceptances)
    detail = (
        f"{value:.2f} reported, {expected:g} simulated (within {tolerance:g}: {ok}) from {SOURCE}"
        f"{_counts(acceptances)}; per request {each}"
    )
    return CheckResult("simulated acceptance length", ok, detail)


# -- acceptance under KV pressure ---------------------------------------------------------------------

# What sglang#36537 saw on a hybrid GDN model with NEXTN and the radix cache: healthy (accept len
# 1.78-2.59) up to full token usage 0.4, every draft rejected (1.00) from 0.6 on. The window fills the
# KV cache past REACH and holds SGLang's own per-interval acceptance there to the low-usage one.
KV_PRESSURE_REACH = 0.6
KV_PRESSURE_FILL = 0.85  # of max_total_num_tokens, spread over the window's requests
KV_PRESSURE_REQUESTS = 16
KV_PRESSURE_DECODE = 256  # tokens each request decodes: several decode log intervals (40 steps)
KV_PRESSURE_KEEP = 0.6  # acceptance at high usage must keep this share of the low-usage one
# The scheduler's decode line (0.5.23 srt/managers/scheduler_components/metrics_reporter.py, every
# decode_log_interval steps, with pool_stats_observer.py's usage parts):
#   Decode batch, #running-req: 9, full token usage: 0.57, mamba num: 35, accept len: 1.00, ...
_DECODE_USAGE = re.compile(r"Decode batch.*?\bfull token usage: ([0-9.]+).*?\baccept len: ([0-9.]+)")


def decode_samples(lines: list[str]) -> list[tuple[float, float]]:
    """(full token usage, accept len) of each scheduler decode line, in order."""
    return [(float(u), float(a)) for line in lines for u, a in _DECODE_USAGE.findall(line)]


def judge_kv_pressure(
    samples: list[tuple[float, float]],
    floor: float,
    *,
    reach: float = KV_PRESSURE_REACH,
    keep: float = KV_PRESSURE_KEEP,
) -> CheckResult:
    """Pure: SGLang's own acceptance as the KV cache fills. Fails when the window never passed
    `reach`, or when acceptance at or past it falls under the floor or under `keep` of the
    acceptance below half of it (sglang#36537's collapse: 2.59 -> 1.00 at 0.6)."""
    name = "acceptance under KV pressure"
    if not samples:
        return CheckResult(name, False, "no scheduler decode line with 'full token usage' and 'accept len'")
    top = max(u for u, _ in samples)
    if top < reach:
        return CheckResult(
            name, False, f"the window filled the KV cache to {top:.2f} only, not past {reach:g}"
        )
    low = [a for u, a in samples if u < reach / 2]
    high = [(u, a) for u, a in samples if u >= reach]
    base = sum(low) / len(low) if low else None
    want = max(floor, keep * base) if base is not None else floor
    worst = min(high, key=lambda s: s[1])
    ok = worst[1] >= want
    said = f"{base:.2f} below usage {reach / 2:g}" if base is not None else "no low-usage interval"
    detail = (
        f"accept len {worst[1]:.2f} at full token usage {worst[0]:.2f} (lowest of {len(high)} intervals past "
        f"{reach:g}, top {top:.2f}); {said}; held to {want:.2f}"
    )
    return CheckResult(name, ok, detail)


def kv_pressure_window(base_url: str, spec: LaunchSpec, container: Any) -> CheckResult:
    """SGLang's own acceptance (its decode lines) at a low KV usage, then with the KV cache filled
    past KV_PRESSURE_REACH by concurrent requests with distinct long prompts (prefill fills it fast;
    distinct, so the radix cache cannot share them), each decoding KV_PRESSURE_DECODE tokens there.
    GPU only; the judge is judge_kv_pressure."""
    from concurrent.futures import ThreadPoolExecutor

    from kit.runtime.http import server_get

    name = "acceptance under KV pressure"
    info = server_get(f"{base_url}/server_info", headers=answers._headers(spec)).json()
    total = int(info.get("max_total_num_tokens") or 0)
    if total <= 0:
        return CheckResult(name, False, "/server_info gave no max_total_num_tokens")
    per_request = int(total * KV_PRESSURE_FILL / KV_PRESSURE_REQUESTS)
    since = int(time.time()) - 1

    def ask(prompt: str) -> answers.Greedy:
        return answers.greedy(
            base_url, spec, KV_PRESSURE_DECODE, prompt=prompt, timeout_s=_timeout(spec) + per_request / 500
        )

    phases = (
        [answers.PROMPT] * 4,  # low usage: the acceptance to hold to
        # ~3 tokens a word ("12-345"): distinct numbers per request, so no shared prefix
        [" ".join(f"{i}-{k}" for k in range(per_request // 3)) for i in range(KV_PRESSURE_REQUESTS)],
    )
    for prompts in phases:
        with ThreadPoolExecutor(len(prompts)) as pool:
            jobs = [pool.submit(ask, prompt) for prompt in prompts]
            failed = [str(exc) for job in jobs if (exc := job.exception()) is not None]
        if failed:
            return CheckResult(
                name, False, f"{len(failed)} of {len(prompts)} requests failed: {failed[0][:160]}"
            )
    lines = container.logs(since=since).decode("utf-8", "replace").splitlines()
    floor = smoke_of(spec).min_accept_length or MIN_ACCEPT_LENGTH
    return judge_kv_pressure(decode_samples(lines), floor)
