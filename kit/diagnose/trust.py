"""Which launch from a bundle `kit repro` starts without asking: an SGLang launch, as the kit renders
one. Pure: data in, refusals out; the lists live in kit/diagnose/trust.toml.

A bundle comes from someone else. Its fingerprint's launch is what a replay executes, so it is read
as untrusted input:

    check_argv(argv, flags)        the image's SGLang entry point, with flags the release knows
    check_env(env)                 no variable that loads code or moves the loader (LD_*, PYTHONPATH)
    check_caps(caps)               capabilities within the allowlist (SYS_PTRACE, IPC_LOCK, SYS_NICE)
    check_container(section)       only the settings the kit records, with values it starts
    check_mounts(volumes)          only what the kit mounts (the HF cache, the compile cache)
    check_image(...)               a kit image (kit/sglang:NAME, a manifest of this kit, its labels)
    unwrap_api_key(argv)           the kit's own `sh -c` API-key wrapper, recognised exactly
    consent(secrets, ...)          which secret names a replay passes from this machine

Each check returns Refusal items (what, why); `kit repro` prints them with the plan and exits 2
unless `--trust-bundle` is given. Nothing here starts, reads or prints anything.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.catalog import read_toml

POLICY_FILE = Path(__file__).resolve().parent / "trust.toml"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GPU_ID = re.compile(r"[0-9]{1,3}|GPU-[0-9a-fA-F-]{8,64}")  # an index or an NVML UUID
_WRAPPER_NAME = re.compile(r'^: "\$\{([A-Za-z_][A-Za-z0-9_]*):')
LIMIT = 160
"""Untrusted text in a refusal is cut to this many characters (printable ones only)."""


def shown(value: object, limit: int = LIMIT) -> str:
    """Text from an untrusted bundle, safe to print on one line: printable characters only, bounded."""
    text = str(value)
    cut = text[:limit]
    return "".join(c if c.isprintable() else "?" for c in cut) + ("..." if len(text) > limit else "")


@dataclass(frozen=True)
class Refusal:
    """One thing in a bundle's launch that the kit does not start without --trust-bundle."""

    what: str
    """The item, e.g. 'env LD_PRELOAD', 'cap SYS_ADMIN', 'argv', 'image'."""
    why: str

    def line(self) -> str:
        return f"{self.what}: {self.why}"


@dataclass(frozen=True)
class Policy:
    entries: tuple[tuple[str, ...], ...]
    kit_flags: dict[str, int]
    caps: dict[str, str]
    env_patterns: dict[str, str]
    env_names: dict[str, str]
    env_allowed: dict[str, str]
    container_keys: frozenset[str]
    ipc_modes: frozenset[str]
    gpu_access: frozenset[str]
    restart_policies: frozenset[str]


@functools.cache
def policy() -> Policy:
    data = read_toml(POLICY_FILE)
    env = data["env"]
    container = data["container"]
    return Policy(
        entries=tuple(tuple(e) for e in data["entry"]["argv"]),
        kit_flags=dict(data["kit_flags"]),
        caps=dict(data["caps"]),
        env_patterns=dict(env["patterns"]),
        env_names=dict(env["names"]),
        env_allowed=dict(env["allowed"]),
        container_keys=frozenset(container["keys"]),
        ipc_modes=frozenset(container["ipc_modes"]),
        gpu_access=frozenset(container["gpu_access"]),
        restart_policies=frozenset(container["restart_policies"]),
    )


# -- argv ----------------------------------------------------------------------------------------


def known_flags(dialect: Any, extra_args: Iterable[str] = ()) -> dict[str, int | None]:
    """Flag -> how many values it takes (None: zero or one), for one release's dialect: its [flags]
    table, renamed and deprecated names, the kit's own flags, and a target's extra_args."""
    flags: dict[str, int | None] = {}
    for key in dialect.flags:
        flag = dialect.flag(key)
        if flag is None:
            continue
        if flag.flag:
            flags[flag.flag] = 1
        for switch in (flag.when_true, flag.when_false):
            if switch:
                flags[switch] = 0
    for old, new in dialect.renamed.items():
        flags.setdefault(new, None)
        flags.setdefault(old, flags[new])
    for name in dialect.deprecated.flags:
        flags.setdefault(name, None)
    for name, count in policy().kit_flags.items():
        flags.setdefault(name, int(count))
    for arg in extra_args:
        if arg.startswith("--"):
            flags.setdefault(arg.partition("=")[0], None)
    return flags


def entry_point(argv: Sequence[str]) -> tuple[str, ...] | None:
    """The SGLang entry point ARGV starts with (python -m sglang.launch_server), or None."""
    for entry in policy().entries:
        if tuple(argv[: len(entry)]) == entry:
            return entry
    return None


def check_argv(argv: Sequence[str], flags: Mapping[str, int | None]) -> list[Refusal]:
    """The image's SGLang entry point, then only flags the release knows, each with its values."""
    entry = entry_point(argv)
    if entry is None:
        first = " ".join(shown(a, 40) for a in argv[:4]) or "(empty)"
        wanted = " or ".join(" ".join(e) for e in policy().entries)
        return [Refusal("argv", f"not the image's SGLang entry point ({wanted}): {first} ...")]
    refused: list[Refusal] = []
    rest = list(argv[len(entry) :])
    if rest and not rest[0].startswith("--"):
        refused.append(Refusal("argv", f"an argument before the first flag: {shown(rest[0], 60)}"))
    i = 0
    while i < len(rest):
        arg = rest[i]
        i += 1
        if not arg.startswith("--"):
            continue
        name, eq, _ = arg.partition("=")
        values = [] if not eq else [arg]
        while i < len(rest) and not rest[i].startswith("--"):
            values.append(rest[i])
            i += 1
        if name not in flags:
            refused.append(Refusal(f"argv {shown(name, 60)}", "not a flag of this SGLang release's dialect"))
            continue
        count = flags[name]
        wanted = (0, 1) if count is None else (count,)
        if len(values) not in wanted:
            what = "no value" if count == 0 else "one value"
            refused.append(
                Refusal(f"argv {shown(name, 60)}", f"takes {what}, has {len(values)}: {shown(values, 60)}")
            )
    return refused


def unwrap_api_key(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """(the server argv, the API key's variable) when ARGV is exactly the kit's own wrapper
    (kit/render/docker.py server_command for that variable), else (ARGV, None)."""
    from kit.diagnose.redact import Redactor
    from kit.render.docker import server_command
    from kit.spec import LaunchSpec

    if len(argv) < 5 or list(argv[:2]) != ["sh", "-c"]:
        return list(argv), None
    found = _WRAPPER_NAME.match(argv[2])
    if not found:
        return list(argv), None
    name, inner = found[1], list(argv[4:])
    probe = LaunchSpec.model_construct(argv=tuple(inner), api_key_env=name)
    wrapper = server_command(probe)
    # A bundle holds the script as the redactor left it ('--api-key "$NAME"' looks like a secret
    # flag's value): that exact text is the kit's wrapper too.
    masked = [*wrapper[:2], Redactor().text(wrapper[2]), *wrapper[3:]]
    if list(argv) not in (wrapper, masked):
        return list(argv), None
    return inner, name


# -- environment ---------------------------------------------------------------------------------


def env_refusal(name: str) -> str | None:
    """Why NAME may not reach a replay (it loads code or moves the loader), or None."""
    rules = policy()
    if name in rules.env_allowed:
        return None
    if name in rules.env_names:
        return rules.env_names[name]
    for pattern, why in rules.env_patterns.items():
        if fnmatch.fnmatchcase(name, pattern):
            return why
    return None


def check_env(env: Mapping[str, str], *, kit_values: Mapping[str, str] = {}) -> list[Refusal]:
    """Every variable name that loads code or changes the loader. KIT_VALUES are the kit's own
    settings (the compile cache's folders): such a name is refused unless it has the kit's value."""
    refused = []
    for name in sorted(env):
        if not _ENV_NAME.fullmatch(name):
            refused.append(Refusal(f"env {shown(name, 60)}", "not an environment variable name"))
            continue
        if name in kit_values:
            if env[name] != kit_values[name]:
                refused.append(
                    Refusal(
                        f"env {name}",
                        f"the kit sets it to {kit_values[name]} (a cache of compiled code); "
                        f"the bundle has {shown(env[name], 60)}",
                    )
                )
            continue
        why = env_refusal(name)
        if why:
            refused.append(Refusal(f"env {name}", why))
    return refused


# -- container -----------------------------------------------------------------------------------


def check_caps(caps: Iterable[str]) -> list[Refusal]:
    allowed = policy().caps
    return [
        Refusal(f"cap {shown(cap, 40)}", f"not in the kit's allowlist ({', '.join(allowed)})")
        for cap in caps
        if str(cap).upper().removeprefix("CAP_") not in allowed
    ]


def check_mounts(destinations: Mapping[str, str]) -> list[Refusal]:
    """DESTINATIONS: container path -> source (host path or volume name). Only the kit's own: the
    Hugging Face cache (any host folder) and the compile-cache volume."""
    from kit.runtime import compile_cache
    from kit.spec import CONTAINER_HF_CACHE

    refused = []
    for where, source in sorted(destinations.items()):
        if where == CONTAINER_HF_CACHE:
            continue
        if where == compile_cache.MOUNT and source == compile_cache.VOLUME:
            continue
        refused.append(
            Refusal(
                f"mount {shown(where, 80)}",
                f"from {shown(source, 80)}: the kit mounts only the Hugging Face cache at "
                f"{CONTAINER_HF_CACHE} and volume {compile_cache.VOLUME} at {compile_cache.MOUNT}",
            )
        )
    return refused


def mounts_of(section_mounts: Any) -> tuple[dict[str, str], list[Refusal]]:
    """A recorded `mounts` list ({"destination", "source"} tables) as destination -> source."""
    if section_mounts in (None, []):
        return {}, []
    if not isinstance(section_mounts, list):
        return {}, [Refusal("container.mounts", "not a list")]
    out: dict[str, str] = {}
    for entry in section_mounts:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("destination"), str):
            return {}, [Refusal("container.mounts", f"an entry without a destination: {shown(entry, 80)}")]
        out[entry["destination"]] = str(entry.get("source") or entry.get("name") or "")
    return out, []


def check_container(section: Mapping[str, Any]) -> list[Refusal]:
    """The bundle's recorded container settings: only the keys the kit records, values it starts."""
    rules = policy()
    refused = []
    for key in sorted(section):
        if key not in rules.container_keys:
            refused.append(
                Refusal(
                    f"container.{shown(key, 40)}",
                    f"{shown(section[key], 60)}: not a setting the kit records or starts",
                )
            )
    ipc = section.get("ipc_mode")
    if ipc is not None and (not isinstance(ipc, str) or ipc not in rules.ipc_modes):
        refused.append(Refusal("container.ipc_mode", f"{shown(ipc, 60)}: the kit shares only the host's IPC"))
    restart = section.get("restart_policy")
    if restart is not None and (not isinstance(restart, str) or restart not in rules.restart_policies):
        refused.append(Refusal("container.restart_policy", f"{shown(restart, 60)}: not a restart policy"))
    caps = section.get("cap_add")
    if caps is not None:
        if isinstance(caps, list) and all(isinstance(c, str) for c in caps):
            refused += check_caps(caps)
        else:
            refused.append(Refusal("container.cap_add", f"{shown(caps, 60)}: not a list of names"))
    ulimits = section.get("ulimits")
    if ulimits is not None and not (
        isinstance(ulimits, Mapping)
        and all(
            isinstance(k, str) and _ENV_NAME.fullmatch(k) and (v is None or type(v) is int)
            for k, v in ulimits.items()
        )
    ):
        refused.append(Refusal("container.ulimits", f"{shown(ulimits, 60)}: not NAME -> integer"))
    shm = section.get("shm_size")
    if shm is not None and not (
        type(shm) is int or (isinstance(shm, str) and re.fullmatch(r"\d+[bkmg]?", shm))
    ):
        refused.append(Refusal("container.shm_size", f"{shown(shm, 60)}: not a size"))
    gpus = section.get("gpus")
    if gpus is not None and not (type(gpus) is int and gpus >= -1):
        refused.append(Refusal("container.gpus", f"{shown(gpus, 60)}: not a GPU count"))
    access = section.get("gpu_access")
    if access is not None and (not isinstance(access, str) or access not in rules.gpu_access):
        refused.append(Refusal("container.gpu_access", f"{shown(access, 60)}: not a way the kit gives GPUs"))
    devices = section.get("gpu_devices")
    if devices is not None and not (
        isinstance(devices, list) and all(isinstance(d, str) and _GPU_ID.fullmatch(d) for d in devices)
    ):
        refused.append(
            Refusal("container.gpu_devices", f"{shown(devices, 60)}: not a list of GPU indexes or UUIDs")
        )
    mounts, bad = mounts_of(section.get("mounts"))
    refused += bad + check_mounts(mounts)
    return refused


# -- the image -----------------------------------------------------------------------------------


def check_image(
    *, name: str | None, manifest_tag: str | None, ref: str, labels: Mapping[str, str] | None
) -> list[Refusal]:
    """The image a replay starts is a kit image: the bundle names a manifest of this kit, and the
    local image (by tag, id or digest) carries that manifest's labels (io.kit.image, io.kit.managed)."""
    from kit.runtime.engine import LABEL_IMAGE, LABEL_MANAGED

    if name is None or manifest_tag is None:
        return [Refusal("image", f"{shown(name or ref, 80)} is not an image manifest of this kit (images/)")]
    if labels is None:
        return [Refusal("image", f"{shown(ref, 80)}: its labels could not be read")]
    if labels.get(LABEL_IMAGE) != name or labels.get(LABEL_MANAGED) != "image":
        return [
            Refusal(
                "image",
                f"{shown(ref, 80)} is not the kit's build of {name} "
                f"(labels {LABEL_IMAGE}={shown(labels.get(LABEL_IMAGE), 60)}, "
                f"{LABEL_MANAGED}={shown(labels.get(LABEL_MANAGED), 20)})",
            )
        ]
    return []


# -- secrets -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Consent:
    passed: tuple[str, ...]
    """Names read from this machine's environment into the replay."""
    withheld: tuple[str, ...]
    """The bundle's secret names that are not passed (neither the target's own nor named)."""


def consent(bundle_secrets: Iterable[str], target_names: Iterable[str], named: Iterable[str]) -> Consent:
    """A variable of this machine reaches a replay only when the catalog target itself passes it
    (HF_TOKEN for a gated model) or the user names it (--pass-env NAME); the bundle's other secret
    names are listed, not passed."""
    passed = tuple(dict.fromkeys([*target_names, *named]))
    withheld = tuple(n for n in dict.fromkeys(bundle_secrets) if n not in passed)
    return Consent(passed, withheld)
