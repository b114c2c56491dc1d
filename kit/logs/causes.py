"""Match an analysis (outcome, phase, evidence text) against the likely causes in causes.toml."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from kit.logs.events import Phase

OUTCOMES = frozenset({"ready", "crashed", "stalled"})
_PHASES = frozenset(p.value for p in Phase) | {"none"}


@dataclass(frozen=True, slots=True)
class Cause:
    id: str
    title: str
    why: str
    what_to_try: tuple[str, ...]
    outcomes: frozenset[str] | None = None  # None: any
    phases: frozenset[str] | None = None
    requires: tuple[str, ...] = ()
    hints: tuple[str, ...] = ()
    devices: frozenset[str] | None = None  # None: any


@dataclass(frozen=True, slots=True)
class CauseMatch:
    cause: Cause
    hints_found: tuple[str, ...]


def _cause(raw: dict[str, Any]) -> Cause:
    where = f"causes.toml {raw.get('id')!r}"
    for key in ("id", "title", "why", "what_to_try"):
        if not raw.get(key):
            raise ValueError(f"{where}: `{key}` is required")
    outcomes = frozenset(raw["outcome"]) if "outcome" in raw else None
    phases = frozenset(raw["phase"]) if "phase" in raw else None
    if outcomes is not None and not outcomes <= OUTCOMES:
        raise ValueError(f"{where}: unknown outcome {sorted(outcomes - OUTCOMES)}")
    if phases is not None and not phases <= _PHASES:
        raise ValueError(f"{where}: unknown phase {sorted(phases - _PHASES)}")
    return Cause(
        id=raw["id"],
        title=raw["title"],
        why=raw["why"],
        what_to_try=tuple(raw["what_to_try"]),
        outcomes=outcomes,
        phases=phases,
        requires=tuple(raw.get("requires", ())),
        hints=tuple(raw.get("hints", ())),
        devices=frozenset(raw["devices"]) if "devices" in raw else None,
    )


@dataclass(frozen=True, slots=True)
class CauseBook:
    causes: tuple[Cause, ...]


def build_causes(document: dict[str, Any]) -> CauseBook:
    causes = tuple(_cause(raw) for raw in document.get("cause", []))
    ids = [c.id for c in causes]
    if len(set(ids)) != len(ids):
        raise ValueError("causes.toml: cause ids must be unique")
    return CauseBook(causes=causes)


@cache
def default_causes() -> CauseBook:
    text = resources.files("kit.logs").joinpath("causes.toml").read_text(encoding="utf-8")
    return build_causes(tomllib.loads(text))


def match_causes(
    outcome: str,
    phase: Phase | None,
    evidence: str,
    book: CauseBook | None = None,
    limit: int = 6,
    device: str | None = None,
) -> tuple[CauseMatch, ...]:
    """Causes that fit: those with more hints found in the evidence first, then in file order.

    `device` (cuda, cpu) drops causes that cannot happen there (NCCL on a CPU rehearsal); None, for
    an offline log that does not say, keeps them all.
    """
    haystack = evidence.lower()
    phase_name = "none" if phase is None else phase.value
    fitting: list[CauseMatch] = []
    for cause in (book or default_causes()).causes:
        if cause.outcomes is not None and outcome not in cause.outcomes:
            continue
        if cause.phases is not None and phase_name not in cause.phases:
            continue
        if device is not None and cause.devices is not None and device not in cause.devices:
            continue
        if cause.requires and not any(word.lower() in haystack for word in cause.requires):
            continue
        found = tuple(word for word in cause.hints if word.lower() in haystack)
        fitting.append(CauseMatch(cause, found))
    fitting.sort(key=lambda m: -len(m.hints_found))  # stable: file order breaks ties
    return tuple(fitting[:limit])
