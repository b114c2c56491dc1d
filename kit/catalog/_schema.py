"""The catalog's schema: one file per model holding its facts, its profiles and its targets.

Profiles state intent (tensor parallel 4, MTP with 3 steps, keep the radix cache); they never name a
flag. A dialect (kit/dialects/) turns intent into the flags and env of one SGLang release.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kit.spec import MAX_SECONDS

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Positive = Annotated[int, Field(gt=0)]
Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelFacts(_Strict):
    """Public facts about a checkpoint: numbers for the memory-fit check, `sources` for where each is from."""

    name: str
    hf_id: str | None = None
    """The Hugging Face repository, e.g. Qwen/Qwen3.5-122B-A10B (None for a local-only model)."""
    path: str
    """What --model-path gets: the HF id (downloaded into the HF cache) or a folder in the image."""
    revision: str | None = None
    """The hub commit (40 hex digits) `kit model fetch` downloads and SGLang loads (--revision)."""
    hf_files: tuple[str, ...] = ("*.json", "*.safetensors", "*.txt", "*.jinja", "*.model", "*.tiktoken")
    """Patterns of the repository files a launch needs: config, tokenizer, weights (no README, no GGUF)."""
    architecture: str
    """config.json architectures[0]; SGLang's model-specific rules key on it."""
    model_type: str
    hybrid: Literal["gdn"] | None = None
    """'gdn': hybrid Gated-DeltaNet + attention (Qwen3.5, Qwen3-Next): mamba cache rules apply."""
    dtype: Literal["bfloat16", "float16", "float32", "fp8"] = "bfloat16"
    size_on_disk_gib: Annotated[float, Field(gt=0)]
    layers: Positive
    full_attention_layers: Positive | None = None
    """Layers that keep a KV cache (the rest are linear attention with a fixed-size state)."""
    hidden_size: Positive
    attention_heads: Positive
    kv_heads: Positive
    head_dim: Positive
    linear_key_heads: Positive | None = None
    linear_value_heads: Positive | None = None
    linear_key_head_dim: Positive | None = None
    linear_value_head_dim: Positive | None = None
    linear_conv_kernel: Positive | None = None
    experts: int = Field(0, ge=0)
    experts_per_token: int = Field(0, ge=0)
    shared_experts: int = Field(0, ge=0)
    mtp_layers: int = Field(0, ge=0)
    max_context_length: Positive
    config_json: str | None = None
    """The model's config.json, beside this file; `kit check` hands it to SGLang's parser."""
    sources: dict[str, str] = {}
    """fact -> where it was read, or 'estimate: ...' with the reasoning."""

    @field_validator("revision")
    @classmethod
    def _commit(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9a-f]{40}", value):
            raise ValueError("a commit hash of 40 hex digits (a branch name moves; a commit does not)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ModelFacts:
        if self.kv_heads > self.attention_heads:
            raise ValueError("kv_heads: more KV heads than attention heads")
        if self.attention_heads % self.kv_heads:
            raise ValueError("kv_heads: must divide attention_heads")
        if self.full_attention_layers is not None and self.full_attention_layers > self.layers:
            raise ValueError("full_attention_layers: more than layers")
        if self.hybrid and None in (self.linear_value_heads, self.linear_key_head_dim):
            raise ValueError("hybrid: a hybrid model needs linear_value_heads and linear_key_head_dim")
        return self


class Speculative(_Strict):
    algorithm: Literal["NEXTN", "EAGLE", "EAGLE3"] = "NEXTN"
    """NEXTN: the checkpoint's own MTP head drafts (SGLang rewrites it to EAGLE)."""
    num_steps: Annotated[int, Field(gt=0, le=16)]
    eagle_topk: Annotated[int, Field(gt=0, le=16)]
    num_draft_tokens: Annotated[int, Field(gt=0, le=64)]


class Container(_Strict):
    ipc_host: bool = False
    """Share the host IPC namespace: NCCL's shared-memory transport outgrows Docker's 64 MB /dev/shm."""
    shm_size: str | None = None
    ulimits: dict[str, int] = {}
    cap_add: tuple[str, ...] = ()
    hf_cache: str | None = None
    """Host folder mounted as the container's HF cache ('~' is the invoking user's home)."""
    port: Annotated[int, Field(ge=1, le=65535)] = 30000
    publish_address: str = "127.0.0.1"
    """Host address the server port is published on. Anything but loopback needs api_key_env."""
    api_key_env: str | None = None
    """Name of the variable that holds the server's API key (SGLang --api-key); never the key itself."""
    pass_env: tuple[str, ...] = ("HF_TOKEN",)

    @field_validator("publish_address")
    @classmethod
    def _address(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(
                "an IP address such as 127.0.0.1 (this machine) or 0.0.0.0 (every interface)"
            ) from None
        return value

    @field_validator("api_key_env")
    @classmethod
    def _key_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV.match(value):
            raise ValueError(
                f"'{value}' is not an environment variable name (give the NAME of a variable holding the key)"
            )
        return value

    @field_validator("shm_size")
    @classmethod
    def _size(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[1-9][0-9]*[kmgKMG]?[bB]?", value):
            raise ValueError("a size such as 16g or 512m")
        return value

    @field_validator("pass_env")
    @classmethod
    def _env_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [v for v in value if not _ENV.match(v)]
        if bad:
            raise ValueError(f"'{bad[0]}' is not an environment variable name")
        return value


def _autotune_as_capture(data: object) -> object:
    """`autotune` (FlashInfer's autotune before capture) defaults to capture's seconds."""
    if isinstance(data, dict) and data.get("autotune") is None and "capture" in data:
        return {**data, "autotune": data["capture"]}
    return data


class Deadlines(_Strict):
    """Seconds a whole phase may take."""

    init: Seconds
    load: Seconds
    memory: Seconds
    autotune: Seconds
    """FlashInfer's autotune between the memory pool and capture; capture's deadline when absent."""
    capture: Seconds
    warmup: Seconds
    first_token: Seconds

    @model_validator(mode="before")
    @classmethod
    def _autotune_default(cls, data: object) -> object:
        return _autotune_as_capture(data)


class StallWindows(_Strict):
    """Seconds of silence (no log line, no activity) after which a phase is called hung."""

    init: Seconds
    load: Seconds
    memory: Seconds
    autotune: Seconds
    """Capture's window when absent."""
    capture: Seconds
    warmup: Seconds

    @model_validator(mode="before")
    @classmethod
    def _autotune_default(cls, data: object) -> object:
        return _autotune_as_capture(data)


Stage = Literal["launch", "init", "load", "memory", "autotune", "capture", "warmup"]


class Timing(_Strict):
    deadlines: Deadlines
    stall_windows: StallWindows
    cpu_progress_in: tuple[Stage, ...] = ("launch",)
    """Stages where CPU time counts as progress. Elsewhere only log output, disk reads, network bytes
    and GPU memory growth do: a hung collective spins a core per rank (kit/logs/activity.py)."""
    cpu_progress_why: str = "imports and argument checks before the first milestone are CPU work"

    @model_validator(mode="after")
    def _window_inside_deadline(self) -> Timing:
        for phase, window in self.stall_windows.model_dump().items():
            if window > getattr(self.deadlines, phase):
                raise ValueError(f"stall_windows.{phase}: longer than the {phase} deadline")
        return self


class Smoke(_Strict):
    """What the smoke checks ask of a started server beyond its first token (`kit smoke`, tests/smoke).

    A speculative decoder that emits wrong tokens still answers with a first token; these catch it
    after READY: the greedy answer against the non-speculative profile's, SGLang's own acceptance
    length against a floor, one structured-output request, one tool call, and a serving window.
    """

    greedy_tokens: Annotated[int, Field(gt=0, le=256)] = 16
    """Greedy (temperature 0) tokens of the fixed prompt compared token for token."""
    greedy_reference: str | None = None
    """Speculative profiles: the profile of this model whose greedy answer they must reproduce (on the
    same image and TP). Unset: 'base' where the model has a non-speculative profile of that name.
    Read only while the profile decodes speculatively (`--set speculative=none` leaves it unused)."""
    min_accept_length: Annotated[float, Field(ge=1.0, le=64)] | None = None
    """Speculative profiles: the floor for SGLang's average acceptance length (accepted draft tokens
    + 1 per verify step, so never below 1.0 when it works). Unset: 1.0."""
    simulate_accept_length: Annotated[float, Field(ge=1.0, le=64)] | None = None
    """Speculative profiles: also start the profile under SGLang's own accepted-draft simulation
    (SGLANG_SIMULATE_ACC_LEN with real draft tokens, srt/speculative/spec_utils.py in 0.5.23) at this
    acceptance length, so accepted drafts are committed even on random weights, and hold SGLang's
    reported acceptance length to it within `accept_length_tolerance`. Unset: no simulated start."""
    accept_length_tolerance: Annotated[float, Field(gt=0, le=4)] = 0.25
    """How far SGLang's reported acceptance length may lie from the simulated one."""
    greedy_tie_epsilon: Annotated[float, Field(ge=0, le=5)] = 0.05
    """Speculative profiles: a first differing greedy token is a tie, not a failure, where the reference
    run's top-1 and top-2 logprobs there lie within this many nats (bf16 rounding across the verify
    pass's shapes can flip such an argmax)."""
    serving_window_s: Annotated[float, Field(gt=0, le=600)] = 10.0
    """Seconds of back-to-back requests after the other checks; the server must still be serving."""
    tool_call_overrides: tuple[str, ...] = ()
    """--set overrides for a separate start that serves the tool call (the CPU rehearsal: its reasoning
    parser reads every random token as reasoning, and SGLang starts a tool call's grammar only after
    the reasoning ends). Empty: the tool call runs on the same server as the other checks."""


AttentionBackend = Literal[
    "auto", "triton", "flashinfer", "fa3", "fa4", "torch_native", "intel_amx", "trtllm_mha", "flex_attention"
]
MambaCache = Literal["auto", "no_buffer", "extra_buffer", "extra_buffer_lazy"]


class Profile(_Strict):
    """What a deployment wants, independent of the SGLang release that will run it."""

    description: str = ""
    tp: Annotated[int, Field(gt=0, le=64)] = 1
    nnodes: Annotated[int, Field(gt=0, le=64)] = 1
    context_length: Positive | None = None
    mem_fraction: Annotated[float, Field(gt=0, le=1)] | None = None
    max_total_tokens: Positive | None = None
    max_running_requests: Positive | None = None
    cuda_graph: bool = True
    radix_cache: bool = True
    overlap_schedule: bool = True
    """SGLang's overlap scheduler; off is --disable-overlap-schedule (0.5.14+ need it off for mamba no_buffer
    with the radix cache)."""
    attention_backend: AttentionBackend = "auto"
    """'auto' lets the dialect choose (0.5.9 needs triton on sm_120 for hybrid models), else SGLang."""
    mamba_cache: MambaCache = "auto"
    """Hybrid models' state cache strategy; 'auto' = what the dialect's rules pick, else SGLang's default."""
    speculative: Speculative | None = None
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    """How SGLang turns the model's tool-call text into OpenAI tool_calls (Qwen3.5: qwen3_coder)."""
    watchdog_timeout: Positive | None = None
    cpu_threads_bind: str | None = None
    """CPU engine only: cores per rank, '|' between ranks (SGLANG_CPU_OMP_THREADS_BIND)."""
    host: str = "0.0.0.0"
    env: dict[str, str] = {}
    extra_args: tuple[str, ...] = ()
    """Flags no intent covers yet, passed through (renamed/removed ones are still rewritten)."""
    container: Container = Container()
    timing: Timing
    smoke: Smoke = Smoke()

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [k for k in value if not _ENV.match(k)]
        if bad:
            raise ValueError(f"'{bad[0]}' is not an environment variable name")
        return value

    @field_validator("extra_args")
    @classmethod
    def _no_port_or_model(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arg in value:
            flag = arg.split("=", 1)[0]
            if flag in ("--model-path", "--model", "--port", "--host", "--tp-size", "--tp", "--device"):
                raise ValueError(f"'{flag}' is set by the profile's own keys, not extra_args")
        return value


class Target(_Strict):
    """An addressable launch: a profile of this model on an image, with the hardware it asks for."""

    profile: str
    image: str
    gpus: Annotated[int, Field(ge=0, le=64)] | Literal["tp"] = 0
    """GPUs per node; "tp": as many as the profile's TP per node, so `--set tp=N` takes N GPUs."""
    hardware: str | None = None
    """A key of kit/catalog/hardware.toml; GPU targets name one."""
    description: str = ""

    def gpus_for(self, profile: Profile) -> int:
        """GPUs per node this target takes with PROFILE (after overrides)."""
        return max(profile.tp // profile.nnodes, 1) if self.gpus == "tp" else self.gpus

    @model_validator(mode="after")
    def _gpu_targets_name_hardware(self) -> Target:
        if self.gpus and not self.hardware:
            raise ValueError("hardware: a target that asks for GPUs names its hardware")
        return self


class ModelFile(_Strict):
    """One catalog file. Profiles are kept raw here: `extends` is merged before each is checked."""

    model: ModelFacts
    profiles: dict[str, dict]
    targets: dict[str, Target] = {}

    @field_validator("profiles", "targets")
    @classmethod
    def _names(cls, value: dict) -> dict:
        bad = [k for k in value if not _NAME.match(k)]
        if bad:
            raise ValueError(f"'{bad[0]}' is not a valid name (lower case letters, digits, '.', '_', '-')")
        return value


class Hardware(_Strict):
    name: str
    capability: str
    """CUDA compute capability, e.g. '12.0' for sm_120."""
    memory_gib: Annotated[float, Field(gt=0)]
    nvlink: bool = False
    sources: dict[str, str] = {}

    @field_validator("capability")
    @classmethod
    def _capability(cls, value: str) -> str:
        if not re.fullmatch(r"\d+\.\d+", value):
            raise ValueError("a compute capability such as 12.0")
        return value
