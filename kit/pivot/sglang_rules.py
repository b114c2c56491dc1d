"""SGLang's own rules for bisect: a change that changes nothing the server would do is skipped.

The rules are data (`[[skip]]` in kit/pivot/ladder.toml), each read from SGLang's own code and
cited there. A rule holds when every condition of its `when` holds over the launch's facts; a fact
the host cannot tell (NVLink without NVML) never makes a condition hold, so the change runs.

    facts = launch_facts(spec, nvlink=gpu_nvlink(spec.ranks))   # the adapter reads NVML
    skip = sglang_skip("no-custom-all-reduce", facts)             # Skip(why, source) or None (pure)
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from kit.spec import LaunchSpec

LADDER_FILE = Path(__file__).resolve().parent / "ladder.toml"
CONDITIONS = ("device", "tp_in", "tp_not_in", "tp_above", "nvlink", "env_unset", "flags_absent")


@dataclass(frozen=True)
class LaunchFacts:
    """What SGLang's rules look at: the launch, and the host's GPU links."""

    device: str
    tp: int
    env: dict[str, str] = field(default_factory=dict)
    """The launch's own environment (the profile's)."""
    flags: tuple[str, ...] = ()
    """The launch's flags as written (`--enable-symm-mem`, ...)."""
    nvlink: bool | None = None
    """Every pair of the TP group's GPUs joined by NVLink (NVML); None where it cannot be told."""


@dataclass(frozen=True)
class Rule:
    change: str
    when: dict[str, Any]
    why: str
    source: str


@dataclass(frozen=True)
class Skip:
    """A change SGLang's own rules make a no-op here: why, and where SGLang does it."""

    why: str
    source: str

    @property
    def detail(self) -> str:
        return f"{self.why} ({self.source})"


@cache
def load_rules() -> tuple[Rule, ...]:
    data = tomllib.loads(LADDER_FILE.read_text(encoding="utf-8"))
    rules = []
    for raw in data.get("skip", ()):
        unknown = set(raw["when"]) - set(CONDITIONS)
        if unknown:
            raise ValueError(f"ladder.toml: a skip rule for {raw['change']} has unknown conditions {unknown}")
        rules.append(Rule(raw["change"], dict(raw["when"]), raw["why"], raw["source"]))
    return tuple(rules)


def holds(when: dict[str, Any], facts: LaunchFacts) -> bool:
    """Every condition holds (pure). A fact that is unknown (None) holds for no condition."""
    tests = {
        "device": lambda v: facts.device == v,
        "tp_in": lambda v: facts.tp in v,
        "tp_not_in": lambda v: facts.tp not in v,
        "tp_above": lambda v: facts.tp > v,
        "nvlink": lambda v: facts.nvlink is not None and facts.nvlink == v,
        "env_unset": lambda v: v not in facts.env,
        "flags_absent": lambda v: not any(flag in facts.flags for flag in v),
    }
    return all(tests[key](value) for key, value in when.items())


def sglang_skip(change: str, facts: LaunchFacts, rules: tuple[Rule, ...] | None = None) -> Skip | None:
    """The first rule for CHANGE that holds over FACTS, as a Skip; None: the change does something."""
    for rule in load_rules() if rules is None else rules:
        if rule.change == change and holds(rule.when, facts):
            return Skip(rule.why.format(tp=facts.tp, device=facts.device), rule.source)
    return None


def launch_facts(spec: LaunchSpec, *, nvlink: bool | None) -> LaunchFacts:
    flags = tuple(arg.split("=", 1)[0] for arg in spec.argv if arg.startswith("--"))
    return LaunchFacts(
        spec.device, spec.ranks, dict(spec.env), flags, nvlink if spec.device == "cuda" else None
    )


def gpu_nvlink(ranks: int, lib: Any | None = None) -> bool | None:
    """Whether GPUs 0..RANKS-1 (the ones a container of RANKS GPUs gets) are NVLink-connected pairwise,
    from NVML's topology (kit/runtime/nvml.py); None where NVML cannot tell (no driver, too few GPUs)."""
    from kit.runtime.nvml import open_nvml

    gpus = open_nvml(lib)
    if gpus is None:
        return None
    try:
        topology = gpus.topology()
    except Exception:  # a GPU lost mid-read: unknown, and the change runs
        return None
    finally:
        gpus.close()
    pairs = [(str(i), str(j)) for i in range(ranks) for j in range(ranks) if i != j]
    words = [topology.get(i, {}).get(j) for i, j in pairs]
    if not pairs or any(word is None for word in words):
        return None
    return all(word.startswith("NV") for word in words)
