"""NCCL's RAS (reliability, availability, serviceability) status, read. Pure: text in, findings out.

NCCL >= 2.24 runs a RAS thread in every process that uses it and answers on 127.0.0.1:28028 inside
that process's network namespace (NCCL_RAS_ADDR moves it). The client speaks lines: `CLIENT
PROTOCOL 2` (the server answers `SERVER PROTOCOL N`), optionally `TIMEOUT S` and, from 2.28.7,
`SET FORMAT json` (each answered `OK`), then `STATUS`; the status follows until the connection
closes (NCCL src/ras/client.cc and client_support.cc at v2.28.7-1; docs/userguide/source/
troubleshooting/ras.rst). kit/runtime/upstream.py asks; this module reads both formats:

- JSON (2.28.7+): per communicator, every rank's `collective_counts` per operation (Broadcast,
  Reduce, AllGather, ReduceScatter, AllReduce: ops *launched*), and `missing_ranks` with
  `unresponsive` / `considered_dead`, PID and GPU.
- text: a summary table, then `Errors` (INCOMPLETE, DEAD: processes with PID and GPU; per
  communicator `#G-C (hash) INCOMPLETE` with the missing ranks) and `Warnings` (per communicator
  `#G-C (hash) MISMATCH`: `Communicator ranks have different AllReduce operation counts`, `N ranks
  have launched up to operation X`, `Rank R has not launched any operations -- GPU ...`). Equal
  counts print nothing in text: only JSON shows that every rank entered the same operation.

Two snapshots about 10 s apart decide it (NCCL's docs: a mismatch that does not change across
queries is a stuck communicator; counts are of launched operations, so every rank at the same count
with none moving means every rank entered that operation and it never finished, NVIDIA/nccl#1730):
"all 4 ranks launched AllReduce #12 and none launched another in 10 s", or "rank 3 never launched
AllReduce (the others are at #12)", or "rank 2 (pid 4242, GPU 2) is missing: unresponsive".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from kit.logs.evidence import UpstreamWord

OPS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
"""NCCL's collective operations as RAS names them (ncclFuncStr, src/init.cc at v2.28.7-1)."""


@dataclass(frozen=True)
class RasRank:
    rank: int
    pid: int | None = None
    gpu: str | None = None
    counts: tuple[tuple[str, int], ...] = ()  # (operation, launched up to) where known
    missing: str | None = None  # why it is missing: "unresponsive", "considered dead", "no data"

    def describe(self) -> str:
        where = [f"pid {self.pid}"] if self.pid is not None else []
        where += [f"GPU {self.gpu}"] if self.gpu is not None else []
        return f"rank {self.rank}" + (f" ({', '.join(where)})" if where else "")


@dataclass(frozen=True)
class RasComm:
    hash: str
    ranks: tuple[RasRank, ...] = ()
    # Text only: per operation, the count of a group of ranks it did not list one by one
    # ("3 ranks have launched up to operation 12").
    groups: tuple[tuple[str, int], ...] = ()

    def counts(self, op: str) -> dict[int, int]:
        """{rank: launched up to} for OP, for the ranks whose count is known."""
        return {r.rank: dict(r.counts)[op] for r in self.ranks if r.missing is None and op in dict(r.counts)}


@dataclass(frozen=True)
class RasSnapshot:
    format: str  # "json" or "text"
    comms: tuple[RasComm, ...] = ()
    dead: tuple[str, ...] = ()  # processes RAS considers dead, as it names them
    version: str | None = None
    complete: bool = True  # False: text, where equal counts are not printed


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def parse_json(text: str) -> RasSnapshot:
    """`SET FORMAT json` then `STATUS` (NCCL >= 2.28.7). Raises ValueError on anything else."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("communicators"), list):
        raise ValueError("not a RAS JSON status: no communicators")
    comms = []
    dead = []
    for comm in data["communicators"]:
        if not isinstance(comm, dict):
            continue
        ranks = []
        for rank in comm.get("ranks") or []:
            if not isinstance(rank, dict) or _int(rank.get("rank")) is None:
                continue
            counts = rank.get("collective_counts") or {}
            ranks.append(
                RasRank(
                    _int(rank["rank"]) or 0,
                    _int(rank.get("pid")),
                    None if rank.get("nvml_dev") is None else str(rank.get("nvml_dev")),
                    tuple((op, int(n)) for op, n in counts.items() if isinstance(n, int)),
                )
            )
        for rank in comm.get("missing_ranks") or []:
            if not isinstance(rank, dict) or _int(rank.get("rank")) is None:
                continue
            status = rank.get("status") or {}
            why = "considered dead" if status.get("considered_dead") else "unresponsive"
            why = why if status.get("unresponsive") or status.get("considered_dead") else "no data"
            found = RasRank(
                _int(rank["rank"]) or 0,
                _int(rank.get("pid")),
                None if rank.get("nvml_dev") is None else str(rank.get("nvml_dev")),
                missing=why,
            )
            ranks.append(found)
            if why == "considered dead":
                dead.append(found.describe())
        comms.append(RasComm(str(comm.get("hash") or "?"), tuple(sorted(ranks, key=lambda r: r.rank))))
    return RasSnapshot("json", tuple(comms), tuple(dead), str(data.get("nccl_version") or "") or None)


_COMM = re.compile(r"^#\d+-\d+ \((?P<hash>[0-9a-fA-F]+)\) (?P<what>INCOMPLETE|MISMATCH|ERROR)")
_RANK = re.compile(r"^\s+Rank (?P<rank>\d+)(?P<rest>.*)$")
_GPU_PID = re.compile(r"GPU (?P<gpu>[\w,/]+) managed by process (?P<pid>\d+)")
_OP = re.compile(r"Communicator ranks have different (?P<op>\w+) operation counts")
_GROUP = re.compile(r"^\s+\d+ ranks have (?:launched up to operation (?P<n>\d+)|not launched any operations)")
_ONE = re.compile(r"has (?:launched up to operation (?P<n>\d+)|not launched any operations)")
_PROCESS = re.compile(r"^\s+Process (?P<pid>\d+) on node (?P<node>\S+) managing GPUs? (?P<gpu>\S+)")
_VERSION = re.compile(r"^NCCL version (?P<version>\S+)")


def parse_text(text: str) -> RasSnapshot:
    """`STATUS` in NCCL's text format (every release with RAS)."""
    comms: dict[str, dict[int, dict]] = {}
    groups: dict[str, dict[str, int]] = {}
    dead: list[str] = []
    version = None
    section = None  # "DEAD", a communicator's INCOMPLETE / MISMATCH, or None
    comm: str | None = None
    op: str | None = None
    group_count: int | None = None
    for line in text.splitlines():
        if found := _VERSION.match(line):
            version = found["version"]
            continue
        if line.strip() in ("DEAD", "INCOMPLETE", "TIMEOUT", "Errors", "Warnings"):
            section, comm = line.strip(), None
            continue
        if found := _COMM.match(line):
            section, comm, op = found["what"], found["hash"], None
            comms.setdefault(comm, {})
            continue
        if section == "DEAD" and (found := _PROCESS.match(line)):
            dead.append(f"pid {found['pid']} on {found['node']}, GPU {found['gpu']}")
            continue
        if comm is None:
            continue
        if found := _OP.search(line):
            op, group_count = found["op"], None
            continue
        if found := _GROUP.match(line):
            group_count = int(found["n"] or 0)
            if op is not None:
                tops = groups.setdefault(comm, {})
                tops[op] = max(tops.get(op, 0), group_count)
            continue
        rank_line = _RANK.match(line)
        if not rank_line:
            continue
        rank = int(rank_line["rank"])
        entry = comms[comm].setdefault(rank, {"counts": {}})
        if where := _GPU_PID.search(rank_line["rest"]):
            entry.update(pid=int(where["pid"]), gpu=where["gpu"])
        if section == "INCOMPLETE":
            entry["missing"] = "no data"
        elif section == "MISMATCH" and op is not None:
            one = _ONE.search(rank_line["rest"])
            count = int(one["n"] or 0) if one else group_count
            if count is not None:
                entry["counts"][op] = count
    built = tuple(
        RasComm(
            hash_,
            tuple(
                RasRank(
                    rank,
                    entry.get("pid"),
                    entry.get("gpu"),
                    tuple(sorted(entry["counts"].items())),
                    entry.get("missing"),
                )
                for rank, entry in sorted(ranks.items())
            ),
            tuple(sorted(groups.get(hash_, {}).items())),
        )
        for hash_, ranks in comms.items()
    )
    return RasSnapshot("text", built, tuple(dead), version, complete=False)


def parse_status(text: str) -> RasSnapshot:
    """Either format: JSON when the answer is a JSON object, else text."""
    if text.lstrip().startswith("{"):
        return parse_json(text)
    return parse_text(text)


SOURCE = "nccl-ras"
MISSING, ALL_ENTERED = "ras-rank-missing", "ras-all-entered"  # evidence keys (kit/logs/evidence.py KEYS)


@dataclass(frozen=True)
class RasFinding:
    """What two RAS snapshots say about the hang (or why there are none): each line with the
    evidence key it raises (MISSING, ALL_ENTERED), or None where it raises nothing."""

    said: tuple[tuple[str, str | None], ...] = ()
    skipped: str | None = None
    snapshots: tuple[RasSnapshot, ...] = field(default=(), compare=False)

    def lines(self) -> tuple[str, ...]:
        return tuple(f"NCCL RAS: {word.line}" for word in self.words())

    def words(self) -> tuple[UpstreamWord, ...]:
        if self.skipped:
            return (UpstreamWord(SOURCE, f"not asked ({self.skipped})"),)
        return tuple(UpstreamWord(SOURCE, line, key) for line, key in self.said)


def _op_lines(comm: RasComm, before: RasComm | None, seconds: float) -> list[tuple[str, str | None]]:
    """Per operation: still moving, or ranks behind the others; the operations every rank launched
    equally and that stood still go into one line (RAS counts launches, so which of them came last
    is not known: the stacks and the flight recorder say that). Each line with its evidence key."""
    out: list[tuple[str, str | None]] = []
    level, ranks = [], 0
    for op in OPS:
        now = comm.counts(op)
        top = max([*now.values(), dict(comm.groups).get(op, 0)])
        if top == 0:
            continue
        then = before.counts(op) if before is not None else {}
        if then and any(now.get(rank) != then.get(rank) for rank in now):
            out.append(
                (f"{op} still moves: up to #{top} now, {seconds:.0f} s after the first snapshot", None)
            )
            continue
        behind = {rank: n for rank, n in now.items() if n < top}
        for rank, n in sorted(behind.items()):
            if n == 0:
                out.append(
                    (f"rank {rank} never launched {op} (the others launched it up to #{top})", MISSING)
                )
            else:
                line = (
                    f"rank {rank} launched {op} only up to #{n}, the others #{top}: it never joined #{n + 1}"
                )
                out.append((line, MISSING))
        if not behind:
            level.append((top, op))
            ranks = len(now)
    if level and not out:  # nothing moved and no rank behind: all stand in the same place
        ops = ", ".join(f"{op} #{n}" for n, op in sorted(level, reverse=True))
        still = f"none launched another in {seconds:.0f} s" if before is not None else "one snapshot"
        line = (
            f"all {ranks} ranks launched {ops} and {still}: "
            "every rank entered its last collective, none finished"
        )
        # One snapshot cannot tell a stall from a collective in flight: the line, no key.
        out.insert(0, (line, ALL_ENTERED if before is not None else None))
    return out


def compare(first: RasSnapshot, second: RasSnapshot, seconds: float) -> RasFinding:
    """Findings from two snapshots SECONDS apart (the second is the newer)."""
    said: list[tuple[str, str | None]] = []
    earlier = {c.hash: c for c in first.comms}
    for comm in second.comms:
        for rank in comm.ranks:
            if rank.missing is not None:
                line = f"{rank.describe()} is missing from communicator {comm.hash}: {rank.missing}"
                said.append((line, MISSING))
        said += _op_lines(comm, earlier.get(comm.hash), seconds)
    said += [(f"process {who} is considered dead by RAS", MISSING) for who in second.dead]
    if not said:
        said.append(
            (
                "every rank answered and no communicator shows a missing rank or a count mismatch"
                + (
                    ""
                    if second.complete
                    else " (text format: equal counts are not printed; NCCL >= 2.28.7 says more)"
                ),
                None,
            )
        )
    version = f" (NCCL {second.version})" if second.version else ""
    said[0] = (said[0][0] + version, said[0][1])
    return RasFinding(tuple(said), snapshots=(first, second))


def skipped(reason: str) -> RasFinding:
    return RasFinding(skipped=reason)
