"""PyTorch's flight recorder, as its analyzer reports it. Pure: fr_trace's text in, findings out.

Every render arms the recorder (kit/runtime/flight_recorder_env.py); on HUNG the kit asks each NCCL
rank for a dump through its pipe and runs the analyzer inside the server's image, where torch is
(kit/runtime/upstream.py): `python -m torch.distributed.flight_recorder.fr_trace DIR -p fr_rank_ -v`.
Its report (torch 2.13.0 torch/distributed/flight_recorder/components/types.py Collective.log, and
the `-v` listing of every matched collective, builder.py build_db) says, per collective that not
all ranks joined:

    Not all ranks joining collective, sequence number: 3
    group info: 0:default_pg
    collective: nccl:all_reduce
    missing ranks: {1}
    collective state: scheduled
    collective stack trace:
     all_reduce at .../parallel_state.py:512

and, with `-v`, every collective as `Collective(id=.., group_id=.., pass_check=True,
collective_seq_id=3, ..., collective_name='nccl:all_reduce', ..., collective_state='started', ...)`:
one every rank joined whose state is still `started` (or `scheduled`) is the one they all wait in.

What it cannot see: collectives outside c10d (SGLang's pynccl, CUDA-graph replays, the custom
all-reduce), and any rank that did not dump; on torch 2.13.0's CPU build there is no pipe to ask
(ProcessGroupNCCL's), and a gloo dump's group config has an empty name that fr_trace cannot pair
(`KeyError: ('0', 0)` in builder.py build_collectives): tests/fixtures/flight-recorder/README.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kit.logs.evidence import UpstreamWord

SEES = "it sees c10d collectives, not pynccl's, CUDA-graph replays or the custom all-reduce"
SOURCE = "flight-recorder"
MISSING, ALL_ENTERED = "fr-rank-missing", "fr-all-entered"  # evidence keys (kit/logs/evidence.py KEYS)

_BLOCK = re.compile(r"^(?P<message>[A-Z][^:]*?),? sequence number: (?P<seq>\d+)\s*$")
_FIELD = re.compile(r"^(?P<key>[a-z][a-z ]+): ?(?P<value>.*)$")
_FRAME = re.compile(r"^\s*(?P<func>\S+) at (?P<where>\S+:\d+)\s*$")
_COLLECTIVE = re.compile(
    r"Collective\(id=\d+, group_id='(?P<group>[^']*)', pass_check=(?P<passed>True|False), "
    r"collective_seq_id=(?P<seq>\d+), .*?pg_desc='(?P<desc>[^']*)', collective_name='(?P<name>[^']*)', "
    r".*?expected_ranks=\{(?P<ranks>[\d, ]*)\}, collective_state='(?P<state>\w+)'"
)


@dataclass(frozen=True)
class Unjoined:
    """A collective fr_trace found some ranks missing from (or mismatched in)."""

    message: str
    seq: int
    collective: str = "?"
    group: str = "?"
    missing: tuple[int, ...] = ()
    state: str | None = None
    stack: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    def line(self) -> str:
        who = (
            f"rank {', '.join(map(str, self.missing))} never joined" if self.missing else self.message.lower()
        )
        where = f"; issued from {' <- '.join(self.stack[:3])}" if self.stack else ""
        state = f"; its state on the ranks that did: {self.state}" if self.state else ""
        errors = f"; {'; '.join(self.errors)}" if self.errors else ""
        return f"{self.collective} #{self.seq} (group {self.group}): {who}{state}{errors}{where}"


@dataclass(frozen=True)
class Matched:
    """A collective every expected rank joined, with its state (from `-v`)."""

    seq: int
    collective: str
    group: str
    ranks: tuple[int, ...]
    state: str


@dataclass(frozen=True)
class FlightRecorderReport:
    unjoined: tuple[Unjoined, ...] = ()
    matched: tuple[Matched, ...] = ()
    failed: str | None = None  # fr_trace could not analyse the dumps (its last line)
    skipped: str | None = None  # no dump was taken, and why

    def lines(self) -> tuple[str, ...]:
        return tuple(f"flight recorder: {word.line}" for word in self.words())

    def words(self) -> tuple[UpstreamWord, ...]:
        """Each line with the evidence key it raises: a rank that never joined (MISSING), every rank
        in a collective none completed (ALL_ENTERED); the rest raise nothing."""
        if self.skipped:
            return (UpstreamWord(SOURCE, f"no dump ({self.skipped})"),)
        if self.failed:
            return (UpstreamWord(SOURCE, f"fr_trace could not analyse the dumps: {self.failed}"),)
        out = [UpstreamWord(SOURCE, u.line(), MISSING if u.missing else None) for u in self.unjoined]
        waiting = [m for m in self.matched if m.state in ("started", "scheduled")]
        for m in waiting:
            ranks = ", ".join(map(str, m.ranks))
            line = (
                f"every rank ({ranks}) entered {m.collective} #{m.seq} "
                f"(group {m.group}) and none completed it (state {m.state})"
            )
            out.append(UpstreamWord(SOURCE, line, ALL_ENTERED))
        if not out and self.matched:
            last = self.matched[-1]
            line = (
                f"every recorded collective completed on every rank (the last: {last.collective} #{last.seq})"
            )
            out.append(UpstreamWord(SOURCE, line))
        elif not out:
            out.append(UpstreamWord(SOURCE, "fr_trace found no collective that a rank missed"))
        out.append(UpstreamWord(SOURCE, SEES))
        return tuple(out)


def parse_report(text: str) -> FlightRecorderReport:
    """fr_trace's output (with or without -v)."""
    unjoined: list[Unjoined] = []
    current: dict | None = None
    in_stack = False

    def close() -> None:
        if current is not None:
            unjoined.append(Unjoined(**current))

    for raw in text.splitlines():
        line = raw.rstrip()
        if block := _BLOCK.match(line.strip()):
            close()
            current, in_stack = {"message": block["message"], "seq": int(block["seq"])}, False
            continue
        if current is None:
            continue
        if in_stack:
            if frame := _FRAME.match(line):
                current["stack"] = (
                    *current.get("stack", ()),
                    f"{frame['func']} ({frame['where'].rsplit('/', 1)[-1]})",
                )
                continue
            in_stack = False
        field = _FIELD.match(line.strip())
        if not field:
            close()
            current = None
            continue
        key, value = field["key"], field["value"].strip()
        if key == "collective stack trace":
            in_stack = True
        elif key == "group info":
            current["group"] = value
        elif key == "collective":
            current["collective"] = value
        elif key == "missing ranks":
            current["missing"] = tuple(int(n) for n in re.findall(r"\d+", value))
        elif key == "collective state":
            current["state"] = value
        elif "culprit" in value.lower() or "error" in key:
            current["errors"] = (*current.get("errors", ()), value[:200])
    close()
    matched = tuple(
        Matched(
            int(m["seq"]),
            m["name"],
            m["desc"],
            tuple(int(n) for n in re.findall(r"\d+", m["ranks"])),
            m["state"],
        )
        for m in _COLLECTIVE.finditer(text)
        if m["passed"] == "True"
    )
    failed = None
    if not unjoined and not matched and "Traceback (most recent call last)" in text:
        failed = text.strip().splitlines()[-1][:200]
    return FlightRecorderReport(tuple(unjoined), matched, failed)


def skipped(reason: str) -> FlightRecorderReport:
    return FlightRecorderReport(skipped=reason)
