"""Where each rank waits, read from py-spy stack dumps. Pure: text in, classification out.

A hang names two kinds of ranks: those *waiting* (in the rendezvous or a collective, for peers)
and those *missing* (elsewhere while the others wait for them). Logs alone often cannot tell them
apart (every rank printed "Init ... begin"); stacks can.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class StackKind(StrEnum):
    RENDEZVOUS = "rendezvous"  # waiting in torch.distributed's store for peers to arrive
    COLLECTIVE = "collective"  # inside a collective (all_reduce, barrier, ...) waiting for peers
    PLANTED = "planted-fault"  # the rehearsal image's test-only fault switch
    LOADING = "loading"  # reading weights
    OTHER = "other"
    UNAVAILABLE = "unavailable"  # no stack (py-spy missing, no SYS_PTRACE, process gone)


# First matching rule wins, looking at frames from the innermost outwards. Function names come
# from torch.distributed, NCCL bindings and the kit's fault switch.
_RULES: tuple[tuple[StackKind, tuple[str, ...]], ...] = (
    (StackKind.PLANTED, ("kit_fault_",)),
    (
        StackKind.RENDEZVOUS,
        (
            "_create_c10d_store",
            "_tcp_rendezvous_handler",
            "_env_rendezvous_handler",
            "rendezvous",
            "TCPStore",
            "_store_based_barrier",
        ),
    ),
    (
        StackKind.COLLECTIVE,
        (
            "all_reduce",
            "all_gather",
            "broadcast",
            "barrier",
            "reduce_scatter",
            "all_to_all",
            "ncclAllReduce",
            "ncclCommInitRank",
            "pynccl",
            "wait_tensor",
        ),
    ),
    (StackKind.LOADING, ("safetensors", "load_weights", "weights_iterator", "load_model")),
)
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


def main_thread_frames(dump: str) -> list[Frame]:
    """Frames of the MainThread (else the first thread), innermost first, from `py-spy dump` text."""
    threads: list[tuple[str, list[Frame]]] = []
    for line in dump.splitlines():
        thread = _THREAD.match(line)
        if thread:
            threads.append((thread.group("name"), []))
            continue
        frame = _FRAME.match(line)
        if frame and threads:
            threads[-1][1].append(Frame(frame.group("func"), frame.group("file"), int(frame.group("line"))))
    for name, frames in threads:
        if name == "MainThread":
            return frames
    return threads[0][1] if threads else []


def classify_stack(rank: str, dump: str, pid: int | None = None) -> RankStack:
    frames = main_thread_frames(dump)
    if not frames:
        return RankStack(
            rank, pid, StackKind.UNAVAILABLE, dump.strip().splitlines()[0] if dump.strip() else "", dump
        )
    for kind, needles in _RULES:
        for index, frame in enumerate(frames):
            if any(needle in frame.function or needle in frame.file for needle in needles):
                chain = " <- ".join(f.function for f in frames[index : index + 3])
                return RankStack(rank, pid, kind, chain, dump)
    return RankStack(rank, pid, StackKind.OTHER, " <- ".join(f.function for f in frames[:3]), dump)


_WAITING = (StackKind.RENDEZVOUS, StackKind.COLLECTIVE)


@dataclass(frozen=True)
class HangExplanation:
    waiting: tuple[RankStack, ...]
    """Ranks blocked in the rendezvous or a collective: they wait for peers."""
    missing: tuple[RankStack, ...]
    """Ranks elsewhere while others wait: the peers they wait for."""
    other: tuple[RankStack, ...]


def explain_hang(stacks: Mapping[str, RankStack]) -> HangExplanation:
    ranks = list(stacks.values())
    waiting = tuple(s for s in ranks if s.kind in _WAITING)
    known = [s for s in ranks if s.kind is not StackKind.UNAVAILABLE]
    missing = tuple(s for s in known if s.kind not in _WAITING) if waiting else ()
    other = tuple(s for s in ranks if s not in waiting and s not in missing)
    return HangExplanation(waiting, missing, other)


def rank_of_process(cmdline: str) -> str | None:
    """'sglang::scheduler_TP1' -> 'TP1'; 'sglang::scheduler_DP0_TP1' -> 'DP0 TP1'; else None."""
    match = re.match(r"sglang::scheduler_?(\S*)", cmdline.strip())
    if not match:
        return None
    return match.group(1).replace("_", " ") or "TP0"
