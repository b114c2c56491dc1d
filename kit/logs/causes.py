"""Rank the likely causes in causes.toml by the evidence an analysis found (see that file's header).

Evidence decides the order: a cause whose exception was raised beats one whose activity shape
fits the watch's measurements (quiet ranks, spinning ranks), which beats one whose words appear,
and all beat causes that merely fit the outcome and phase; those come last, marked generic.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from kit.logs.events import Phase

OUTCOMES = frozenset({"ready", "crashed", "hung"})
# Shapes of the activity a live verdict was reached on (kit/logs/activity.py ActivitySummary.shape).
SHAPES = frozenset({"quiet", "spinning"})
_ACTIVITY_SCORE = 200  # a measured shape outweighs one word (100), never an exception (1000)
_PHASES = frozenset(p.value for p in Phase) | {"none"}
_KEYS = frozenset(
    {
        "id",
        "title",
        "why",
        "what_to_try",
        "source",
        "outcome",
        "phase",
        "devices",
        "exceptions",
        "words",
        "requires",
        "activity",
        "unless",
    }
)


@dataclass(frozen=True, slots=True)
class Cause:
    id: str
    title: str
    why: str
    what_to_try: tuple[str, ...]
    source: str
    outcomes: frozenset[str] | None = None  # None: any
    phases: frozenset[str] | None = None
    requires: tuple[str, ...] = ()
    words: tuple[str, ...] = ()
    exceptions: tuple[str, ...] = ()
    devices: frozenset[str] | None = None  # None: any
    activity: frozenset[str] = frozenset()  # activity shapes it fits (quiet, spinning)
    unless: tuple[str, ...] = ()  # words that rule it out (the server said it is not in use)


@dataclass(frozen=True, slots=True)
class CauseMatch:
    """A cause that fits, with what was found for it (exceptions first, then words)."""

    cause: Cause
    evidence: tuple[str, ...]
    generic: bool  # nothing found: it only fits the outcome and phase
    score: int = 0


@cache
def _word(word: str) -> re.Pattern[str]:
    """A case-insensitive search for `word` where a word starts ("RoCE" is not in "process");
    it may run on ("BatchDecode" is in "BatchDecodeWithPagedKVCache")."""
    head = r"(?<![A-Za-z0-9])" if word[:1].isalnum() else ""
    return re.compile(head + re.escape(word), re.IGNORECASE)


def found_words(words: tuple[str, ...], text: str) -> tuple[str, ...]:
    return tuple(word for word in words if _word(word).search(text))


def _strings(raw: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = raw.get(key, ())
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{where}: `{key}` must be a list of non-empty strings")
    return tuple(value)


def _cause(raw: dict[str, Any]) -> Cause:
    where = f"causes.toml {raw.get('id')!r}"
    for key in ("id", "title", "why", "what_to_try", "source"):
        if not raw.get(key):
            raise ValueError(f"{where}: `{key}` is required")
    unknown = set(raw) - _KEYS
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    outcomes = frozenset(raw["outcome"]) if "outcome" in raw else None
    phases = frozenset(raw["phase"]) if "phase" in raw else None
    if outcomes is not None and not outcomes <= OUTCOMES:
        raise ValueError(f"{where}: unknown outcome {sorted(outcomes - OUTCOMES)} (use {sorted(OUTCOMES)})")
    if phases is not None and not phases <= _PHASES:
        raise ValueError(f"{where}: unknown phase {sorted(phases - _PHASES)}")
    shapes = frozenset(_strings(raw, "activity", where))
    if not shapes <= SHAPES:
        raise ValueError(f"{where}: unknown activity {sorted(shapes - SHAPES)} (use {sorted(SHAPES)})")
    return Cause(
        id=raw["id"],
        title=raw["title"],
        why=raw["why"],
        what_to_try=_strings(raw, "what_to_try", where),
        source=str(raw["source"]),
        outcomes=outcomes,
        phases=phases,
        requires=_strings(raw, "requires", where),
        words=_strings(raw, "words", where),
        exceptions=_strings(raw, "exceptions", where),
        devices=frozenset(raw["devices"]) if "devices" in raw else None,
        activity=shapes,
        unless=_strings(raw, "unless", where),
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
    exception: str | None = None,
    phase_known: bool = True,
    activity: str | None = None,
) -> tuple[CauseMatch, ...]:
    """Causes that fit, ranked by evidence (see the module docstring).

    `evidence` is the text searched for words (case-insensitive); `exception` the exception and
    traceback text searched for a cause's exceptions (case-sensitive; `evidence` when None).
    `phase` None with `phase_known` means "before the first milestone"; with `phase_known=False`
    (a pasted tail whose phase nothing tells) a cause with evidence fits whatever its phases.
    `device` (cuda, cpu) drops causes that cannot happen there (NCCL on a CPU rehearsal); None,
    for an offline log that does not say, keeps them all.
    """
    raised = evidence if exception is None else exception
    phase_name = "none" if phase is None else phase.value
    found: list[tuple[int, int, CauseMatch]] = []
    for order, cause in enumerate((book or default_causes()).causes):
        if cause.outcomes is not None and outcome not in cause.outcomes:
            continue
        if device is not None and cause.devices is not None and device not in cause.devices:
            continue
        if cause.unless and found_words(cause.unless, evidence):
            continue
        shaped = activity is not None and activity in cause.activity
        if cause.requires and not shaped and not found_words(cause.requires, evidence):
            continue
        hits = tuple(e for e in cause.exceptions if e in raised)
        words = tuple(w for w in found_words(cause.words, evidence) if w not in hits)
        fits_phase = cause.phases is None or phase_name in cause.phases
        if not fits_phase and (phase_known or not (hits or words)):
            continue
        shape = (f"activity={activity}",) if shaped else ()
        generic = not (hits or words or shaped)
        # Among causes with no evidence, one made for this phase alone beats one that fits many
        # phases; among causes with equal evidence the book's order (commoner first) decides.
        specific = 0
        if generic and cause.phases and phase_name in cause.phases:
            specific = 10 - min(len(cause.phases), 9)
        score = 1000 * len(hits) + _ACTIVITY_SCORE * len(shape) + 100 * len(words) + specific
        found.append((-score, order, CauseMatch(cause, hits + shape + words, generic, score)))
    found.sort(key=lambda item: (item[0], item[1]))
    return tuple(match for _, _, match in found[:limit])
