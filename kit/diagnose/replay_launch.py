"""`--set` on a replay acts on what the bundle ran. Pure apart from reading the catalog's data files.

    replay_launch(recorded, sets, ...)   the launch a replay starts: the bundle's argv, environment,
                                         phase limits and container settings with the sets applied

A profile key (`nnodes=1`, `max_total_tokens=32768`) is applied to the bundle's own launch, not to
the catalog's: the bundle's flags and environment are read back into profile keys with the
release's dialect (kit/dialects/_translate.py read_launch, the reverse of the translation
`kit validate` and `kit up` use), the keys the sets name are replaced, and the launch is written
again; what differs between the two writings (flags added, removed or changed, variables) is
applied to the bundle's argv flag by flag, so flags only the bundle has stay where they were.
`--set nnodes=1` on a two-node launch (`--nnodes 2 --node-rank 0 --dist-init-addr ...`) so becomes
a one-node launch. `env.NAME=VALUE` sets a variable (`env.NAME=none` removes it); `timing.*` and
`container.*` keys replace the bundle's limits and settings where they name them.

`no_effect(...)` names each set that changes nothing in the replay's argv, environment, limits or
container settings: `kit repro` refuses those (exit 2) rather than report a fix that was never tried.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kit.catalog._overrides import RESET, parse_override
from kit.diagnose import fingerprint as fp
from kit.diagnose.trust import entry_point

# Container settings a replay takes from the bundle, and the --set key that replaces each.
SETTINGS = ("shm_size", "ipc_host", "ulimits", "cap_add")
_SPEC_SETTINGS = ("publish_address", "hf_cache", "pass_env", "api_key_env")
_LIMIT_KEYS = {"deadlines": "deadline_s", "stall_windows": "stall_window_s"}


@dataclass(frozen=True)
class Recorded:
    """The bundle's launch as a replay reads it (secrets already taken out of argv and env)."""

    argv: tuple[str, ...]
    env: dict[str, str]
    limits: dict | None
    """fp.limits_data shape; None: unknown (the catalog's limits stand in)."""
    settings: dict[str, Any] | None
    """SETTINGS from the bundle's container section; None: unknown (the catalog's stand in)."""


@dataclass(frozen=True)
class Replayed:
    argv: tuple[str, ...]
    env: dict[str, str]
    limits: dict
    settings: dict[str, Any]
    """SETTINGS and the spec's own (publish address, HF cache, passed names, API key variable)."""
    resolved: Any
    """The catalog's launch of the target with the sets (kit.launch.Resolved): the replay takes the
    rest of its LaunchSpec from it, and its dialect."""
    changes: tuple[str, ...] = field(default_factory=tuple)

    def key(self) -> tuple:
        return (self.argv, tuple(sorted(self.env.items())), repr(self.limits), repr(self.settings))


def split_sets(sets: Sequence[str]) -> tuple[dict[str, str | None], list[str]]:
    """(env.NAME=VALUE sets: NAME -> VALUE or None to remove, the other sets)."""
    env: dict[str, str | None] = {}
    other: list[str] = []
    for item in sets:
        parts, value = parse_override(item)
        if parts[0] == "env" and len(parts) == 2:
            env[parts[1]] = None if value.lower() == RESET else value
        else:
            other.append(item)
    return env, other


# -- argv, flag by flag --------------------------------------------------------------------------


def _groups(argv: Sequence[str]) -> list[tuple[str | None, list[str], bool]]:
    """[python, -m, x, --tp, 2, --a=b, --flag] -> [(None, [python, -m, x], F), (--tp, [2], F),
    (--a, [b], True), (--flag, [], F)]; the flag is its name, the bool says `=` joined them."""
    groups: list[tuple[str | None, list[str], bool]] = [(None, [], False)]
    for arg in argv:
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            groups.append((name, [value] if eq else [], bool(eq)))
        else:
            groups[-1][1].append(arg)
    return groups


def _tokens(flag: str | None, values: list[str], joined: bool) -> list[str]:
    if flag is None:
        return values
    if joined and len(values) == 1:
        return [f"{flag}={values[0]}"]
    return [flag, *values]


def patch_argv(argv: Sequence[str], base: Sequence[str], changed: Sequence[str]) -> list[str]:
    """What changed from BASE to CHANGED (two writings of a launch), applied to ARGV flag by flag:
    values replaced, flags added or removed; flags only ARGV has are kept where they are."""
    before = {f: v for f, v, _ in _groups(base)[1:]}
    after = {f: v for f, v, _ in _groups(changed)[1:]}
    out: list[tuple[str | None, list[str], bool]] = []
    for flag, values, joined in _groups(argv):
        if flag is not None and flag in before and flag not in after:
            continue  # removed by the change
        if flag is not None and flag in after and before.get(flag) != after[flag]:
            values, joined = after[flag], joined and len(after[flag]) == 1
        out.append((flag, values, joined))
    present = {flag for flag, _, _ in out}
    out += [(f, v, False) for f, v in after.items() if f not in before and f not in present]
    return [token for group in out for token in _tokens(*group)]


def flag_changes(a: Sequence[str], b: Sequence[str]) -> str:
    """'--tp-size 2 -> 4; removed --nnodes 2; added --disable-cuda-graph', flag by flag."""
    import shlex

    before = {f: v for f, v, _ in _groups(a)[1:]}
    after = {f: v for f, v, _ in _groups(b)[1:]}
    parts = []
    for flag, values in before.items():
        if flag not in after:
            parts.append(f"removed {shlex.join([flag, *values])}")
        elif after[flag] != values:
            parts.append(
                f"{flag} {shlex.join(values) or '(no value)'} -> {shlex.join(after[flag]) or '(no value)'}"
            )
    parts += [f"added {shlex.join([f, *v])}" for f, v in after.items() if f not in before]
    return "; ".join(parts) or "(same)"


def size_text(size: int | None) -> str | None:
    """2147483648 -> '2g' (what docker and the catalog write), else the number of bytes."""
    if not size:
        return None
    for unit, scale in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def split_entry(argv: Sequence[str]) -> tuple[list[str], tuple[str, ...], list[str]] | None:
    """(what comes before the SGLang entry point, the entry point, the server flags), or None."""
    for at in range(len(argv)):
        entry = entry_point(argv[at:])
        if entry is not None:
            return list(argv[:at]), entry, list(argv[at + len(entry) :])
    return None


# -- which keys a set names ----------------------------------------------------------------------


def _named(sets: Sequence[str]) -> tuple[set[str], set[str], set[str]]:
    """(intent keys, limit keys 'deadline_s.init', container settings) the sets name by key."""
    from kit.dialects import INTENTS

    intents: set[str] = set()
    limits: set[str] = set()
    settings: set[str] = set()
    for item in sets:
        parts, _ = parse_override(item)
        dotted = ".".join(parts)
        if dotted in INTENTS:
            intents.add(dotted)
        if parts == ("speculative",):
            intents.update(k for k in INTENTS if k.startswith("speculative."))
        if parts == ("tp",):
            limits.add("expected_ranks")
        if parts[0] == "container" and len(parts) >= 2:
            if parts[1] == "port":
                intents.add("port")
            settings.add(parts[1])
        if parts[0] == "timing":
            if len(parts) >= 2 and parts[1] == "cpu_progress_in":
                limits.add("cpu_counts_in")
            elif len(parts) >= 2 and parts[1] in _LIMIT_KEYS:
                stages = parts[2:3] or ("*",)
                limits.update(f"{_LIMIT_KEYS[parts[1]]}.{stage}" for stage in stages)
            else:
                limits.add("*")
    return intents, limits, settings


def shm_bytes(size: Any) -> int | None:
    """'2g' or 2147483648 -> 2147483648; None or 0 -> None."""
    from docker.utils import parse_bytes

    if not size:
        return None
    return int(size) if isinstance(size, int) else int(parse_bytes(str(size)))


def _settings_of(spec: Any) -> dict[str, Any]:
    return {
        "shm_size": shm_bytes(spec.shm_size),
        "ipc_host": spec.ipc_host,
        "ulimits": dict(spec.ulimits),
        "cap_add": tuple(spec.cap_add),
    }


def _spec_settings(spec: Any) -> dict[str, Any]:
    return {key: getattr(spec, key) for key in _SPEC_SETTINGS}


def _env_line(key: str, before: str | None, after: str | None) -> str:
    def text(value: str | None) -> str:
        return value if value is not None else "(unset)"

    return f"env {key}: {text(before)} -> {text(after)}"


# -- the replay ----------------------------------------------------------------------------------


def replay_launch(
    recorded: Recorded, sets: Sequence[str], *, target: str, image: str | None, overrides: Sequence[str]
) -> Replayed:
    """The launch a replay starts: RECORDED with SETS applied (see the module's docstring)."""
    from kit.dialects._translate import read_launch, translate
    from kit.launch import context_of, intent_of, resolve_full
    from kit.logs.limits import limits_from_spec

    env_sets, other = split_sets(sets)
    base = resolve_full(target, image=image, overrides=overrides)
    changed = resolve_full(target, image=image, overrides=[*overrides, *other]) if other else base
    named_intents, named_limits, named_settings = _named(other)
    changes: list[str] = []

    # argv and the variables the dialect maps: read back, named keys replaced, written again.
    device = base.spec.device
    base_intent = intent_of(base.profile, base.model, device)
    new_intent = intent_of(changed.profile, changed.model, device)
    touched = {k for k in new_intent if base_intent.get(k) != new_intent.get(k)} | named_intents
    argv = list(recorded.argv)
    env = dict(recorded.env)
    parts = split_entry(argv)
    if touched and parts is None:
        from kit.errors import InputError

        raise InputError(
            "--set",
            f"{', '.join(other)}: the bundle's command is not an SGLang launch, so profile keys "
            "cannot be read from it",
            "use --set env.NAME=VALUE, or replay without --set",
        )
    if touched and parts is not None:
        prefix, entry, args = parts
        mapped = set(base.dialect.env.values())
        reading = read_launch(base.dialect, args, env)
        intent = {"device": device, **reading.intent}
        updated = {**intent, **{k: new_intent.get(k) for k in touched}}
        own_env = {k: v for k, v in env.items() if k not in mapped}
        before = translate(
            base.dialect,
            intent,
            context=context_of(base.model, base.profile, base.hardware, base.spec.gpus),
            profile_env=own_env,
            extra_args=reading.extra_args,
        )
        after = translate(
            changed.dialect,
            updated,
            context=context_of(changed.model, changed.profile, changed.hardware, changed.spec.gpus),
            profile_env=own_env,
            extra_args=reading.extra_args,
        )
        patched = patch_argv(args, before.args, after.args)
        if patched != args:
            changes.append(f"argv: {flag_changes(args, patched)}")
        argv = [*prefix, *entry, *patched]
        for key in sorted(set(before.env) | set(after.env)):
            if before.env.get(key) != after.env.get(key):
                old = env.get(key)
                if key in after.env:
                    env[key] = after.env[key]
                else:
                    env.pop(key, None)
                changes.append(_env_line(key, old, env.get(key)))
    for key, value in env_sets.items():
        old = env.get(key)
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
        if old != env.get(key):
            changes.append(_env_line(key, old, env.get(key)))

    # Phase limits: the bundle's, with what the sets name or change in the catalog's.
    base_limits = fp.limits_data(limits_from_spec(base.spec))
    new_limits = fp.limits_data(limits_from_spec(changed.spec))
    limits = dict(recorded.limits) if recorded.limits is not None else dict(new_limits)
    for key in sorted(set(new_limits)):
        value = new_limits[key]
        if isinstance(value, dict):
            inner = dict(limits.get(key) or {})
            for stage in sorted(value):
                dotted = f"{key}.{stage}"
                if (
                    value[stage] != (base_limits.get(key) or {}).get(stage)
                    or dotted in named_limits
                    or f"{key}.*" in named_limits
                    or "*" in named_limits
                ) and inner.get(stage) != value[stage]:
                    changes.append(f"limits {dotted}: {inner.get(stage)} -> {value[stage]}")
                    inner[stage] = value[stage]
            limits[key] = inner
        elif (value != base_limits.get(key) or key in named_limits or "*" in named_limits) and limits.get(
            key
        ) != value:
            changes.append(f"limits {key}: {limits.get(key)} -> {value}")
            limits[key] = value

    # Container settings: the bundle's, with what the sets name or change.
    settings = dict(recorded.settings) if recorded.settings is not None else _settings_of(changed.spec)
    base_settings, new_settings = _settings_of(base.spec), _settings_of(changed.spec)
    for key in SETTINGS:
        if (new_settings[key] != base_settings[key] or key in named_settings) and settings.get(
            key
        ) != new_settings[key]:
            shown_before, shown_after = settings.get(key), new_settings[key]
            if key == "shm_size":
                shown_before, shown_after = size_text(shown_before), size_text(shown_after)
            changes.append(f"container {key}: {shown_before} -> {shown_after}")
            settings[key] = new_settings[key]
    spec_settings = _spec_settings(changed.spec)
    for key, value in spec_settings.items():
        if value != _spec_settings(base.spec)[key]:
            changes.append(f"container {key}: {_spec_settings(base.spec)[key]} -> {value}")
    return Replayed(
        argv=tuple(argv),
        env=env,
        limits=limits,
        settings={**settings, **spec_settings},
        resolved=changed,
        changes=tuple(changes),
    )


def no_effect(
    recorded: Recorded, sets: Sequence[str], *, target: str, image: str | None, overrides: Sequence[str]
) -> list[str]:
    """Each set that, alone, leaves the replay's argv, environment, limits and settings as they were."""
    if not sets:
        return []
    plain = replay_launch(recorded, (), target=target, image=image, overrides=overrides).key()
    return [
        item
        for item in sets
        if replay_launch(recorded, (item,), target=target, image=image, overrides=overrides).key() == plain
    ]
