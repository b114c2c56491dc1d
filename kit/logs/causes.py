"""Rank the likely causes in causes.toml over one evidence record (kit/logs/evidence.py); see that
file's header for the keys.

A cause whose precondition (`needs`: several nodes, a GPU, a proxy) is false on this run is never
offered; one whose facts are unknown (an offline log) is kept, its row saying which fact was unknown.
Evidence decides the order: direct evidence (`raised_by`: the engine's Paused or OOMKilled, the
cgroup's oom_kill, the kernel's OOM line, a process killed by a signal or stopped, a stack in a
compiler) beats a cause whose exception or words are in the error's own class line (the
`Name: message` line a traceback ends in: `torch.OutOfMemoryError: CUDA out of memory`), which beats
an exception found elsewhere in the error (the wrapper's `Scheduler hit an exception`), which beats
an activity shape that fits the watch's measurements (quiet ranks, spinning ranks), which beats
words, and all beat causes that merely fit the outcome and phase; those come last, marked generic.
A word found only on milestone lines (`Load weight end`, `Capture cuda graph begin`: what the parser
reads as start-up progress) says where start-up stopped, which the phase already says: it counts as
the phase, not as a word of the cause's own, and a cause with nothing else is generic.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from kit.logs.events import Phase
from kit.logs.evidence import KEYS, NEEDS, WEIGHTS, Evidence, Facts
from kit.logs.parser import parse_text

OUTCOMES = frozenset({"ready", "crashed", "hung"})
# Shapes of the activity a live verdict was reached on (kit/logs/activity.py ActivitySummary.shape).
SHAPES = frozenset({"quiet", "spinning"})
_ACTIVITY_SCORE = 200  # a measured shape outweighs one word (100), never an exception (1000)
_CLASS_SCORE = 10_000  # the error's class line names it: before any exception found elsewhere
_RAISED_SCORE = 100_000  # direct evidence outweighs any exception or pattern
_PHASE_WORD_SCORE = 10  # milestone words: the phase again, above the phase fit alone (at most 9)
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
        "needs",
        "raised_by",
        "unless_raised",
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
    devices: frozenset[str] | None = None  # None: any; {"cuda"} is `needs = ["gpu"]`
    activity: frozenset[str] = frozenset()  # activity shapes it fits (quiet, spinning)
    unless: tuple[str, ...] = ()  # words that rule it out (the server said it is not in use)
    needs: tuple[str, ...] = ()  # facts it needs (nodes>1, gpu, proxy): false on this run, never shown
    raised_by: tuple[str, ...] = ()  # direct evidence keys (kit/logs/evidence.py KEYS) that raise it
    unless_raised: tuple[str, ...] = ()  # evidence keys that rule it out (an OOM kill is no bare kill)


@dataclass(frozen=True, slots=True)
class CauseMatch:
    """A cause that fits, with what was found for it (exceptions first, then words)."""

    cause: Cause
    evidence: tuple[str, ...]
    generic: bool  # nothing found: it only fits the outcome and phase
    score: int = 0
    facts: tuple[str, ...] = ()  # the facts it rests on: "needs gpu: gpu yes (device cuda)"


@cache
def _word(word: str) -> re.Pattern[str]:
    """A case-insensitive search for `word` where a word starts ("RoCE" is not in "process");
    it may run on ("BatchDecode" is in "BatchDecodeWithPagedKVCache")."""
    head = r"(?<![A-Za-z0-9])" if word[:1].isalnum() else ""
    return re.compile(head + re.escape(word), re.IGNORECASE)


def found_words(words: tuple[str, ...], text: str) -> tuple[str, ...]:
    return tuple(word for word in words if _word(word).search(text))


# The line an exception closes its traceback with, `Name: message` (kit/logs/parser.py reads it as
# fields["exception"]), after any record prefix, and faulthandler's `Fatal Python error: ...`: the
# line that names the error's class. The wrapper that reports it (`Scheduler hit an exception:
# Traceback ...`) is no such line: its words are not one identifier.
_CLASS_LINE = re.compile(
    r"^(?:\[[^\]\n]*\]\s*)?(?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)|Fatal Python error)"
    r"(?=:)[^\n]*",
    re.MULTILINE,
)


def class_lines(raised_text: str) -> str:
    """The lines of the raised text that name the error's class, joined."""
    return "\n".join(dict.fromkeys(m.group(0) for m in _CLASS_LINE.finditer(raised_text)))


@cache
def _progress_line(line: str) -> bool:
    """The parser reads this line as a start-up milestone (and no error)."""
    events = parse_text(line)
    return bool(events) and all(e.milestone is not None and not e.is_error for e in events)


def phase_words(words: tuple[str, ...], text: str) -> tuple[str, ...]:
    """The words of `words` found in `text` only on milestone lines: they say where start-up
    stopped (the phase), not what stopped it."""
    lines = text.splitlines()
    found = []
    for word in words:
        on = [line for line in lines if _word(word).search(line)]
        if on and all(_progress_line(line.strip()) for line in on):
            found.append(word)
    return tuple(found)


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
    needs = _strings(raw, "needs", where)
    if not set(needs) <= NEEDS:
        raise ValueError(f"{where}: unknown needs {sorted(set(needs) - NEEDS)} (use {sorted(NEEDS)})")
    devices = frozenset(raw["devices"]) if "devices" in raw else None
    if devices is not None and not devices <= {"cuda", "cpu"}:
        raise ValueError(f"{where}: unknown devices {sorted(devices - {'cuda', 'cpu'})} (use cuda, cpu)")
    if devices == {"cuda"} and "gpu" not in needs:
        needs = (*needs, "gpu")  # the older key: a cause only CUDA can have needs a GPU
    if "gpu" in needs:
        devices = frozenset({"cuda"})
    raised_by = _strings(raw, "raised_by", where)
    unless_raised = _strings(raw, "unless_raised", where)
    unknown_keys = (set(raised_by) | set(unless_raised)) - set(KEYS)
    if unknown_keys:
        raise ValueError(f"{where}: unknown evidence keys {sorted(unknown_keys)} (kit/logs/evidence.py KEYS)")
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
        devices=devices,
        activity=shapes,
        unless=_strings(raw, "unless", where),
        needs=needs,
        raised_by=raised_by,
        unless_raised=unless_raised,
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
    """Causes that fit a log's text alone (kit analyze): `rank_causes` over a record holding only
    the text. `device` (cuda, cpu) is the one fact a log may tell; None keeps every cause."""
    facts = Facts() if device is None else Facts(gpu=device == "cuda", said={"gpu": f"device {device}"})
    record = Evidence(
        outcome=outcome,
        phase=phase,
        phase_known=phase_known,
        facts=facts,
        log_text=evidence,
        raised_text=evidence if exception is None else exception,
        shape=activity,
    )
    return rank_causes(record, book, limit)


def rank_causes(record: Evidence, book: CauseBook | None = None, limit: int = 6) -> tuple[CauseMatch, ...]:
    """Causes that fit the evidence record, ranked by evidence (see the module docstring).

    `record.log_text` is searched for words (case-insensitive), `record.raised_text` for a cause's
    exceptions (case-sensitive). `phase` None with `phase_known` means "before the first
    milestone"; with `phase_known=False` (a pasted tail whose phase nothing tells) a cause with
    evidence fits whatever its phases. A cause whose `needs` is false on this run is dropped; one
    whose needed fact is unknown stays (an offline log cannot rule it out).
    """
    text, raised_text, outcome = record.log_text, record.raised_text, record.outcome
    raised = record.raised()
    classes = class_lines(raised_text)
    phase_name = "none" if record.phase is None else record.phase.value
    found: list[tuple[int, int, CauseMatch]] = []
    for order, cause in enumerate((book or default_causes()).causes):
        if cause.outcomes is not None and outcome not in cause.outcomes:
            continue
        facts = tuple(record.facts.describe(need) for need in cause.needs)
        if any(record.facts.holds(need) is False for need in cause.needs):
            continue
        if any(key in raised for key in cause.unless_raised):
            continue
        if cause.unless and found_words(cause.unless, text):
            continue
        direct = tuple(line for key in cause.raised_by for line in raised.get(key, ()))
        shaped = record.shape is not None and record.shape in cause.activity
        only_raised = cause.raised_by and not (cause.words or cause.exceptions or cause.activity)
        if only_raised and not direct:
            continue
        if cause.requires and not (shaped or direct) and not found_words(cause.requires, text):
            continue
        hits = tuple(e for e in cause.exceptions if e in raised_text)
        words = tuple(w for w in found_words(cause.words, text) if w not in hits)
        progress = phase_words(words, text)
        words = tuple(w for w in words if w not in progress)
        # The error's class line names this cause (rule: a named class before the generic wrapper).
        named = any(e in classes for e in hits) or bool(found_words(words, classes))
        fits_phase = cause.phases is None or phase_name in cause.phases
        if not fits_phase and (record.phase_known or not (hits or words or direct)):
            continue
        shape = (f"activity={record.shape}",) if shaped else ()
        generic = not (hits or words or shaped or direct)
        # Among causes with no evidence, one made for this phase alone beats one that fits many
        # phases; among causes with equal evidence the book's order (commoner first) decides.
        specific = 0
        if generic and cause.phases and phase_name in cause.phases:
            specific = 10 - min(len(cause.phases), 9)
        keys = sum(WEIGHTS.get(key, 1) for key in cause.raised_by if key in raised)
        score = (
            _RAISED_SCORE * keys
            + _CLASS_SCORE * named
            + 1000 * len(hits)
            + _ACTIVITY_SCORE * len(shape)
            + 100 * len(words)
            + _PHASE_WORD_SCORE * (generic and bool(progress))  # the phase: ranks only causes with nothing else
            + specific
        )
        match = CauseMatch(cause, direct + hits + shape + words + progress, generic, score, facts)
        found.append((-score, order, match))
    found.sort(key=lambda item: (item[0], item[1]))
    return tuple(match for _, _, match in found[:limit])
