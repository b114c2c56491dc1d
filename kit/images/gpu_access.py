"""How `kit image verify`'s probe container got the host's GPUs, and the evidence either way.

The plan itself (which ways exist on this engine, in which order) is the host's one GPU-access plan,
kit.runtime.host.gpus.gpu_plan, asked here for every GPU of the host; the adapter
(kit.images.verify.run_probe) tries the ways in that order, and the first container that starts
wins. A refusal is evidence too: it is kept, so a report says why no GPU reached the container.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kit.runtime.host.cdi import CdiAnswer, cdi_answer
from kit.runtime.host.engine import EngineFacts, engine_facts
from kit.runtime.host.gpus import GpuPlan as Plan
from kit.runtime.host.gpus import GpuWay, gpu_plan

GpuMode = Literal["auto", "all", "none"]
GpuPlan = GpuWay
"""One way to try (how, evidence, known); the name verify's reports and tests have always used."""


def describe(how: str) -> str:
    """A way in words, as verify asks for it: every GPU of the host."""
    return GpuWay(how, "", False).describe  # type: ignore[arg-type]


@dataclass(frozen=True)
class Attempt:
    how: str
    error: str
    """What the engine said when the container was created or started this way."""


@dataclass(frozen=True)
class GpuAccess:
    """Whether the probe's container got the host's GPUs, how, and the evidence either way."""

    mode: GpuMode
    granted: bool
    how: str = ""
    """The way that worked (GpuWay.how), when granted."""
    why: str = ""
    """One line: how the GPUs were given (with the evidence), or why none were."""
    attempts: tuple[Attempt, ...] = ()
    """Ways the engine refused, in the order tried."""
    notes: tuple[str, ...] = ()
    """What the host's facts ruled out, e.g. 'CDI is off on this engine'."""

    @property
    def waived(self) -> bool:
        """GPU checks were turned off on purpose (--gpus none)."""
        return self.mode == "none"

    @property
    def detail(self) -> list[str]:
        return [f"{describe(a.how)}: {a.error}" for a in self.attempts] + list(self.notes)


def plan(engine: EngineFacts | Mapping[str, Any], cdi: CdiAnswer | None = None) -> Plan:
    """The ways to give the probe every GPU, best evidence first (kit.runtime.host.gpus.gpu_plan).
    ENGINE is the host's EngineFacts, or a `docker info` dict (recorded shapes in tests)."""
    if not isinstance(engine, EngineFacts):
        engine = engine_facts(engine)
    return gpu_plan(engine, cdi if cdi is not None else cdi_answer(engine))


def granted(
    mode: GpuMode, chosen: GpuWay, refused: list[Attempt], notes: list[str] | tuple[str, ...]
) -> GpuAccess:
    evidence = chosen.evidence if chosen.known else f"{chosen.evidence}; it started"
    return GpuAccess(mode, True, chosen.how, f"{chosen.describe}: {evidence}", tuple(refused), tuple(notes))


def refused(mode: GpuMode, attempts: list[Attempt], notes: list[str] | tuple[str, ...]) -> GpuAccess:
    """No way worked: the short reason for rows, the attempts for the report."""
    if not attempts:
        why = "no GPU: " + ("; ".join(notes) or "the engine offers no way to give a container GPUs")
    else:
        tried = ", ".join(describe(a.how) for a in attempts)
        why = f"no GPU reached the container (the engine refused {tried})"
    return GpuAccess(mode, False, "", why, tuple(attempts), tuple(notes))


def not_asked(mode: GpuMode, why: str) -> GpuAccess:
    return GpuAccess(mode, False, "", why)
