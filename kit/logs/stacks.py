"""Where each rank is, read from py-spy stack dumps. Pure: text in, classification out.

The frames are data (stacks.toml: each row a place, its state and its upstream source). A rank is
*waiting* (for peers: a collective, a barrier, the store, a recv), *spinning* (a CUDA synchronize),
*working* (a JIT compile, a wait on a compiler child, loading, a tokenizer, an autotune: progress,
however quiet, while a compiler child lives or any counter shows life; with none, the place alone is
no progress: *standing*), *sleeping* (a planted hang, an idle thread nothing
explains), *unknown* (running frames the table does not know) or *unreadable* (no stack: py-spy
missing, no ptrace, gone).

A hang names two kinds of ranks: those *waiting* (in the rendezvous or a collective, for peers)
and those *missing* (elsewhere while the others wait for them). Logs alone often cannot tell them
apart (every rank printed "Init ... begin"); stacks can.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Any


class StackState(StrEnum):
    WAITING = "waiting"
    SPINNING = "spinning"
    WORKING = "working"
    SLEEPING = "sleeping"
    UNKNOWN = "unknown"  # frames the table does not know, thread running
    UNREADABLE = "unreadable"  # no stack at all


class StackKind(StrEnum):
    """The place, as stack rows and causes.toml name it (stacks.toml `kind`)."""

    RENDEZVOUS = "rendezvous"  # waiting in torch.distributed's store for peers to arrive
    COLLECTIVE = "collective"  # inside a collective (all_reduce, barrier, ...) waiting for peers
    RECV = "recv"  # a point-to-point or ZMQ receive
    PLANTED = "planted-fault"  # the rehearsal image's test-only fault switch
    LOADING = "loading"  # reading weights
    COMPILE = "compile"  # a JIT compile, or a wait on a compiler child
    AUTOTUNE = "autotune"
    CAPTURE = "capture"
    TOKENIZER = "tokenizer"
    CUDA_SYNC = "cuda-sync"
    OTHER = "other"
    UNAVAILABLE = "unavailable"  # no stack (py-spy missing, no SYS_PTRACE, process gone)


IDLE = frozenset({StackState.WAITING, StackState.SPINNING, StackState.SLEEPING})
STANDING = "standing"  # a row's word for a place of work while no counter moved (RankStack.word)
# The same, as rows say it (RankStack.word): a result read back has words, not RankStacks.
IDLE_WORDS = frozenset({*(state.value for state in IDLE), STANDING})
# Process states (psutil's words, or the cgroup's) in which nothing runs, whatever the stack says.
HELD_STATES = frozenset({"stopped", "tracing-stop", "frozen"})


@dataclass(frozen=True, slots=True)
class FrameRule:
    state: StackState
    kind: StackKind
    what: str
    match: tuple[str, ...]
    source: str
    file: str | None = None
    child: str | None = None

    def fits(self, frame: Frame) -> bool:
        if self.file is not None and self.file not in frame.file:
            return False
        return any(needle in frame.function or needle in frame.file for needle in self.match)


_ROW_KEYS = frozenset({"state", "kind", "what", "match", "source", "file", "child"})


def build_rules(document: Mapping[str, Any]) -> tuple[FrameRule, ...]:
    rules = []
    for index, row in enumerate(document.get("frame", [])):
        where = f"stacks.toml row {index + 1}"
        unknown = set(row) - _ROW_KEYS
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
        for key in ("state", "kind", "what", "match", "source"):
            if not row.get(key):
                raise ValueError(f"{where}: `{key}` is required")
        if row.get("child") not in (None, "compiler"):
            raise ValueError(f'{where}: `child` must be "compiler"')
        try:
            state, kind = StackState(row["state"]), StackKind(row["kind"])
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if state in (StackState.UNKNOWN, StackState.UNREADABLE):
            raise ValueError(f"{where}: state {state} is the table's own verdict, not a row's")
        rules.append(
            FrameRule(
                state,
                kind,
                row["what"],
                tuple(row["match"]),
                row["source"],
                row.get("file"),
                row.get("child"),
            )
        )
    return tuple(rules)


@cache
def default_rules() -> tuple[FrameRule, ...]:
    text = resources.files("kit.logs").joinpath("stacks.toml").read_text(encoding="utf-8")
    return build_rules(tomllib.loads(text))


_FRAME = re.compile(r"^\s+(?P<func>\S.*?) \((?P<file>[^()]*?):(?P<line>\d+)\)\s*$")
_THREAD = re.compile(r"^Thread (?P<tid>\d+) \((?P<state>[^)]*)\): \"(?P<name>[^\"]*)\"")


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.function} ({self.file}:{self.line})"


@dataclass(frozen=True)
class RankStack:
    rank: str
    pid: int | None
    kind: StackKind
    where: str
    """The innermost frames that decided the kind, innermost first: 'a <- b <- c'."""
    text: str
    state: StackState = StackState.UNKNOWN
    what: str = ""
    """The place in words ('inductor compile, cc1plus child'); why there is no stack when unreadable."""
    source: str = ""
    """Where the deciding frame lives upstream (stacks.toml `source`)."""
    held: str | None = None
    """The process's state when nothing in it runs: stopped, tracing-stop, frozen."""
    child: bool = False
    """The deciding row needs a live compiler child, and one was alive: the work is in the child."""
    still: bool = False
    """No counter showed any life since the previous sample (or since the quiet stretch began): set
    by the tracker (kit/logs/tracker.py `observe_stacks`), which reads the counters."""

    @property
    def standing_in_work(self) -> bool:
        """At a place of work in this process (a loader, a tokenizer) while nothing showed life: the
        place alone is no progress (a read stalled on a dead mount, a sleep). A compile whose work is
        in a compiler child always works: the child's own counters may be hidden."""
        return self.held is None and self.state is StackState.WORKING and self.still and not self.child

    @property
    def word(self) -> str:
        """The state shown in rows: 'standing' for a place of work while no counter moved."""
        return STANDING if self.standing_in_work else self.state.value

    @property
    def idle(self) -> bool:
        """Not moving: waiting, spinning or sleeping, or held (stopped, frozen) whatever it shows, or
        standing at a place of work while no counter moved."""
        return self.held is not None or self.state in IDLE or self.standing_in_work

    @property
    def working(self) -> bool:
        return self.held is None and self.state is StackState.WORKING and not self.standing_in_work

    def signature(self) -> tuple[str, str, str | None]:
        """What must stay equal between two samples for the rank to have stood still."""
        return (self.kind.value, self.where, self.held)

    def describe(self) -> str:
        """'TP0 working: inductor compile, cc1plus child'; 'TP1 stopped (waiting: ...)'."""
        if self.state is StackState.UNREADABLE:
            return f"{self.rank} stack unreadable: {self.what or self.where}"
        verb = "compiling" if self.working and self.kind is StackKind.COMPILE else self.state.value
        verb = "standing, no counter moving, at" if self.standing_in_work else verb
        said = f"{verb}: {self.what or self.kind.value}" + (f" ({self.where})" if self.where else "")
        return f"{self.rank} {self.held} ({said})" if self.held else f"{self.rank} {said}"


def main_thread(dump: str) -> tuple[list[Frame], str | None]:
    """Frames of the MainThread (else the first thread), innermost first, and py-spy's word for
    the thread (active, idle)."""
    threads: list[tuple[str, str, list[Frame]]] = []
    for line in dump.splitlines():
        thread = _THREAD.match(line)
        if thread:
            threads.append((thread.group("name"), thread.group("state"), []))
            continue
        frame = _FRAME.match(line)
        if frame and threads:
            threads[-1][2].append(Frame(frame.group("func"), frame.group("file"), int(frame.group("line"))))
    for name, state, frames in threads:
        if name == "MainThread":
            return frames, state
    return (threads[0][2], threads[0][1]) if threads else ([], None)


def main_thread_frames(dump: str) -> list[Frame]:
    """Frames of the MainThread (else the first thread), innermost first, from `py-spy dump` text."""
    return main_thread(dump)[0]


def _chain(frames: Sequence[Frame], index: int) -> str:
    return " <- ".join(f.function for f in frames[index : index + 3])


def classify_stack(
    rank: str,
    dump: str,
    pid: int | None = None,
    *,
    compilers: Sequence[str] = (),
    held: str | None = None,
    rules: Sequence[FrameRule] | None = None,
) -> RankStack:
    """Classify one rank's dump. `compilers`: live compiler children of its process (their names);
    `held`: its process state (psutil's word): kept when it cannot run (stopped, tracing-stop,
    frozen); "sleeping" or "disk-sleep" also makes frames no row knows *sleeping*, as py-spy's
    "idle" does (from the host, across PID namespaces, py-spy calls every thread active)."""
    resting = held in ("sleeping", "disk-sleep")
    held = held if held in HELD_STATES else None
    frames, thread_state = main_thread(dump)
    if not frames:
        first = dump.strip().splitlines()[0] if dump.strip() else "no stack"
        return RankStack(
            rank, pid, StackKind.UNAVAILABLE, first, dump, StackState.UNREADABLE, first, held=held
        )
    table = default_rules() if rules is None else rules
    for index, frame in enumerate(frames):
        for rule in table:
            if not rule.fits(frame) or (rule.child == "compiler" and not compilers):
                continue
            what = rule.what
            if rule.child == "compiler":
                caller = next(
                    (
                        outer.what
                        for later in frames[index + 1 :]
                        for outer in table
                        if outer.kind is StackKind.COMPILE and outer.child is None and outer.fits(later)
                    ),
                    "a compile",
                )
                what = f"{caller}, {' '.join(sorted(set(compilers)))} child"
            return RankStack(
                rank,
                pid,
                rule.kind,
                _chain(frames, index),
                dump,
                rule.state,
                what,
                rule.source,
                held,
                child=rule.child == "compiler",
            )
    state = StackState.SLEEPING if thread_state == "idle" or resting else StackState.UNKNOWN
    return RankStack(rank, pid, StackKind.OTHER, _chain(frames, 0), dump, state, "", "", held)


_WAITING = (StackKind.RENDEZVOUS, StackKind.COLLECTIVE, StackKind.RECV)


@dataclass(frozen=True)
class HangExplanation:
    waiting: tuple[RankStack, ...]
    """Ranks blocked in the rendezvous or a collective: they wait for peers."""
    missing: tuple[RankStack, ...]
    """Ranks elsewhere while others wait: the peers they wait for."""
    other: tuple[RankStack, ...]


def explain_hang(stacks: Mapping[str, RankStack]) -> HangExplanation:
    """A rank held (stopped, frozen) while others wait for peers is missing, wherever its stack sits:
    it cannot join what they wait in."""
    ranks = list(stacks.values())
    waiting = tuple(s for s in ranks if s.kind in _WAITING and s.held is None)
    known = [s for s in ranks if s.kind is not StackKind.UNAVAILABLE or s.held]
    missing = tuple(s for s in known if s not in waiting) if waiting else ()
    other = tuple(s for s in ranks if s not in waiting and s not in missing)
    return HangExplanation(waiting, missing, other)


def rank_of_process(cmdline: str) -> str | None:
    """'sglang::scheduler_TP1' -> 'TP1'; 'sglang::scheduler_DP0_TP1' -> 'DP0 TP1'; else None."""
    match = re.match(r"sglang::scheduler_?(\S*)", cmdline.strip())
    if not match:
        return None
    return match.group(1).replace("_", " ") or "TP0"


# -- stacks over time: what decides a hang ----------------------------------------------------------

STACK_EVERY_S = 10.0  # at most one dump per rank this often, and only while a stage is quiet


@dataclass(frozen=True)
class StackSample:
    """Every rank's stack at `t` (source clock), or why none could be read (`unreadable`)."""

    t: float
    ranks: tuple[RankStack, ...] = ()
    unreadable: str | None = None

    @property
    def readable(self) -> bool:
        return (
            self.unreadable is None
            and bool(self.ranks)
            and all(r.state is not StackState.UNREADABLE for r in self.ranks)
        )

    def working(self) -> tuple[RankStack, ...]:
        return tuple(r for r in self.ranks if r.working)

    def why_unreadable(self) -> str:
        if self.unreadable:
            return self.unreadable
        if not self.ranks:
            return "no scheduler process found to read"
        bad = [r for r in self.ranks if r.state is StackState.UNREADABLE]
        return "; ".join(f"{r.rank}: {r.what or r.where}" for r in bad)


def moved(before: StackSample, after: StackSample) -> tuple[str, ...]:
    """Ranks that are working in `after`, or idle in both samples at different places (they got
    past a wait): progress read off the stacks."""
    earlier = {r.rank: r for r in before.ranks if r.state is not StackState.UNREADABLE}
    found = [r.describe() for r in after.working()]
    for rank in after.ranks:
        previous = earlier.get(rank.rank)
        if (
            previous is not None
            and rank.held is None
            and rank.state is not StackState.UNREADABLE
            and not rank.working  # idle, or standing at a place of work
            and previous.signature() != rank.signature()
        ):
            found.append(f"{rank.rank} moved: {previous.where} -> {rank.where}")
    return tuple(found)


@dataclass(frozen=True)
class StackBasis:
    """What a HUNG verdict rests on as far as stacks go."""

    complete: bool
    """Every rank idle at the same place in the last two samples (stacks confirm the hang)."""
    said: str

    @property
    def rests_on(self) -> str:
        return "stacks and counters" if self.complete else "counters only"


def stack_basis(samples: Sequence[StackSample], expected: Sequence[str] = ()) -> StackBasis:
    """Do the last two stack samples show every rank idle (waiting, spinning, sleeping, stopped or
    frozen) at the same place? Otherwise the verdict rests on the counters alone, and this says why."""
    if not samples:
        return StackBasis(False, "no stack was sampled while the stage was quiet")
    last = samples[-1]
    if not last.readable:
        return StackBasis(False, f"stacks unreadable: {last.why_unreadable()}")
    absent = [rank for rank in expected if rank not in {r.rank for r in last.ranks}]
    if absent:
        return StackBasis(False, f"no stack for {', '.join(absent)} (no process found)")
    if len(samples) < 2 or not samples[-2].readable:
        return StackBasis(False, "only one readable stack sample before the window ended")
    unknown = [r for r in last.ranks if not r.idle]
    if unknown:
        return StackBasis(
            False, "stacks the table does not call idle: " + "; ".join(r.describe() for r in unknown)
        )
    before = {r.rank: r.signature() for r in samples[-2].ranks}
    changed = [r.rank for r in last.ranks if before.get(r.rank) != r.signature()]
    if changed:
        return StackBasis(False, f"stacks changed between the last two samples: {', '.join(changed)}")
    gap = last.t - samples[-2].t
    places = "; ".join(r.describe() for r in last.ranks)
    return StackBasis(True, f"every rank idle at the same place in two samples {gap:.0f} s apart: {places}")
