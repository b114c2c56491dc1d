"""The SGLang log model: lines -> events -> phases, timelines and verdicts. Pure; no Docker.

    parse_text(text) / LogParser.feed(line)    events (milestones, notes, errors with tracebacks)
    Tracker                                     one launch attempt: phases per rank, stall
                                                windows, deadlines, verdicts (kit/logs/verdicts.py)
    Attempts                                    the same interface over a log of several
                                                launches: judges the last, summarises the others
    analyze_text(text) / analyze_path(path)     an offline report with likely causes
    limits_from_spec(spec) (kit/logs/limits.py) a LaunchSpec's timing as PhaseLimits
    classify_stack / explain_hang (stacks.py)   where each rank is, from py-spy dumps (stacks.toml),
                                                and whether two samples confirm a hang
    Evidence / rank_causes (evidence.py, causes.py)  the one record a verdict's causes are ranked
                                                on: facts of the run, direct evidence, the log

Patterns per SGLang release live in patterns.toml and likely causes in causes.toml; see
docs/logs.md.
"""

from kit.logs.activity import ActivitySample
from kit.logs.analyze import AnalysisReport, analyze_path, analyze_text
from kit.logs.attempts import Attempts, AttemptSummary
from kit.logs.events import Event, Milestone, Note, Phase, Rank, phase_after
from kit.logs.launch import ExpectedRank, LaunchArgs
from kit.logs.parser import LogParser, parse_text
from kit.logs.tracker import Tracker
from kit.logs.verdicts import (
    Crashed,
    Deadline,
    Hung,
    MissingRanks,
    PhaseLimits,
    PhaseSpan,
    RankState,
    Ready,
    StageSeconds,
    Verdict,
    VerdictKind,
)

__all__ = [
    "ActivitySample",
    "AnalysisReport",
    "AttemptSummary",
    "Attempts",
    "Crashed",
    "Deadline",
    "Event",
    "ExpectedRank",
    "Hung",
    "LaunchArgs",
    "LogParser",
    "Milestone",
    "MissingRanks",
    "Note",
    "Phase",
    "PhaseLimits",
    "PhaseSpan",
    "Rank",
    "RankState",
    "Ready",
    "StageSeconds",
    "Tracker",
    "Verdict",
    "VerdictKind",
    "analyze_path",
    "analyze_text",
    "parse_text",
    "phase_after",
]
