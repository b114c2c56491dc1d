"""The LaunchSpec: everything needed to start one target, built once from catalog + image + dialect.

Every renderer (sglang argv, docker, compose, systemd, Kubernetes) and the runtime take a LaunchSpec;
nothing else builds an argv. It holds no secrets: `pass_env` names variables (HF_TOKEN) that are
read from the caller's environment at run time and never written anywhere.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

# The start-up phases with a deadline each, in order; their sum is the whole start-up budget
# (Compose's start_period, systemd's TimeoutStartSec, the smoke's budget). FlashInfer's autotune
# runs between the memory pool and capture (its own deadline, kit/catalog/_schema.py).
PHASES = ("init", "load", "memory", "autotune", "capture", "warmup")
# The longest a phase deadline, stall window, budget or timeout may be: one bound for the catalog,
# the CLI and the limits parser (a larger value, inf or nan, is a typo, not a plan).
MAX_SECONDS = 7 * 24 * 3600.0
CONTAINER_HF_CACHE = "/root/.cache/huggingface"
# Seconds as digits: `nan`, `inf`, `true`, `1_000` and `0x10` are refused, not read as float() reads them.
_SECONDS_WRITTEN = re.compile(r"[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)(e[+-]?[0-9]+)?")


def seconds_written(text: str) -> float | None:
    """TEXT as a number written in digits (`600`, `1.5`, `.5`, `2e3`; it may still overflow to inf),
    else None: the one reading of seconds for the CLI's options and the NAME=SECONDS limits."""
    text = text.strip()
    return float(text) if _SECONDS_WRITTEN.fullmatch(text.lower()) else None


class Timing(BaseModel):
    """Per-phase limits in seconds: a deadline for the whole phase, a stall window for silence."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    deadlines: dict[str, float]
    """Keys: init, load, memory, autotune, capture, warmup, first_token."""
    stall_windows: dict[str, float]
    """Keys: init, load, memory, autotune, capture, warmup. No log line and no activity this long = HUNG."""
    cpu_progress_in: tuple[str, ...] = ("launch",)
    """Stages where CPU time counts as activity (elsewhere a spinning collective would look busy)."""


class LaunchSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str
    model: str
    profile: str
    image: str
    """The image manifest's name, e.g. sglang-0.5.23-cpu."""
    image_ref: str
    """The image reference to run, e.g. kit/sglang:sglang-0.5.23-cpu."""
    dialect: str
    device: Literal["cuda", "cpu"]
    gpus: int
    """GPUs requested (0 on CPU)."""
    gpu_devices: tuple[str, ...] = ()
    """Which host GPUs (NVML indices or UUIDs, --gpus / KIT_GPUS), as many as `gpus`; empty: the
    engine's first `gpus` (kit.runtime.host.gpus.choose_gpus)."""
    ranks: int
    """Scheduler processes that log start-up milestones (tp x pp x dp)."""
    argv: tuple[str, ...]
    """The full server command, e.g. ('python', '-m', 'sglang.launch_server', '--model-path', ...)."""
    env: dict[str, str]
    pass_env: tuple[str, ...] = ("HF_TOKEN",)
    port: int = 30000
    model_path: str
    hf_cache: str | None = None
    """Host folder or named volume mounted at CONTAINER_HF_CACHE; None mounts nothing."""
    hf_repo: str | None = None
    """The hub repository the model is fetched from into hf_cache; None: the model is inside the image."""
    hf_revision: str | None = None
    """The pinned hub commit of hf_repo (what `kit model fetch` downloads and SGLang loads)."""
    publish_address: str = "127.0.0.1"
    """Host address the port is published on; beyond loopback only with an API key."""
    api_key_env: str | None = None
    """Name of the variable holding the server's API key; the value is read at run time, never stored."""
    ipc_host: bool = False
    shm_size: str | None = None
    ulimits: dict[str, int] = {}
    cap_add: tuple[str, ...] = ()
    labels: dict[str, str] = {}
    timing: Timing
    smoke: dict[str, Any] = {}
    """The profile's smoke section (kit.catalog Smoke, as data): what `kit smoke` and tests/smoke ask
    of the server after READY."""
    health_path: str = "/health_generate"
    notes: tuple[str, ...] = ()
    """Facts about how this spec was made that a person should see (renames applied, emulation)."""


def is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


def client_host(address: str) -> str:
    """Where a client on this machine reaches a port published on `address` (URL host form)."""
    ip = ipaddress.ip_address(address)
    if ip.is_loopback or ip.is_unspecified:
        return "127.0.0.1" if ip.version == 4 or ip.is_unspecified else "[::1]"
    return f"[{address}]" if ip.version == 6 else address
