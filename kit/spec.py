"""The LaunchSpec: everything needed to start one target, built once from catalog + image + dialect.

Every renderer (sglang argv, docker, compose, systemd, Kubernetes) and the runtime take a LaunchSpec;
nothing else builds an argv. It holds no secrets: `pass_env` names variables (HF_TOKEN) that are
read from the caller's environment at run time and never written anywhere.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

PHASES = ("init", "load", "memory", "capture", "warmup")
DEADLINE_KEYS = (*PHASES, "first_token")
CONTAINER_HF_CACHE = "/root/.cache/huggingface"


class Timing(BaseModel):
    """Per-phase limits in seconds: a deadline for the whole phase, a stall window for silence."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    deadlines: dict[str, float]
    """Keys: init, load, memory, capture, warmup, first_token."""
    stall_windows: dict[str, float]
    """Keys: init, load, memory, capture, warmup. No log line and no activity for this long = HUNG."""
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
    ipc_host: bool = False
    shm_size: str | None = None
    ulimits: dict[str, int] = {}
    cap_add: tuple[str, ...] = ()
    labels: dict[str, str] = {}
    timing: Timing
    health_path: str = "/health_generate"
    notes: tuple[str, ...] = ()
    """Facts about how this spec was made that a person should see (renames applied, emulation)."""
