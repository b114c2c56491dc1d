"""SGLang's own line prefix `[date time TPn]`: each record's time and rank.

SGLang prefixes each record with `[YYYY-MM-DD HH:MM:SS(.mmm)( DPn)( PPn)( TPn)( EPn)]` (no rank
part in the main process or, in recent releases, when tp=1); very old releases print `[HH:MM:SS
TPn]` or `[gpu_id=N]`. What collectors and other loggers put in front of it is kit/logs/wrappers.py's
(one table, wrappers.toml).

Milestones are found anywhere in a line, and the SGLang prefix is the last one before the match,
so whatever stands in front of it does not matter here (and tqdm bars that glue a record onto
their line still work).
"""

from __future__ import annotations

import re
from datetime import datetime
from functools import lru_cache

from kit.logs.events import Rank

_SGLANG_PREFIX = re.compile(
    r"\[(?:(?P<date>\d{4}-\d\d-\d\d) )?(?P<clock>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d{1,6}))?"
    r"(?P<ranks>(?: [A-Z][A-Z_]*\d+)*)\]"
    r"|\[gpu_id=(?P<gpu>\d+)\]"
)
_RANK_PART = re.compile(r" ([A-Z][A-Z_]*?)(\d+)")


@lru_cache(maxsize=512)
def _rank(parts: str) -> Rank | None:
    values: dict[str, int] = {}
    for name, number in _RANK_PART.findall(parts):
        field = {"TP": "tp", "DP": "dp", "PP": "pp", "EP": "ep"}.get(name)
        if field is not None:
            values[field] = int(number)
    return Rank(**values) if values else None


@lru_cache(maxsize=4096)  # ranks print the same second many times over
def _time(date: str | None, clock: str, frac: str | None) -> datetime | None:
    # Releases that print only the clock get a placeholder date (1900-01-01): durations inside
    # one day stay right, which is all the tracker needs.
    try:
        year, month, day = (int(date[0:4]), int(date[5:7]), int(date[8:10])) if date else (1900, 1, 1)
        micro = int(frac.ljust(6, "0")) if frac else 0
        return datetime(year, month, day, int(clock[0:2]), int(clock[3:5]), int(clock[6:8]), micro)
    except ValueError:  # digits in the right places but not a date (garbage, a version string)
        return None


def sglang_prefix(line: str, before: int | None = None) -> tuple[datetime | None, Rank | None]:
    """Time and rank from the last SGLang prefix in `line[:before]`, (None, None) when there is none."""
    end = len(line) if before is None else before
    at = line.rfind("[", 0, end)
    while at >= 0:  # the last `[` that opens a prefix ending before `end`
        last = _SGLANG_PREFIX.match(line, at, end)
        if last is not None:
            if last["gpu"] is not None:  # 0.2's [gpu_id=N]: one scheduler per GPU, numbered like TP
                return None, Rank(tp=int(last["gpu"]))
            return _time(last["date"], last["clock"], last["frac"]), _rank(last["ranks"])
        at = line.rfind("[", 0, at)
    return None, None


def first_time(text: str) -> datetime | None:
    """The first SGLang timestamp in a whole log (the launcher's first line, before any event)."""
    for found in _SGLANG_PREFIX.finditer(text):
        if found["clock"] is not None:
            stamp = _time(found["date"], found["clock"], found["frac"])
            if stamp is not None:
                return stamp
    return None
