"""Intent + dialect -> flags and env. Pure: the same inputs always give the same argv, env and notes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kit.dialects._schema import Condition, Dialect

AUTO = "auto"


@dataclass(frozen=True)
class Translation:
    args: tuple[str, ...]
    """Server flags (what follows `python -m sglang.launch_server`)."""
    env: dict[str, str]
    intent: dict[str, Any]
    """The intent after companions (e.g. mamba_cache set to extra_buffer)."""
    facts: dict[str, Any]
    """What the rules see, with SGLang's own defaults filled in for 'auto'."""
    notes: tuple[str, ...]
    applied: tuple[str, ...]
    """Ids of the companions that applied."""


def same(fact: Any, wanted: Any) -> bool:
    """Equality that keeps booleans apart from numbers (TOML's true is not 1)."""
    if isinstance(fact, bool) or isinstance(wanted, bool):
        return isinstance(fact, bool) and isinstance(wanted, bool) and fact == wanted
    if fact is None:
        return wanted == "none"
    return fact == wanted


def matches(when: Condition, facts: Mapping[str, Any]) -> bool:
    for key, wanted in when.items():
        fact = facts.get(key)
        options = wanted if isinstance(wanted, list) else [wanted]
        if not any(same(fact, option) for option in options):
            return False
    return True


def facts_of(
    dialect: Dialect, intent: Mapping[str, Any], env: Mapping[str, str], context: Mapping[str, Any]
) -> dict[str, Any]:
    """Facts for conditions: the launch's own values, SGLang's defaults where the intent says 'auto'."""

    def effective(key: str) -> Any:
        value = intent.get(key)
        return dialect.defaults.get(key, value) if value in (None, AUTO) else value

    facts = dict(context)
    facts.update(
        device=intent.get("device"),
        speculative=intent.get("speculative.algorithm") is not None,
        speculative_algorithm=intent.get("speculative.algorithm"),
        speculative_tree=(intent.get("speculative.eagle_topk") or 1) > 1,
        mamba_cache=effective("mamba_cache"),
        radix_cache=intent.get("radix_cache", True),
        attention_backend=effective("attention_backend"),
        cuda_graph=intent.get("cuda_graph", True),
        overlap_schedule=intent.get("overlap_schedule", True),
        tp=intent.get("tp"),
        nnodes=intent.get("nnodes", 1),
        multi_gpu=(context.get("gpus") or 0) > 1,
    )
    facts.update({f"env.{k}": v for k, v in env.items()})
    return facts


def translate(
    dialect: Dialect,
    intent: Mapping[str, Any],
    *,
    context: Mapping[str, Any],
    profile_env: Mapping[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
) -> Translation:
    """Turn intent into flags and env for one dialect.

    context: facts that are not intent (capability, hybrid, architecture, gpus, container settings).
    profile_env: the profile's own env; it wins over a companion's env (the user said so).
    """
    intent = dict(intent)
    profile_env = dict(profile_env or {})
    notes: list[str] = []
    applied: list[str] = []
    companion_env: dict[str, str] = {}

    for companion in dialect.companions:
        facts = facts_of(dialect, intent, {**companion_env, **profile_env}, context)
        if not matches(companion.when, facts):
            continue
        applied.append(companion.id)
        # A companion fills in what the profile left to 'auto'; it never overrides an explicit choice
        # (an explicit mamba_cache=no_buffer must reach SGLang, and the rules, as written).
        fill = {k: v for k, v in companion.set.items() if intent.get(k) in (None, AUTO)}
        changed = [f"{k}={v}" for k, v in fill.items()]
        intent.update(fill)
        added = [f"{k}={v}" for k, v in companion.env.items() if k not in profile_env]
        companion_env.update({k: v for k, v in companion.env.items() if k not in profile_env})
        if changed or added:
            notes.append(f"{dialect.name}: {', '.join(changed + added)} ({companion.why})")

    env: dict[str, str] = {}
    for key, var in dialect.env.items():
        value = intent.get(key)
        if value is not None:
            env[var] = str(value)
    env.update(companion_env)
    env.update(profile_env)
    for var, why in dialect.removed.env.items():
        if var in env:
            del env[var]
            notes.append(f"{dialect.name}: dropped {var} ({why})")

    args: list[str] = []
    single_node = _nodes(intent.get("nnodes")) <= 1
    for key in dialect.flags:
        flag = dialect.flag(key)
        value = intent.get(key)
        if flag is None or value is None or value == AUTO:
            continue
        if single_node and key in _MULTI_NODE:
            continue  # a node's rank and the rendezvous address describe a multi-node launch only
        if flag.flag is None:
            written = flag.when_true if value else flag.when_false
            if written:
                args.append(written)
        elif value not in flag.omit:
            written = flag.flag
            args += [flag.flag, _text(value)]
        else:
            written = None
        if written in dialect.deprecated.flags:
            notes.append(
                f"{dialect.name}: {written} is deprecated here, still accepted "
                f"({dialect.deprecated.flags[written]})"
            )
    for key, value in intent.items():
        if (
            key not in dialect.flags
            and key not in dialect.env
            and value not in (None, AUTO)
            and key in _UNMAPPED
        ):
            notes.append(f"{dialect.name}: '{key}' has no flag in this release; left out")

    args += _rewrite_extra(dialect, extra_args, notes)
    final_facts = facts_of(dialect, intent, env, context)
    return Translation(
        args=tuple(args),
        env=env,
        intent=intent,
        facts=final_facts,
        notes=tuple(notes),
        applied=tuple(applied),
    )


# Written only when nnodes > 1: they name one node of a multi-node launch.
_MULTI_NODE = ("node_rank", "dist_init_addr")


def _nodes(value: Any) -> int:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else 1
    except (TypeError, ValueError):
        return 1


# Intents worth a note when a dialect cannot express them (the rest have defaults that match).
_UNMAPPED = {
    "attention_backend",
    "context_length",
    "mem_fraction",
    "max_total_tokens",
    "max_running_requests",
    "mamba_cache",
    "speculative.algorithm",
    "reasoning_parser",
    "tool_call_parser",
    "watchdog_timeout",
}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _rewrite_extra(dialect: Dialect, extra_args: tuple[str, ...], notes: list[str]) -> list[str]:
    out: list[str] = []
    skip_value = False
    for arg in extra_args:
        if skip_value:
            skip_value = False
            if not arg.startswith("--"):
                continue
        flag, eq, value = arg.partition("=")
        if flag in dialect.removed.flags:
            notes.append(f"{dialect.name}: dropped {flag} ({dialect.removed.flags[flag]})")
            skip_value = not eq
            continue
        if flag in dialect.renamed:
            new = dialect.renamed[flag]
            old = "a deprecated alias" if flag in dialect.deprecated.flags else "refused"
            notes.append(f"{dialect.name}: {flag} is now {new} (the old name is {old} here)")
            out.append(f"{new}{eq}{value}")
            continue
        out.append(arg)
    return out


# -- the reverse: what a launch's flags and env say, as intent ----------------------------------


@dataclass(frozen=True)
class Reading:
    """A launch read back into intent keys (the reverse of `translate`)."""

    intent: dict[str, Any]
    """Intent keys the flags and env give (values read as TOML: 2, 0.8, true, else text)."""
    extra_args: tuple[str, ...]
    """Flags no intent covers (--revision, --api-key, a profile's extra_args), in order, with their
    values: what `translate` takes as extra_args to write them again."""


def read_launch(dialect: Dialect, args: tuple[str, ...] | list[str], env: Mapping[str, str]) -> Reading:
    """Server flags (what follows the entry point) and env -> intent keys, with the dialect.

    A valued flag gives its value, a switch True or False, a renamed flag is read under its new
    name, a variable of the dialect's [env] its intent. `translate(dialect, reading.intent,
    extra_args=reading.extra_args)` writes the same flags again (in the dialect's order)."""
    from kit.catalog._overrides import parse_value

    table: dict[str, tuple[str, Any]] = {}
    for key in dialect.flags:
        flag = dialect.flag(key)
        if flag is None:
            continue
        if flag.flag:
            table[flag.flag] = (key, None)
        if flag.when_true:
            table[flag.when_true] = (key, True)
        if flag.when_false:
            table[flag.when_false] = (key, False)
    intent: dict[str, Any] = {}
    extra: list[str] = []
    items = list(args)
    i = 0
    while i < len(items):
        start = i
        name, eq, inline = items[i].partition("=")
        i += 1
        values = [inline] if eq else []
        while i < len(items) and not items[i].startswith("--"):
            values.append(items[i])
            i += 1
        known = table.get(dialect.renamed.get(name, name)) if name.startswith("--") else None
        if known is None:
            extra += items[start:i]
            continue
        key, switch = known
        if switch is not None and not values:
            intent[key] = switch
        elif switch is None and len(values) == 1:
            intent[key] = values[0] if key in _TEXT_INTENTS else parse_value(values[0])
        else:
            extra += items[start:i]
    for key, var in dialect.env.items():
        if var in env:
            intent[key] = env[var]
    return Reading(intent, tuple(extra))


# Intents whose values are names or text, never numbers (a model path of digits stays text).
_TEXT_INTENTS = {
    "model_path",
    "dist_init_addr",
    "host",
    "reasoning_parser",
    "tool_call_parser",
    "cpu_threads_bind",
}
