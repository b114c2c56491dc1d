"""What the tracker takes and gives: limits, activity samples, rank states, spans and verdicts.

Plain immutable values, shared by the tracker (kit/logs/tracker.py), the attempt splitter
(kit/logs/attempts.py), the offline analysis and the live watcher. Verdicts:

  READY     the server said "fired up and ready to roll".
  CRASHED   a fatal error line, or an error after which nothing progressed.
  HUNG      no new log line and no activity growth (CPU, disk reads, GPU memory) for the current
            phase's stall window (offline: the log ended with neither ready nor a crash); names the
            ranks stuck in the phase and those missing from a milestone others reached.
  DEADLINE  the current phase has lasted longer than its deadline, although something moved.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from kit.errors import ExitCode
from kit.logs.events import Milestone, Phase, Rank

# -- inputs and configuration ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StageSeconds:
    """One number of seconds per start-up stage.

    `launch` is before the first milestone (imports, argument checks); `first_token` bounds a
    client's first token after READY; the others are the phases of the same name. `autotune` (the
    FlashInfer autotune some starts run before capture) takes capture's seconds when not given.
    """

    launch: float
    init: float
    load: float
    memory: float
    capture: float
    warmup: float
    first_token: float
    autotune: float | None = None

    def of(self, stage: str) -> float:
        if stage == "autotune" and self.autotune is None:
            return float(self.capture)
        return float(getattr(self, stage))


@dataclass(frozen=True, slots=True)
class PhaseLimits:
    """How long each stage may take, and how long it may stay quiet.

    Stall windows are short in init (NCCL set-up takes seconds; a quiet minute means a peer is
    missing or a collective hangs) and long in load (a large checkpoint on slow storage).
    Log lines, disk reads, network bytes received and GPU memory growth reset the window in every
    stage; CPU time only in `cpu_counts_in`, compile-cache writes and live compilers only in
    `compile_counts_in` (kit/logs/activity.py says why).
    """

    deadline_s: StageSeconds = StageSeconds(
        launch=900, init=600, load=3600, memory=600, capture=1800, warmup=600, first_token=600
    )
    stall_window_s: StageSeconds = StageSeconds(
        launch=180, init=120, load=600, memory=180, capture=300, warmup=180, first_token=300
    )
    # Ranks that should exist (plain TP numbering). None: read them off the launch's own
    # arguments (`server_args=`), which also know DP/PP labels and which node holds which rank.
    expected_ranks: int | None = None
    cpu_busy_cores: float = 0.25  # CPU seconds per second that count as "computing"
    min_read_bytes: int = 1 << 20  # per sample
    min_net_bytes: int = 1 << 20  # per sample
    min_gpu_mem_bytes: int = 16 << 20  # per sample
    cpu_counts_in: frozenset[str] = frozenset({"launch"})
    # First runs JIT-compile kernels (Triton, flashinfer, inductor, deep_gemm) in the first forward
    # passes: autotune, capture and the server's warm-up request.
    compile_counts_in: frozenset[str] = frozenset({"autotune", "capture", "warmup"})
    min_compile_bytes: int = 1  # per sample: any growth of the compile caches is a compile
    # A sign of life (not progress): after a fatal line, this much CPU means the server still runs.
    cpu_alive_cores: float = 0.05
    crash_grace_s: float = 10.0  # a fatal line followed by no sign of life for this long is a crash
    evidence_lines: int = 6  # last lines kept per rank and overall
    # Stages whose deadline the user set (--deadline STAGE=S), not the profile: a DEADLINE says whose.
    deadlines_given: frozenset[str] = frozenset()


# -- verdicts --------------------------------------------------------------------------------


class VerdictKind(StrEnum):
    READY = "ready"
    CRASHED = "crashed"
    HUNG = "hung"
    DEADLINE = "deadline"


@dataclass(frozen=True, slots=True)
class Ready:
    at: float
    kind: VerdictKind = VerdictKind.READY
    exit_code: int = ExitCode.OK


@dataclass(frozen=True, slots=True)
class Crashed:
    """`phase_from` says how the phase is known: "milestones", "exception" (the traceback's frames
    or message, for pasted tails without milestones), "progress" (a step's progress bar, where
    neither says), or None when none tells."""

    phase: Phase | None
    evidence: tuple[str, ...]
    exception: str | None
    rank: str | None = None
    phase_from: str | None = None
    kind: VerdictKind = VerdictKind.CRASHED
    exit_code: int = ExitCode.FAILED


@dataclass(frozen=True, slots=True)
class Hung:
    phase: Phase | None
    stuck_ranks: tuple[str, ...]
    missing_ranks: tuple[str, ...]
    evidence: tuple[str, ...]
    quiet_for_s: float
    stacks_confirm: bool = False
    """Every rank idle at the same place in the last two stack samples (kit/logs/stacks.py)."""
    basis: str = ""
    """What the verdict rests on beyond the counters: the stacks' word, or why they could not say."""
    conclusive: str = ""
    """The server's own word that decides without a quiet stretch (a proxy taking its warm-up
    requests; probes unanswered while it serves): what it is, in words; no stacks are needed."""
    phase_from: str | None = None
    """How the phase is known: "milestones", or for an attempt that printed none "serving" (the
    watchdog's stuck-batch dump), "progress" (a step's bar), "nccl" (NCCL's set-up lines); None."""
    kind: VerdictKind = VerdictKind.HUNG
    exit_code: int = ExitCode.HUNG


@dataclass(frozen=True, slots=True)
class Deadline:
    phase: Phase | None
    limit_s: float
    elapsed_s: float
    kind: VerdictKind = VerdictKind.DEADLINE
    exit_code: int = ExitCode.DEADLINE


Verdict = Ready | Crashed | Hung | Deadline


# -- state -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RankState:
    """Where one process is. `effective` also counts rank-0-only lines its TP rank 0 printed."""

    rank: Rank | None
    milestone: Milestone | None = None
    effective: Milestone | None = None
    phase: Phase | None = None
    phase_since: float = 0.0
    last_t: float = 0.0
    last_time: datetime | None = None
    evidence: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return "main" if self.rank is None else self.rank.label


@dataclass(frozen=True, slots=True)
class PhaseSpan:
    """One stretch of one rank in one phase; `end` is None while it lasts."""

    rank: str
    phase: Phase
    start: float
    end: float | None = None

    def elapsed(self, now: float) -> float:
        return (self.end if self.end is not None else now) - self.start


@dataclass(frozen=True, slots=True)
class MissingRanks:
    """Ranks that never printed `milestone` although others did. `never_seen` are those that
    printed nothing at all (known only from the launch's arguments or `expected_ranks`)."""

    milestone: Milestone
    ranks: tuple[str, ...]
    never_seen: tuple[str, ...] = ()
