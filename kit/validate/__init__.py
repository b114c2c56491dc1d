"""`kit validate`: is this launch right for this image? Pure, and well under a second.

Checks, in order: the catalog and overrides parse (else InputError, exit 2); tensor parallel divides
every dimension SGLang splits at model build (kit/validate/_parallel.py) and equals the GPUs asked
for; on CPU one thread-bind group per rank; the memory fit (kit/validate/_memory.py, numbers shown);
the image's dialect rules (e.g. 0.5.10's MTP-on-hybrid rule); known pitfalls (pitfalls.toml).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from kit.catalog import read_toml
from kit.catalog._errors import translate as _schema_error
from kit.dialects import Rule, matches
from kit.launch import Resolved, resolve_full
from kit.model.cache import fetched_file
from kit.proxyenv import NO_PROXY_FIX, loopback_gap
from kit.spec import CONTAINER_HF_CACHE
from kit.validate._memory import MemoryFit, memory_fit
from kit.validate._parallel import Split, broken_splits, splits_from_facts, splits_of

__all__ = [
    "Finding",
    "MemoryFit",
    "ValidationReport",
    "findings_for",
    "memory_fit",
    "model_config",
    "validate",
]

PITFALLS = Path(__file__).resolve().parent / "pitfalls.toml"
# The model folders the kit's images hold, by flavor (the Dockerfile: qwen-tiny in every image, tiny
# in the CPU rehearsal only; tests/validate holds this table to it).
IMAGE_MODELS: dict[str, tuple[str, ...]] = {
    "cpu": ("/opt/kit/models/tiny", "/opt/kit/models/qwen-tiny"),
    "cuda": ("/opt/kit/models/qwen-tiny",),
}
CPU_BIND_ENV = "SGLANG_CPU_OMP_THREADS_BIND"


@dataclass(frozen=True)
class Finding:
    id: str
    severity: Literal["error", "warning"]
    message: str
    fix: str | None = None
    source: str = ""


@dataclass(frozen=True)
class ValidationReport:
    target: str
    image: str
    dialect: str
    ok: bool
    """No finding of severity error."""
    findings: tuple[Finding, ...]
    memory: MemoryFit | None
    argv: tuple[str, ...]
    env: dict[str, str]
    notes: tuple[str, ...]
    seconds: float = 0.0
    checks: tuple[str, ...] = field(default=())


class _Pitfalls(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    rules: tuple[Rule, ...] = ()


@functools.cache
def pitfalls() -> tuple[Rule, ...]:
    try:
        return _Pitfalls.model_validate(read_toml(PITFALLS)).rules
    except ValidationError as exc:
        raise _schema_error(PITFALLS, exc, _Pitfalls) from exc


def _format(text: str, facts: dict[str, Any]) -> str:
    try:
        return text.format(**{k.replace(".", "_"): v for k, v in facts.items()})
    except (KeyError, IndexError, ValueError):
        return text


def _rule_findings(rules: Sequence[Rule], facts: dict[str, Any], origin: str) -> list[Finding]:
    return [
        Finding(
            id=f"{origin}:{rule.id}",
            severity=rule.severity,
            message=_format(rule.message, facts),
            fix=rule.fix,
            source=rule.source,
        )
        for rule in rules
        if matches(rule.when, facts)
    ]


@functools.cache
def _config_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def model_config(r: Resolved) -> tuple[Path | None, str]:
    """The config.json the launch's model has: the real one where `kit model fetch` has put the pinned
    snapshot in the HF cache, else the catalog's (partly estimated for qwen-base; its sources say
    which keys), else none. Returns (path, what it is)."""
    spec = r.spec
    fetched = fetched_file(spec.hf_cache, spec.hf_repo, spec.hf_revision, "config.json")
    if fetched is not None:
        return fetched, f"the fetched config.json ({spec.hf_repo}@{(spec.hf_revision or '')[:8]})"
    if r.model.config_path is not None:
        return r.model.config_path, f"the catalog's config.json ({r.model.config_path.name})"
    return None, "the catalog's facts (no config.json)"


def _splits(r: Resolved) -> tuple[tuple[Split, ...], str]:
    """What the launch splits over TP, and what that was read from."""
    path, what = model_config(r)
    if path is not None:
        try:
            return splits_of(_config_json(path)), what
        except (OSError, ValueError):  # a fetched file is not the catalog's: it may be unreadable
            if path == r.model.config_path:
                raise
            what = f"the catalog's facts ({path} did not parse)"
    facts = r.model.facts
    splits = splits_from_facts(
        facts.attention_heads, facts.kv_heads, facts.linear_value_heads, facts.linear_key_heads
    )
    return splits, what


def _bind_findings(r: Resolved) -> list[Finding]:
    """The CPU engine binds rank i to SGLANG_CPU_OMP_THREADS_BIND's group i (srt/utils/numa_utils.py)."""
    bind, ranks = r.spec.env.get(CPU_BIND_ENV), r.spec.ranks
    if r.spec.device != "cpu" or ranks < 2:
        return []
    example = "|".join(str(i % 2) for i in range(ranks))
    key = f"env.{CPU_BIND_ENV}" if CPU_BIND_ENV in r.profile.env else "cpu_threads_bind"
    source = "sglang 0.5.23 srt/utils/numa_utils.py init_threads_binding"
    if bind is None:
        message = f"{CPU_BIND_ENV} is unset: SGLang then wants a NUMA node per rank ({ranks})"
        return [Finding("cpu-bind-groups", "warning", message, f"--set {key}={example}", source)]
    groups = len(bind.split("|"))
    if groups >= ranks:
        return []
    message = (
        f"{CPU_BIND_ENV}={bind} has {groups} bind group(s) for {ranks} ranks: rank {groups} fails at init"
    )
    return [
        Finding("cpu-bind-groups", "error", message, f"one group per rank: --set {key}={example}", source)
    ]


def model_path_findings(r: Resolved) -> list[Finding]:
    """A model path that is a folder (not a Hub id) must be one the image holds or one a mount of
    the launch reaches (the HF cache); anything else SGLang takes for a Hugging Face repo id and
    stops on: huggingface_hub's validate_repo_id, 'Repo id must use alphanumeric chars ...'."""
    spec = r.spec
    path = spec.model_path
    if spec.hf_repo or not path.startswith("/"):
        return []
    held = IMAGE_MODELS.get(spec.device, ())
    mounts = (CONTAINER_HF_CACHE,) if spec.hf_cache else ()
    if any(path == folder or path.startswith(folder.rstrip("/") + "/") for folder in (*held, *mounts)):
        return []
    return [
        Finding(
            "model-path-missing",
            "error",
            f"model path {path} is no folder of image {spec.image} (it holds {', '.join(held) or 'none'}) "
            "and no mount of this launch reaches it: SGLang would take it for a Hugging Face repo id "
            "and stop ('Repo id must be in the form ...' or '... must use alphanumeric chars')",
            f"point the model's path (kit/catalog/models/) at one of {', '.join(held) or 'its folders'}, "
            "or give its hf_id and fetch it (kit model fetch)",
            "sglang 0.5.23 srt/utils/hf_transformers/config.py get_config -> srt/configs/model_config.py "
            "load_pointer_head -> transformers cached_file: a path that is no folder is a repo id "
            "(tests/fixtures/kit-logs/sglang-0.5.23-cpu-missing-model-path.log)",
        )
    ]


def _parallel_findings(r: Resolved) -> list[Finding]:
    tp, device = r.profile.tp, r.spec.device
    splits, read_from = _splits(r)
    found = [
        Finding(b.split.id, "error", f"{b.message} (read from {read_from})", b.fix, b.split.source)
        for b in broken_splits(splits, tp, r.spec.argv, device)
    ]
    found += _bind_findings(r)
    if r.spec.device == "cuda":
        per_node = r.spec.gpus
        if tp != per_node * r.profile.nnodes:
            where = f"{per_node} GPUs" + (f" x {r.profile.nnodes} nodes" if r.profile.nnodes > 1 else "")
            found.append(
                Finding(
                    "tp-gpus",
                    "error",
                    f"TP {tp} but the target asks for {where}",
                    f"--set tp={per_node * r.profile.nnodes}, or change the target's gpus",
                )
            )
    return found


def findings_for(r: Resolved) -> tuple[list[Finding], MemoryFit | None]:
    findings = [*model_path_findings(r), *_parallel_findings(r)]
    fit = None
    if r.spec.device == "cuda" and r.hardware is not None:
        fit = memory_fit(r.model.facts, r.profile, r.hardware, r.translation.facts.get("mamba_cache"))
        if not fit.fits:
            findings.append(
                Finding(
                    "memory-fit",
                    "error",
                    f"does not fit: {fit.summary()}",
                    "more GPUs (tp), a shorter context_length, or a higher mem_fraction",
                )
            )
    facts = r.translation.facts
    findings += _rule_findings(r.dialect.rules, facts, r.dialect.name)
    findings += _rule_findings(pitfalls(), facts, "pitfall")
    findings += proxy_findings(r.spec.env)
    return findings, fit


def proxy_findings(env: dict[str, str], where: str = "the target's env") -> list[Finding]:
    """A proxy in the server's environment that its own loopback warm-up would go through."""
    gap = loopback_gap(env)
    if gap is None:
        return []
    return [
        Finding(
            "server-proxy",
            "warning",
            gap.describe(where),
            f"--set env.NO_PROXY=127.0.0.1,localhost,0.0.0.0 --set env.no_proxy=127.0.0.1,localhost,0.0.0.0 "
            f"({NO_PROXY_FIX})",
            "python/sglang/srt/entrypoints/http_server.py _execute_server_warmup (sglang 0.5.23)",
        )
    ]


def validate(target: str, *, image: str | None = None, overrides: Sequence[str] = ()) -> ValidationReport:
    """Check TARGET on IMAGE with overrides. Bad input raises InputError; findings come back as data."""
    start = time.perf_counter()
    r = resolve_full(target, image=image, overrides=overrides)
    findings, fit = findings_for(r)
    findings.sort(key=lambda f: f.severity != "error")
    return ValidationReport(
        target=target,
        image=r.spec.image,
        dialect=r.spec.dialect,
        ok=not any(f.severity == "error" for f in findings),
        findings=tuple(findings),
        memory=fit,
        argv=r.spec.argv,
        env=r.spec.env,
        notes=r.spec.notes,
        seconds=round(time.perf_counter() - start, 4),
        checks=("schema", "parallel", "memory" if fit else "memory (skipped: no GPU)", "dialect", "pitfalls"),
    )
