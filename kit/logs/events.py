"""What a parsed SGLang log line means: milestones, phases, ranks and events.

Pure values only. The parser turns lines into `Event`s; the tracker turns events into phases and
verdicts. Nothing here reads a clock or a file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class Milestone(StrEnum):
    """A start-up step a scheduler (or the HTTP front end) announces in its log."""

    INIT_BEGIN = "init.begin"
    INIT_END = "init.end"
    LOAD_BEGIN = "load.begin"
    LOAD_END = "load.end"
    KV_READY = "kv.ready"
    AUTOTUNE_BEGIN = "autotune.begin"
    AUTOTUNE_END = "autotune.end"
    CAPTURE_BEGIN = "capture.begin"
    CAPTURE_END = "capture.end"
    HTTP_UP = "http.up"
    READY = "ready"
    ERROR = "error"


class Phase(StrEnum):
    """What a rank is busy with between two milestones."""

    INIT = "init"
    LOAD = "load"
    MEMORY = "memory"
    AUTOTUNE = "autotune"  # FlashInfer's kernel autotune between the memory pool and graph capture
    CAPTURE = "capture"
    WARMUP = "warmup"
    SERVING = "serving"


class Note(StrEnum):
    """Lines worth keeping as evidence that are not start-up steps (NCCL progress, shutdown), and
    the launch line that opens each launch attempt."""

    NCCL_VERSION = "nccl.version"
    NCCL_CONNECTED = "nccl.connected"
    NCCL_INIT_COMPLETE = "nccl.init_complete"
    NCCL_WARN = "nccl.warn"
    NCCL_TRANSPORT = "nccl.transport"
    NCCL_NET = "nccl.net"
    GLOO_CONNECTED = "gloo.connected"
    MAMBA_READY = "memory.mamba"
    SHUTDOWN = "shutdown"
    LAUNCH = "launch"  # the launcher's once-per-start line (server_args=...): a new attempt
    # A server at work (a batch, request stats, an answered request): a stretch of a serving log
    # with no start-up line in it is a server that is serving.
    SERVING = "serving"
    DIFFUSION = "server.diffusion"  # SGLang's diffusion server (multimodal_gen): no LM start-up
    SOFT_WATCHDOG = "watchdog.soft"  # SGLang's soft watchdog fired (kit/logs/soft_watchdog.py)
    # A step's own progress bar (the weight loader's shards, the graph runner's batches), its phase
    # in `kind`: where the attempt printed no milestone, the phase of a crash after it.
    PROGRESS = "progress"


# Start-up order; ERROR has no place in it. Used to compare how far ranks got.
MILESTONE_ORDER: dict[Milestone, int] = {
    m: i
    for i, m in enumerate(
        (
            Milestone.INIT_BEGIN,
            Milestone.INIT_END,
            Milestone.LOAD_BEGIN,
            Milestone.LOAD_END,
            Milestone.KV_READY,
            Milestone.AUTOTUNE_BEGIN,
            Milestone.AUTOTUNE_END,
            Milestone.CAPTURE_BEGIN,
            Milestone.CAPTURE_END,
            Milestone.HTTP_UP,
            Milestone.READY,
        )
    )
}

# Milestones each scheduler rank prints; the HTTP ones come from the main process only.
SCHEDULER_MILESTONES = frozenset(
    m for m, i in MILESTONE_ORDER.items() if i < MILESTONE_ORDER[Milestone.HTTP_UP]
)

# The phase a rank is in once it has printed a milestone. After `kv.ready` the next work is CUDA
# graph capture (or skipping it), unless the release announces FlashInfer's autotune first: its own
# begin/end lines bracket an `autotune` phase, after which capture follows. After the last capture
# the server warms up until it is ready.
_PHASE_AFTER: dict[Milestone, Phase] = {
    Milestone.INIT_BEGIN: Phase.INIT,
    Milestone.INIT_END: Phase.LOAD,
    Milestone.LOAD_BEGIN: Phase.LOAD,
    Milestone.LOAD_END: Phase.MEMORY,
    Milestone.KV_READY: Phase.CAPTURE,
    Milestone.AUTOTUNE_BEGIN: Phase.AUTOTUNE,
    Milestone.AUTOTUNE_END: Phase.CAPTURE,
    Milestone.CAPTURE_BEGIN: Phase.CAPTURE,
    Milestone.CAPTURE_END: Phase.WARMUP,
    Milestone.HTTP_UP: Phase.WARMUP,
    Milestone.READY: Phase.SERVING,
}

PHASE_ORDER: dict[Phase, int] = {p: i for i, p in enumerate(Phase)}


def phase_after(milestone: Milestone | None) -> Phase | None:
    """The phase in progress once `milestone` was the last one printed (None before any)."""
    return None if milestone is None else _PHASE_AFTER.get(milestone)


@dataclass(frozen=True, slots=True)
class Rank:
    """Which scheduler printed a line, from SGLang's ` DPn PPn TPn EPn` prefix parts."""

    tp: int | None = None
    dp: int | None = None
    pp: int | None = None
    ep: int | None = None
    # Computed once: every event asks for its rank's key, hundreds of thousands of times a log.
    _label: str = field(default="", init=False, compare=False, repr=False)
    _key: str | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        parts = [(n, v) for n, v in (("DP", self.dp), ("PP", self.pp), ("TP", self.tp)) if v is not None]
        key = " ".join(f"{n}{v}" for n, v in parts)
        label = key if self.ep is None else f"{key} EP{self.ep}".strip()
        if not parts:
            key = None if self.ep is None else f"EP{self.ep}"
        object.__setattr__(self, "_label", label or "main")
        object.__setattr__(self, "_key", key)

    @property
    def label(self) -> str:
        return self._label

    @property
    def key(self) -> str | None:
        """The process this rank names, for grouping; None is the main process (or a tp=1 scheduler).

        DP and PP replicas restart TP numbering at 0, so they are part of the key; EP is derived
        from the TP rank and is not.
        """
        return self._key

    @property
    def group(self) -> tuple[int | None, int | None]:
        """The TP group this rank belongs to (its DP and PP indices)."""
        return (self.dp, self.pp)

    @property
    def is_rank0(self) -> bool:
        """True for the rank that prints rank-0-only lines in its TP group."""
        return self.tp in (0, None)

    def sort_key(self) -> tuple[int, int, int, int]:
        return tuple(-1 if v is None else v for v in (self.dp, self.pp, self.tp, self.ep))  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class Event:
    """One interesting log line (a traceback counts as one line: where it starts).

    `milestone` is None for notes (`note` set instead). `fields` holds values read off the line
    (elapsed_s, mem_gb, avail_mem_gb, tokens, nccl_version, exception, traceback, ...); treat it as
    read-only. `rank0_only` marks lines only TP rank 0 prints in that dialect; `fatal` marks error
    lines that always end the server (as opposed to a traceback it may survive).
    """

    line_no: int
    time: datetime | None
    rank: Rank | None
    milestone: Milestone | None
    fields: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    note: Note | None = None
    dialect: str | None = None
    rank0_only: bool = False
    fatal: bool = False

    @property
    def rank_key(self) -> str | None:
        return None if self.rank is None else self.rank.key

    @property
    def rank_label(self) -> str:
        return "main" if self.rank is None else self.rank.label

    @property
    def is_error(self) -> bool:
        return self.milestone is Milestone.ERROR
