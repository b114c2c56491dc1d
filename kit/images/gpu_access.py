"""How a container gets the host's GPUs on this engine, decided from what `docker info` says.

Three ways exist, and `docker info` shows only some of them:

- the NVIDIA runtime registered with the engine: `Runtimes` has `nvidia` (`nvidia-ctk runtime
  configure`);
- the engine's built-in NVIDIA device driver: it answers `docker run --gpus all`, i.e. a
  DeviceRequest with the `gpu` capability, whenever `nvidia-container-runtime-hook` is on the
  engine's PATH, with no runtime registered. `docker info` does not show it; only a start tells;
- CDI (Engine 25+): `CDISpecDirs` lists where the engine reads specs (an empty list: CDI is off),
  and Engine 28.2+ lists `DiscoveredDevices` (`nvidia.com/gpu=0`, ...). A DeviceRequest with
  driver `cdi` and `nvidia.com/gpu=all` asks for every GPU. Hosts set up with the toolkit's base
  package only (CDI, no hook) have nothing else.

`plan` (pure) orders the ways worth trying, each with the evidence for it; the adapter (kit.images.
verify.run_probe) tries them in that order, and the first container that starts wins. A refusal is
evidence too: it is kept, so a report says why no GPU reached the container.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

GpuMode = Literal["auto", "all", "none"]
How = Literal["gpu-request", "cdi", "nvidia-runtime"]

DESCRIBE: dict[str, str] = {
    "gpu-request": "a GPU device request (docker run --gpus all)",
    "cdi": "CDI device nvidia.com/gpu=all",
    "nvidia-runtime": "the nvidia runtime with NVIDIA_VISIBLE_DEVICES=all",
}


@dataclass(frozen=True)
class GpuPlan:
    how: How
    evidence: str
    """Why this way is tried, from `docker info`."""
    known: bool
    """The engine says this way exists (else it is a trial that only a start can answer)."""

    def container_kwargs(self) -> dict[str, Any]:
        """What docker's containers.create needs for this way."""
        from docker.types import DeviceRequest

        if self.how == "cdi":
            return {"device_requests": [DeviceRequest(driver="cdi", device_ids=["nvidia.com/gpu=all"])]}
        if self.how == "nvidia-runtime":
            return {"runtime": "nvidia", "environment": {"NVIDIA_VISIBLE_DEVICES": "all"}}
        return {"device_requests": [DeviceRequest(count=-1, capabilities=[["gpu"]])]}


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
    """The way that worked (GpuPlan.how), when granted."""
    why: str = ""
    """One line: how the GPUs were given (with the evidence), or why none were."""
    attempts: tuple[Attempt, ...] = ()
    """Ways the engine refused, in the order tried."""
    notes: tuple[str, ...] = ()
    """What `docker info` ruled out, e.g. 'CDI is off on this engine'."""

    @property
    def waived(self) -> bool:
        """GPU checks were turned off on purpose (--gpus none)."""
        return self.mode == "none"

    @property
    def detail(self) -> list[str]:
        return [f"{DESCRIBE.get(a.how, a.how)}: {a.error}" for a in self.attempts] + list(self.notes)


@dataclass(frozen=True)
class Plan:
    plans: list[GpuPlan]
    notes: list[str] = field(default_factory=list)


def _cdi_gpus(info: dict) -> list[str] | None:
    """The nvidia.com/gpu CDI devices the engine discovered; None when it does not report them."""
    devices = info.get("DiscoveredDevices")
    if devices is None:
        return None
    ids = [str(d.get("ID") or "") for d in devices if (d.get("Source") or "cdi") == "cdi"]
    return sorted(i for i in ids if i.startswith("nvidia.com/gpu="))


def plan(info: dict) -> Plan:
    """The ways to try, best evidence first, from the engine's `docker info` (a dict)."""
    runtimes = set((info.get("Runtimes") or {}).keys())
    runtime = "nvidia" in runtimes or info.get("DefaultRuntime") == "nvidia"
    spec_dirs = info.get("CDISpecDirs")
    cdi_gpus = _cdi_gpus(info)
    version = info.get("ServerVersion") or "?"
    plans: list[GpuPlan] = []
    notes: list[str] = []
    if runtime:
        plans.append(GpuPlan("gpu-request", "the nvidia runtime is registered (docker info: Runtimes)", True))
    if cdi_gpus:
        shown = ", ".join(cdi_gpus[:4]) + (", ..." if len(cdi_gpus) > 4 else "")
        plans.append(GpuPlan("cdi", f"the engine discovered CDI devices {shown}", True))
    if not runtime:
        plans.append(
            GpuPlan(
                "gpu-request",
                "no nvidia runtime registered; the engine's built-in NVIDIA driver needs "
                "nvidia-container-runtime-hook on its PATH, which docker info does not show",
                False,
            )
        )
    if spec_dirs and cdi_gpus is None:
        plans.append(
            GpuPlan(
                "cdi",
                f"CDI is on (specs read from {', '.join(spec_dirs)}); "
                f"engine {version} does not list the devices it found",
                False,
            )
        )
    elif spec_dirs and not cdi_gpus:
        notes.append(
            f"CDI is on (specs read from {', '.join(spec_dirs)}) but no nvidia.com/gpu device was found"
        )
    elif spec_dirs is not None and not spec_dirs:
        notes.append("CDI is off on this engine (docker info: CDISpecDirs is empty)")
    elif spec_dirs is None:
        notes.append(f"engine {version} does not report CDI (Engine 25+ does)")
    if runtime:
        plans.append(
            GpuPlan("nvidia-runtime", "the nvidia runtime is registered (docker info: Runtimes)", True)
        )
    return Plan(plans, notes)


def granted(mode: GpuMode, chosen: GpuPlan, refused: list[Attempt], notes: list[str]) -> GpuAccess:
    evidence = chosen.evidence if chosen.known else f"{chosen.evidence}; it started"
    return GpuAccess(
        mode,
        True,
        chosen.how,
        f"{DESCRIBE[chosen.how]}: {evidence}",
        tuple(refused),
        tuple(notes),
    )


def refused(mode: GpuMode, attempts: list[Attempt], notes: list[str]) -> GpuAccess:
    """No way worked: the short reason for rows, the attempts for the report."""
    if not attempts:
        why = "no GPU: " + ("; ".join(notes) or "the engine offers no way to give a container GPUs")
    else:
        tried = ", ".join(DESCRIBE.get(a.how, a.how) for a in attempts)
        why = f"no GPU reached the container (the engine refused {tried})"
    return GpuAccess(mode, False, "", why, tuple(attempts), tuple(notes))


def not_asked(mode: GpuMode, why: str) -> GpuAccess:
    return GpuAccess(mode, False, "", why)
