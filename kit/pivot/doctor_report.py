"""`kit doctor`'s report: its JSON form, what a target asks of the host, and the checks' shared base.

The checks themselves are kit/pivot/doctor_gpus.py (engine, image, NVIDIA, PCIe) and
kit/pivot/doctor_host.py (shm, memlock, disk, model cache, port); kit/pivot/doctor.py runs them.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kit.runtime.host import HostFacts
from kit.runtime.nvml import GpuDevice

DATA_FILE = Path(__file__).resolve().parent / "doctor.toml"
SCHEMA_ID = "kit-doctor/1"
Status = Literal["pass", "warn", "fail", "not-checked"]
CHECK_IDS = (
    "docker-engine",
    "image",
    "nvidia-driver",
    "container-toolkit",
    "gpu-count",
    "compute-capability",
    "gpu-busy",
    "p2p-topology",
    "pcie-acs",
    "iommu",
    "shm",
    "memlock",
    "disk",
    "model-cache",
    "port",
    "server-proxy",
)
GiB = 1 << 30


class Check(BaseModel):
    """One host check."""

    model_config = ConfigDict(extra="forbid")

    id: Literal[CHECK_IDS] = Field(description="Stable identifier; the checks come in this order.")  # type: ignore[valid-type]
    title: str
    status: Status
    summary: str = Field(description="What was found, in one line.")
    why: str | None = Field(
        default=None, description="Why it matters (warn, fail) or why it could not run (not-checked)."
    )
    fix: str | None = Field(default=None, description="What to do about a warn or a fail.")
    details: dict[str, Any] = Field(default_factory=dict, description="What was read (matrices, paths).")


class DoctorReport(BaseModel):
    """`kit doctor --json`: every check, in a fixed order, and the exit code."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["kit-doctor/1"] = Field(default=SCHEMA_ID, description="This document's format.")
    target: str | None
    image: str | None
    device: Literal["cuda", "cpu"] | None
    checks: list[Check]
    counts: dict[Status, int] = Field(description="How many checks ended in each status.")
    ok: bool = Field(description="No check failed (warnings allowed).")
    exit_code: int = Field(description="0 when ok, 1 when a check failed.")
    seconds: float


@dataclass(frozen=True)
class DoctorContext:
    """What the target asks of the host; None fields mean 'no target says' (checks adapt)."""

    target: str | None = None
    image: str | None = None
    image_ref: str | None = None
    device: str | None = None
    gpus: int = 0
    image_cuda: str | None = None
    arch_list: tuple[str, ...] = ()
    """The manifest's torch_cuda_arch_list: what the image was asked to build for (shown only)."""
    image_arches: dict[str, Any] | None = None
    """What the image's kernels hold, read inside it (kit/pivot/inimage/arches.py): torch's arch
    flags and each kernel package's cubins; None where it could not be read (image_arches_why)."""
    image_arches_why: str | None = None
    hf_repo: str | None = None
    hf_revision: str | None = None
    """The catalog's pinned commit: the snapshot the server loads (--revision, offline)."""
    model_gib: float | None = None
    model_path: str | None = None
    hf_cache: str | None = None
    port: int | None = None
    """The host port compose.yaml publishes the target's service on (the catalog's port when it has
    no such service): what `docker compose up TARGET` binds."""
    compose_port: int | None = None
    """The same, None when compose.yaml has no service for the target."""
    server_port: int | None = None
    """The catalog's server port, which `kit render docker/systemd` publish on the host as well."""
    ipc_host: bool = False
    shm_size: str | None = None
    memlock: int | None = None
    """The container's memlock ulimit from the profile (-1 unlimited), or None when it sets none."""
    gpu_devices: tuple[str, ...] = ()
    """The GPUs chosen with --gpus or KIT_GPUS (NVML indices or UUIDs); empty: any."""
    server_env: tuple[tuple[str, str], ...] = ()
    """The target's env (the container gets it on top of the Docker client's configured proxies)."""


@cache
def _data() -> dict[str, Any]:
    return tomllib.loads(DATA_FILE.read_text(encoding="utf-8"))


def _version(text: str | None) -> tuple[int, ...]:
    return tuple(int(p) for p in (text or "").split(".") if p.isdigit())


def _gib(value: int | float | None) -> str:
    """Bytes for people: '23.5 GiB', '8 MiB'."""
    if value is None:
        return "?"
    for unit, scale in (("GiB", GiB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {unit}".replace(".0 ", " ")
    return f"{value:.0f} B"


def _size_bytes(text: str | None) -> int | None:
    """Docker's size strings ('2g', '512m', '64mb') in bytes."""
    if not text:
        return None
    number = "".join(c for c in text if c.isdigit())
    unit = text[len(number) :].lower().rstrip("b")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(unit)
    return int(number) * scale if number and scale else None


def _check(id: str, title: str, status: Status, summary: str, **rest: Any) -> Check:
    return Check(id=id, title=title, status=status, summary=summary, **rest)


class ChecksBase:
    """What every check reads: the target's context and the host's facts, the GPUs narrowed to the
    chosen ones (--gpus / KIT_GPUS) when some are chosen."""

    def __init__(self, ctx: DoctorContext, facts: HostFacts):
        self.ctx = ctx
        self.facts = facts
        self.inventory = facts.nvml.inventory
        self.devices, self.unknown_devices = chosen_devices(self.inventory.devices, ctx.gpu_devices)
        self.chosen = {d.index for d in self.devices}
        self.gpus = len(self.devices)
        self.cpu_target = ctx.device == "cpu"
        self.thresholds = _data()["thresholds"]

    @property
    def which(self) -> str:
        """'GPU(s) 0,1' when chosen, else ''."""
        return f" (chosen: {','.join(self.ctx.gpu_devices)})" if self.ctx.gpu_devices else ""

    def _no_gpus(self, id: str, title: str) -> Check | None:
        """The shared 'cannot run' answers of GPU checks: a CPU target, or no GPU here."""
        if self.cpu_target:
            return _check(id, title, "not-checked", "not needed", why=f"{self.ctx.target} runs on CPU")
        if not self.gpus:
            reason = self.inventory.error or "NVML sees no GPU"
            if self.ctx.device == "cuda" and id == "nvidia-driver":
                return _check(
                    id,
                    title,
                    "fail",
                    f"no NVIDIA GPU answers ({reason})",
                    why=f"{self.ctx.target} needs {self.ctx.gpus} GPU(s)",
                    fix="run it on the GPU host (or check the driver: nvidia-smi)",
                )
            if self.ctx.device == "cuda":
                return _check(id, title, "not-checked", "no NVIDIA GPU answers", why="see nvidia-driver")
            return _check(id, title, "not-checked", "no NVIDIA GPU here", why=reason)
        return None


def chosen_devices(
    devices: tuple[GpuDevice, ...], chosen: tuple[str, ...]
) -> tuple[tuple[GpuDevice, ...], tuple[str, ...]]:
    """(the devices CHOSEN names, by NVML index or UUID; the names no device answers to).
    Nothing chosen: every device."""
    if not chosen:
        return devices, ()
    picked, unknown = [], []
    for name in chosen:
        match = next((d for d in devices if str(d.index) == name or d.uuid == name), None)
        if match is None:
            unknown.append(name)
        elif match not in picked:
            picked.append(match)
    return tuple(picked), tuple(unknown)
