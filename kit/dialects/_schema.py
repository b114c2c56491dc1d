"""The dialect schema: what one range of SGLang releases calls each intent, and what it demands.

A dialect file (kit/dialects/NAME.toml) holds, in order of use:
    flags       intent key -> flag, in the order the argv is written
    env         intent key -> environment variable
    defaults    what SGLang itself does when a flag is absent (facts for the rules)
    companions  'when these facts hold, also set this intent / this env' (required companions)
    renamed     old flag -> new flag (rewritten in extra_args, with a note)
    removed     flags and env vars this range dropped (dropped from the spec, with a note)
    deprecated  flags and env vars this range still takes but warns about
    rules       'when these facts hold, this launch fails (error) or degrades (warning)'
so no code holds an if-chain over versions. Every claim is checked against each release's own
parser by the conformance matrix (scripts/conformance, docs/conformance.md): an error rule names
the words SGLang refuses the launch with (`rejects`), renamed/removed/deprecated say whether the
old name is refused, warned about or ignored. A condition (`when`) is a table of fact -> value, or
fact -> [values] for any of them; every entry must hold. Facts are listed in FACTS.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Scalar = str | int | float | bool
Condition = dict[str, Scalar | list[Scalar]]

# Intent keys a flag or env var can carry (a profile's keys, flattened, plus what the image decides).
INTENTS = (
    "model_path",
    "device",
    "tp",
    "nnodes",
    "node_rank",
    "dist_init_addr",
    "attention_backend",
    "cuda_graph",
    "radix_cache",
    "max_total_tokens",
    "context_length",
    "mem_fraction",
    "max_running_requests",
    "mamba_cache",
    "speculative.algorithm",
    "speculative.num_steps",
    "speculative.eagle_topk",
    "speculative.num_draft_tokens",
    "reasoning_parser",
    "tool_call_parser",
    "overlap_schedule",
    "watchdog_timeout",
    "soft_watchdog_timeout",
    "cpu_threads_bind",
    "host",
    "port",
)
# Facts a condition may test. None is written "none" in data files.
FACTS = (
    "device",
    "capability",
    "hybrid",
    "architecture",
    "speculative",
    "speculative_algorithm",
    "speculative_tree",
    "mamba_cache",
    "radix_cache",
    "attention_backend",
    "cuda_graph",
    "overlap_schedule",
    "tp",
    "nnodes",
    "gpus",
    "multi_gpu",
    "ipc_host",
    "shm_size",
    "memlock",
    "nvlink",
)
ENV_FACT = re.compile(r"^env\.[A-Za-z_][A-Za-z0-9_]*$")


def _check_condition(when: Condition) -> Condition:
    unknown = [k for k in when if k not in FACTS and not ENV_FACT.match(k)]
    if unknown:
        raise ValueError(f"unknown fact '{unknown[0]}' (facts: {', '.join(FACTS)}, env.NAME)")
    return when


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Flag(_Strict):
    """A flag with options. A bare string in [flags] is Flag(flag=that): written as `flag VALUE`."""

    flag: str | None = None
    omit: tuple[Scalar, ...] = ()
    """Values written as no flag at all (SGLang's default). None and 'auto' are always omitted."""
    when_true: str | None = None
    when_false: str | None = None
    """Switches: written alone when the intent is true / false."""

    @model_validator(mode="after")
    def _one_form(self) -> Flag:
        if (self.flag is None) == (self.when_true is None and self.when_false is None):
            raise ValueError("give either flag, or when_true / when_false")
        for name in (self.flag, self.when_true, self.when_false):
            if name is not None and not name.startswith("--"):
                raise ValueError(f"'{name}' is not a long flag (--name)")
        return self


class Companion(_Strict):
    id: str
    when: Condition
    set: dict[str, Scalar] = {}
    """Intent keys to fill where the profile left them 'auto' (an explicit choice is never overridden)."""
    env: dict[str, str] = {}
    """Environment the launch needs (a profile's own env wins)."""
    why: str

    @field_validator("when")
    @classmethod
    def _facts(cls, value: Condition) -> Condition:
        return _check_condition(value)

    @field_validator("set")
    @classmethod
    def _intents(cls, value: dict[str, Scalar]) -> dict[str, Scalar]:
        unknown = [k for k in value if k not in INTENTS]
        if unknown:
            raise ValueError(f"unknown intent '{unknown[0]}'")
        return value


class Rule(_Strict):
    id: str
    severity: Literal["error", "warning"]
    when: Condition
    message: str
    """May name facts in braces: {architecture}."""
    fix: str
    source: str = ""
    """The release and file that show it (e.g. 'sglang 0.5.16 server_args.py _validate_mamba_no_buffer')."""
    rejects: str | None = None
    """Error rules: a regular expression for SGLang's own refusal, 'ErrorType: message' (the
    conformance matrix holds the rule to it: the rule fires exactly where SGLang says this)."""
    stage: Literal["parser", "load"] = "parser"
    """Where SGLang refuses: 'parser' (ServerArgs) or 'load' (the attention registry, at model load)."""

    @field_validator("when")
    @classmethod
    def _facts(cls, value: Condition) -> Condition:
        return _check_condition(value)

    @field_validator("rejects")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression ({exc})") from exc
        return value


class Removed(_Strict):
    flags: dict[str, str] = {}
    """flag -> why (dropped from extra_args)."""
    env: dict[str, str] = {}
    """variable -> why (dropped from the env)."""


class Deprecated(_Strict):
    """Names this range still takes but warns about (SGLang logs a deprecation or removal notice)."""

    flags: dict[str, str] = {}
    """flag -> why; a renamed flag listed here is still accepted (an alias), one not listed is refused."""
    env: dict[str, str] = {}
    """variable -> why; a removed variable listed here still draws a notice, one not listed is ignored."""


class Dialect(_Strict):
    name: str
    sglang: str
    """The releases it covers, e.g. '>=0.5.10.post1,<0.5.16'."""
    about: str
    extends: str | None = None
    flags: dict[str, str | Flag]
    env: dict[str, str] = {}
    defaults: dict[str, Scalar] = {}
    companions: tuple[Companion, ...] = ()
    renamed: dict[str, str] = {}
    removed: Removed = Removed()
    deprecated: Deprecated = Deprecated()
    rules: tuple[Rule, ...] = ()
    sources: Annotated[dict[str, str], Field(default_factory=dict)]

    @field_validator("flags", "env")
    @classmethod
    def _known_intents(cls, value: dict) -> dict:
        unknown = [k for k in value if k not in INTENTS]
        if unknown:
            raise ValueError(f"unknown intent '{unknown[0]}' (intents: {', '.join(INTENTS)})")
        return value

    @field_validator("defaults")
    @classmethod
    def _known_facts(cls, value: dict) -> dict:
        unknown = [k for k in value if k not in FACTS]
        if unknown:
            raise ValueError(f"unknown fact '{unknown[0]}' (facts: {', '.join(FACTS)})")
        return value

    @field_validator("rules")
    @classmethod
    def _errors_name_sglangs_words(cls, value: tuple[Rule, ...]) -> tuple[Rule, ...]:
        # A dialect's error rule is a claim about SGLang; pitfalls (kit/validate) are the kit's own.
        for rule in value:
            if rule.severity == "error" and not rule.rejects:
                raise ValueError(
                    f"rule '{rule.id}': an error rule names SGLang's own refusal "
                    "(rejects = a regular expression)"
                )
        return value

    def flag(self, intent: str) -> Flag | None:
        entry = self.flags.get(intent)
        return Flag(flag=entry) if isinstance(entry, str) else entry
