"""How a container gets the host's GPUs on this engine, and which ones: the GPU-access plan.

Three ways exist, and `docker info` shows only some of them:

- the NVIDIA runtime registered with the engine: `Runtimes` has `nvidia` (`nvidia-ctk runtime
  configure`); then a GPU device request works, and so does the runtime itself;
- the engine's built-in NVIDIA device driver: it answers a DeviceRequest with the `gpu` capability
  (`docker run --gpus`) whenever `nvidia-container-runtime-hook` is on the engine's PATH, with no
  runtime registered. `docker info` does not show it; only a start tells;
- CDI (Engine 25+): devices named `nvidia.com/gpu=N` (kit.runtime.host.cdi says which exist).
  Hosts set up with the toolkit's base package only (CDI, no hook) have nothing else.

`gpu_plan` (pure) orders the ways worth trying, each with its evidence; `kit image verify`, `kit up`
and preflight try them in that order and the first container that starts wins (renders take the
first). `--gpus 0,1,2,3` or KIT_GPUS chooses devices (NVML indices, as nvidia-smi numbers them, or
UUIDs); without a choice a launch of N GPUs gets the first N, as `docker run --gpus N` does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kit.errors import InputError
from kit.runtime.host.cdi import KIND, CdiAnswer
from kit.runtime.host.engine import EngineFacts
from kit.spec import LaunchSpec

How = Literal["gpu-request", "cdi", "nvidia-runtime"]
ENV_GPUS = "KIT_GPUS"
"""The variable that chooses GPUs where no --gpus is given ('0,1,2,3')."""

_DEVICE = re.compile(r"^(\d+|(GPU|MIG)-[0-9A-Za-z-]+)$")


@dataclass(frozen=True)
class GpuWay:
    how: How
    evidence: str
    """Why this way is tried, from the engine's facts."""
    known: bool
    """The engine says this way exists (else it is a trial that only a start can answer)."""
    count: int = -1
    """GPUs asked for; -1: every GPU of the host."""
    devices: tuple[str, ...] = ()
    """The chosen devices (NVML index or UUID); empty: the first `count`."""

    @property
    def ids(self) -> tuple[str, ...]:
        """The device ids given to the container; empty for 'every GPU'."""
        if self.devices:
            return self.devices
        return tuple(str(i) for i in range(self.count)) if self.count > 0 else ()

    @property
    def cdi_names(self) -> tuple[str, ...]:
        return tuple(f"{KIND}={i}" for i in self.ids) or (f"{KIND}=all",)

    @property
    def visible_devices(self) -> str:
        """NVIDIA_VISIBLE_DEVICES for the runtime way."""
        return ",".join(self.ids) or "all"

    @property
    def describe(self) -> str:
        if self.how == "cdi":
            shown = ", ".join(self.cdi_names[:4]) + (", ..." if len(self.cdi_names) > 4 else "")
            return f"CDI device{'s' if len(self.cdi_names) > 1 else ''} {shown}"
        if self.how == "nvidia-runtime":
            return f"the nvidia runtime with NVIDIA_VISIBLE_DEVICES={self.visible_devices}"
        if self.devices:
            return f"a GPU device request for devices {','.join(self.devices)} (docker run --gpus)"
        which = "all" if self.count < 0 else str(self.count)
        return f"a GPU device request (docker run --gpus {which})"

    def sdk_kwargs(self) -> dict[str, Any]:
        """What docker's containers.create/run needs for this way (`environment` only for the runtime)."""
        from docker.types import DeviceRequest

        if self.how == "cdi":
            return {"device_requests": [DeviceRequest(driver="cdi", device_ids=list(self.cdi_names))]}
        if self.how == "nvidia-runtime":
            return {"runtime": "nvidia", "environment": {"NVIDIA_VISIBLE_DEVICES": self.visible_devices}}
        if self.devices:
            return {"device_requests": [DeviceRequest(device_ids=list(self.devices), capabilities=[["gpu"]])]}
        return {"device_requests": [DeviceRequest(count=self.count, capabilities=[["gpu"]])]}


@dataclass(frozen=True)
class GpuPlan:
    ways: tuple[GpuWay, ...]
    notes: tuple[str, ...] = ()
    """What the facts ruled out, e.g. 'CDI is off on this engine'."""

    @property
    def first(self) -> GpuWay:
        return self.ways[0]

    @property
    def plans(self) -> tuple[GpuWay, ...]:
        """The ways (verify's older name for them)."""
        return self.ways


def gpu_plan(
    engine: EngineFacts, cdi: CdiAnswer, *, count: int = -1, devices: tuple[str, ...] = ()
) -> GpuPlan:
    """The ways to try, best evidence first (never empty: the device request is always a trial)."""
    runtime = engine.nvidia_runtime
    ways: list[GpuWay] = []
    notes: list[str] = []

    def way(how: How, evidence: str, known: bool) -> GpuWay:
        return GpuWay(how, evidence, known, count, devices)

    cdi_known: GpuWay | None = None
    cdi_trial: GpuWay | None = None
    if cdi.state != "on":
        notes.append(cdi.why)
    elif cdi.has_gpus:
        missing = [name for name in way("cdi", "", True).cdi_names if name not in cdi.devices]
        if missing:
            notes.append(f"CDI defines no {', '.join(missing)} ({cdi.why})")
        else:
            shown = ", ".join(cdi.devices[:4]) + (", ..." if len(cdi.devices) > 4 else "")
            source = (
                "the engine discovered" if cdi.devices_from == "engine" else "the engine's spec files define"
            )
            cdi_known = way("cdi", f"{source} CDI devices {shown}", True)
    elif engine.discovered_devices is not None:
        notes.append(cdi.why)  # the engine listed its devices: none is a GPU
    else:
        # CDI on, devices unknown (the engine lists none, no spec file here names one): a trial.
        cdi_trial = way("cdi", cdi.why, False)
    if runtime:
        ways.append(way("gpu-request", "the nvidia runtime is registered (docker info: Runtimes)", True))
    if cdi_known:
        ways.append(cdi_known)
    if not runtime:
        ways.append(
            way(
                "gpu-request",
                "no nvidia runtime registered; the engine's built-in NVIDIA driver needs "
                "nvidia-container-runtime-hook on its PATH, which docker info does not show",
                False,
            )
        )
    if cdi_trial:
        ways.append(cdi_trial)
    if runtime:
        ways.append(way("nvidia-runtime", "the nvidia runtime is registered (docker info: Runtimes)", True))
    return GpuPlan(tuple(ways), tuple(n for n in notes if n))


# -- which GPUs ------------------------------------------------------------------------------------


def parse_gpus(text: str, field: str = "--gpus") -> tuple[str, ...]:
    """'0,1,2,3' (NVML indices) or GPU UUIDs, comma-separated; 'all' is no choice (empty)."""
    items = [item.strip() for item in text.split(",")]
    if [i.lower() for i in items] == ["all"]:
        return ()
    fix = "a comma-separated list of GPU indices or UUIDs, e.g. --gpus 0,1,2,3"
    for item in items:
        if not _DEVICE.match(item):
            raise InputError(field, f"'{item}' is not a GPU index or UUID", fix)
    if len(set(items)) != len(items):
        raise InputError(field, f"'{text}' names a GPU twice", fix)
    return tuple(items)


def choose_gpus(
    flag: str | None, count: int, *, target: str, env: Mapping[str, str] | None = None, strict: bool = True
) -> tuple[str, ...]:
    """The devices a launch of COUNT GPUs uses: --gpus, else KIT_GPUS, else none chosen (empty).

    A CPU launch (count 0) refuses --gpus and ignores KIT_GPUS. Too few devices is an InputError;
    more than COUNT is one too unless strict=False, which takes the first COUNT (preflight's --tp)."""
    env = os.environ if env is None else env
    field, text = ("--gpus", flag) if flag is not None else (ENV_GPUS, env.get(ENV_GPUS, "").strip() or None)
    if text is None:
        return ()
    if count == 0:
        if flag is not None:
            raise InputError("--gpus", f"{target} runs on CPU", "drop --gpus")
        return ()
    devices = parse_gpus(text, field)
    if not devices:
        return ()
    if len(devices) < count or (strict and len(devices) > count):
        raise InputError(
            field,
            f"names {len(devices)} GPU(s); {target} uses {count}",
            f"name exactly {count}, e.g. {','.join(str(i) for i in range(count))}",
        )
    return devices[:count]


def with_gpus(spec: LaunchSpec, flag: str | None, env: Mapping[str, str] | None = None) -> LaunchSpec:
    """SPEC with the GPUs --gpus (FLAG), else KIT_GPUS, chooses (unchanged when none are chosen)."""
    devices = choose_gpus(flag, spec.gpus, target=spec.target, env=env)
    return spec.model_copy(update={"gpu_devices": devices}) if devices else spec


# -- what a container was given ----------------------------------------------------------------------


def way_of_container(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """How an existing container got GPUs (its HostConfig): {'how', 'gpus', 'devices'}; gpus -1 = all."""
    host = attrs.get("HostConfig") or {}
    env = dict(item.partition("=")[::2] for item in (attrs.get("Config") or {}).get("Env") or [])
    for request in host.get("DeviceRequests") or []:
        ids = [str(i) for i in request.get("DeviceIDs") or []]
        if request.get("Driver") == "cdi":
            names = [i for i in ids if i.startswith(f"{KIND}=")]
            if names:
                every = f"{KIND}=all" in names
                devices = [] if every else [n.split("=", 1)[1] for n in names]
                return {"how": "cdi", "gpus": -1 if every else len(devices), "devices": devices}
        elif any("gpu" in caps for caps in request.get("Capabilities") or []):
            count = int(request.get("Count") or 0)
            if ids:
                return {"how": "gpu-request", "gpus": len(ids), "devices": ids}
            return {"how": "gpu-request", "gpus": count, "devices": []}
    if host.get("Runtime") == "nvidia":
        visible = env.get("NVIDIA_VISIBLE_DEVICES", "all")
        if visible in ("", "none", "void"):
            return {"how": "nvidia-runtime", "gpus": 0, "devices": []}
        devices = [] if visible == "all" else visible.split(",")
        return {"how": "nvidia-runtime", "gpus": -1 if visible == "all" else len(devices), "devices": devices}
    return {"how": None, "gpus": 0, "devices": []}
