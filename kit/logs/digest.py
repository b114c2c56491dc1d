"""What a stretch of serving shows: speculative acceptance, throughput, requests, KV and mamba usage
over the log and over time, retractions and out-of-memory lines. Pure.

The parser says *that* a server serves (a `once` note per kind, kit/logs/patterns.toml, dialect
"serving"); this module reads the numbers of its batch lines. Their wording is SGLang's own,
per release:

- 0.2-0.5.3 `Decode batch. #running-req: N, #token: N, token usage: F, [accept len: F, ]gen throughput
  (token/s): F, #queue-req: N` (srt/managers/scheduler.py, 0.5.3 scheduler_metrics_mixin.py);
- 0.5.4+ `Decode batch, #running-req: N, ...` with the pool's own parts: `#token: N, token usage: F`,
  or `#full token: N, full token usage: F, mamba num: N, mamba usage: F` for hybrid models, then
  `accept len: F, accept rate: F, ` when speculative, `cuda graph: B, gen throughput (token/s): F,
  #queue-req: N` (0.5.23 srt/managers/scheduler_components/metrics_reporter.py and
  pool_stats_observer.py get_decode_usage_msg_parts); prefill lines carry `full token usage`/`token
  usage` and `mamba usage` the same way;
- retraction: `Decode out of memory happened. #retracted_reqs: N` (0.3-0.4.6 scheduler.py; counted in
  text read whole, it has no scan), `KV cache pool is full. Retract requests. #retracted_reqs: N`
  (0.4.9+, 0.5.23 srt/managers/scheduler.py; the parser's events);
- out of memory: `Decode out of memory. Try to lower your batch size.`, `Prefill out of memory. ...`
  (0.5.23 srt/mem_cache/allocation.py) and torch's `CUDA out of memory`.

Cost: reading the numbers is Python per line, so a log of more than SAMPLE_BYTES is read as
STRETCHES evenly spaced stretches of it (`sampled` says so, and its lines are not counted): a
million-line serving log keeps its pace (benchmarks/analyze_bench.py). Retractions and
out-of-memory lines are rare and matter one by one: they come from the parser's events, which see
every line of any log.
Live, `LogParser.feed` hands each line to its `ServingDigest` (`add_text`); offline, `analyze_text`
hands it the whole text (`digest_text`): the same lines read by the same code.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field

from kit.logs.events import Event, Note

SAMPLE_BYTES = 2_000_000  # a log up to this size is read whole
STRETCHES = 32  # otherwise: this many evenly spaced stretches, STRETCH_BYTES each
STRETCH_BYTES = 16_384
WINDOWS = 8  # "over time": the values in this many consecutive slices of the log
KEEP_LINES = 3  # retraction and out-of-memory lines kept as evidence

_BATCH = re.compile(r"^([^\n]*?)(Decode|Prefill) batch(?: \[\d+\])?[.,] ([^\n]*)", re.M)
_FIELD = re.compile(
    r"(accept len|accept rate|gen throughput \(token/s\)|#running-req|#queue-req|full token usage|"
    r"(?<!swa )(?<!gpu )(?<!cpu )token usage|mamba usage): (\d+(?:\.\d+)?)"
)
_STAMP = re.compile(r"\[?(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d|\d\d:\d\d:\d\d)")
_NAMES = {
    "accept len": "accept_len",
    "accept rate": "accept_rate",
    "gen throughput (token/s)": "gen_throughput",
    "#running-req": "running",
    "#queue-req": "queued",
    "full token usage": "kv_usage",
    "token usage": "kv_usage",
    "mamba usage": "mamba_usage",
}
MEASURES = tuple(dict.fromkeys(_NAMES.values()))
_PREFILL_MEASURES = frozenset({"kv_usage", "mamba_usage"})  # its #running-req is before the batch
_REQUESTS = ("ReqTimeStats(rid=", "Req Time Stats(rid=")


@dataclass
class ServingDigest:
    """Accumulates serving lines (`add_text`) and the parser's events about them (`add_events`:
    retractions, out-of-memory errors, which the parser finds in any log at its own pace);
    `summary()` reads it. Values are kept in log order."""

    decode_batches: int | None = 0  # None: not counted (a large log read as stretches)
    prefill_batches: int | None = 0
    requests: int | None = 0
    retractions: int = 0
    oom_lines: int = 0
    sampled: bool = False
    rows: list[tuple[str, dict[str, float]]] = field(default_factory=list)  # (line prefix, numbers)
    retraction_lines: list[str] = field(default_factory=list)
    oom_evidence: list[str] = field(default_factory=list)

    def add_text(self, text: str) -> None:
        """A buffer of whole lines: a live line, or a whole log."""
        if "batch" not in text and "Stats(rid=" not in text:
            return
        if len(text) <= SAMPLE_BYTES:
            if self.decode_batches is not None:
                self.decode_batches += text.count("Decode batch")
                self.prefill_batches += text.count("Prefill batch")  # type: ignore[operator]
                self.requests += sum(text.count(word) for word in _REQUESTS)  # type: ignore[operator]
            self._read(text)
            return
        # Reading every batch line costs Python per line: a large log is read as evenly spaced
        # stretches (the figures are over those lines, `sampled` says so) and its lines not counted.
        self.sampled = True
        self.decode_batches = self.prefill_batches = self.requests = None
        step = max(1, len(text) // STRETCHES)
        for start in range(0, len(text), step):
            begin = text.rfind("\n", 0, start) + 1
            end = text.rfind("\n", begin, begin + STRETCH_BYTES)
            if end > begin:
                self._read(text[begin:end])

    def add_events(self, events: Iterable[Event]) -> None:
        """Retractions (the parser's serving notes) and out-of-memory errors, each line kept as evidence
        up to KEEP_LINES."""
        for event in events:
            if event.note is Note.SERVING and event.fields.get("kind") == "retract":
                self.retractions += 1
                kept = self.retraction_lines
            elif event.is_error and "out of memory" in f"{event.fields.get('exception', '')} {event.text}":
                self.oom_lines += 1
                kept = self.oom_evidence
            else:
                continue
            if len(kept) < KEEP_LINES:
                kept.append(str(event.fields.get("exception") or event.text).strip()[:300])

    def _read(self, text: str) -> None:
        rows = self.rows
        for prefix, kind, body in _BATCH.findall(text):
            row = {_NAMES[name]: float(value) for name, value in _FIELD.findall(body)}
            if kind == "Prefill":
                row = {k: v for k, v in row.items() if k in _PREFILL_MEASURES}
            if row:
                rows.append((prefix, row))

    def summary(self, accept_floor: float | None = None) -> dict | None:
        """The figures, None when nothing was served: per measure min, median, max and count over the
        lines read, their medians per slice of the log over time (from each slice's first stamp), and
        the speculative acceptance against `accept_floor` (a target's smoke floor) when given."""
        counted = (self.decode_batches or 0) + (self.prefill_batches or 0) + (self.requests or 0)
        if not (self.rows or counted or self.retractions):
            return None
        values: dict[str, list[float]] = {name: [] for name in MEASURES}
        for _, row in self.rows:
            for name, value in row.items():
                values[name].append(value)
        over_log = {name: _stat(vals) for name, vals in values.items() if vals}
        windows = []
        size = max(1, -(-len(self.rows) // WINDOWS))
        for first in range(0, len(self.rows), size):
            rows = [row for _, row in self.rows[first : first + size]]
            stamp = _STAMP.search(self.rows[first][0])
            medians = {
                name: round(statistics.median(vals), 3)
                for name in MEASURES
                if (vals := [r[name] for r in rows if name in r])
            }
            windows.append({"from": stamp.group(1) if stamp else None, "lines": len(rows), **medians})
        accept = over_log.get("accept_len")
        below = None if accept_floor is None or accept is None else accept["median"] < accept_floor
        return {
            "decode_batches": self.decode_batches,
            "prefill_batches": self.prefill_batches,
            "requests": self.requests,
            "retractions": self.retractions,
            "retraction_lines": self.retraction_lines,
            "oom_lines": self.oom_lines,
            "oom_evidence": self.oom_evidence,
            "sampled": self.sampled,
            "lines_read": len(self.rows),
            "over_log": over_log,
            "over_time": windows,
            "accept_floor": accept_floor,
            "accept_below_floor": below,
        }


def _stat(values: list[float]) -> dict[str, float]:
    return {
        "min": min(values),
        "median": round(statistics.median(values), 3),
        "max": max(values),
        "count": len(values),
    }


def digest_text(text: str, events: Iterable[Event] = (), accept_floor: float | None = None) -> dict | None:
    """The serving summary of a whole log and its parsed events (kit analyze)."""
    digest = ServingDigest()
    digest.add_text(text)
    digest.add_events(events)
    return digest.summary(accept_floor)
