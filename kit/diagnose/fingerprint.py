"""A fingerprint: what decides a start-up on one machine, as plain JSON data.

    image     manifest name, tag, id, registry digest, labels, the lock (/opt/kit/lock.txt)
    versions  SGLang, torch, NCCL, CUDA, flashinfer, sglang-kernel, Python (and where they were read)
    host      kernel, OS, Docker engine and API, Compose, CPUs and memory (the engine's host)
    nvidia    driver, CUDA driver, container toolkit, CDI, GPUs from NVML (model, UUID, memory,
              compute capability), the P2P status matrix, the topology, `nvidia-smi topo -m`
    launch    target, profile, dialect, overrides, fault, argv, environment (secrets masked, their
              names kept), container settings, the phase limits the verdict was reached under

    kit       the kit's version (it decides argv translation and verdict rules)

A field the kit could not read is `{"unknown": "why"}`; nothing is guessed. Every section has the
same keys whatever ran the server. `build(source, limits)` is the one way a fingerprint is made: it
asks a FactSource (kit/diagnose/fact_sources.py: a container, a replay, a host process, a pasted
log) the same questions and shapes the answers; the facts are read there (kit/diagnose/facts.py:
Docker, NVML, the host's tools; kit/diagnose/hostenv.py: a process). This module reads nothing.

`diff(a, b)` lists differences with the likely suspects first (versions, GPUs, P2P and topology,
environment, argv, overrides), then the rest; equal fields are counted, not listed.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from kit.diagnose.redact import MASK, mask_argv, split_env
from kit.images.lock import Package, normalize

FORMAT = 1
Unknown = dict[str, str]


def unknown(why: str) -> Unknown:
    return {"unknown": why}


def is_unknown(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"unknown"}


def known(value: Any) -> Any | None:
    """The value, or None when it is an unknown marker (or absent)."""
    return None if value is None or is_unknown(value) else value


# Every fingerprint's host section has these keys, whatever its source (unknown where not read).
HOST_KEYS = ("kernel", "os", "arch", "cpus", "memory_gib", "cgroup", "docker_engine", "docker_api", "compose")


def host_unknown(why: str) -> dict:
    """A host section of a source that ran on no host the kit could read (a replay, a pasted log)."""
    return {k: unknown(why) for k in HOST_KEYS}


# -- versions -----------------------------------------------------------------------------------

_TORCH_CUDA = re.compile(r"\+cu(\d+)(\d)$")


def _cuda_from_torch(torch: str) -> str | dict:
    local = torch.partition("+")[2]
    if local == "cpu":
        return f"none (torch {torch} is a CPU build)"
    match = _TORCH_CUDA.search(torch)
    if match:
        return f"{match[1]}.{match[2]}"
    return unknown(f"torch {torch} has no +cuXYZ label")


def versions_from_lock(packages: Mapping[str, Package], labels: Mapping[str, str], source: str) -> dict:
    """SGLang, torch, NCCL, CUDA, flashinfer... from the image's lock (what is installed)."""

    def version(*names: str) -> str:
        for name in names:
            package = packages.get(normalize(name))
            if package is not None:
                return package.version
        return "not installed"

    nccl_names = sorted(k for k in packages if k.startswith("nvidia-nccl"))
    torch = version("torch")
    python = labels.get("io.kit.pin.python")
    return {
        "from": source,
        "sglang": version("sglang"),
        "torch": torch,
        "nccl": version(*nccl_names) if nccl_names else "not installed",
        "cuda": _cuda_from_torch(torch) if torch != "not installed" else "not installed",
        "flashinfer": version("flashinfer-python", "flashinfer"),
        "sglang_kernel": version("sglang-kernel", "sgl-kernel"),
        "transformers": version("transformers"),
        "python": python or unknown("the image carries no io.kit.pin.python label"),
    }


def versions_from_pins(pins: Mapping[str, Any], python: str | None, source: str) -> dict:
    """The same fields from a manifest's pins (or the image's io.kit.pin.* labels)."""

    def pin(key: str) -> Any:
        value = pins.get(key)
        return value if value else "not pinned (not installed)"

    torch = pins.get("torch") or ""
    return {
        "from": source,
        "sglang": pin("sglang"),
        "torch": pin("torch"),
        "nccl": pin("nccl"),
        "cuda": pins.get("cuda") or (_cuda_from_torch(torch) if torch else unknown("no torch pin")),
        "flashinfer": pin("flashinfer"),
        "sglang_kernel": pin("sglang_kernel"),
        "transformers": unknown(f"{source} pins no transformers version"),
        "python": python or unknown(f"{source} names no Python"),
    }


def pins_from_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """io.kit.pin.* image labels -> manifest pin keys ('nccl-package' -> 'nccl_package')."""
    prefix = "io.kit.pin."
    return {k[len(prefix) :].replace("-", "_"): v for k, v in labels.items() if k.startswith(prefix)}


def versions_unknown(why: str) -> dict:
    fields = ("sglang", "torch", "nccl", "cuda", "flashinfer", "sglang_kernel", "transformers", "python")
    return {"from": unknown(why), **{k: unknown(why) for k in fields}}


# -- GPUs ----------------------------------------------------------------------------------------


def nvidia_section(
    inventory: Any | None,
    *,
    p2p: Mapping | dict | None,
    topology: Mapping | dict | None,
    toolkit: Any,
    runtimes: Any,
    cdi: Any,
    smi_topo: Any,
    why_no_nvml: str | None = None,
) -> dict:
    """The NVIDIA side: driver, GPUs, P2P, topology. `inventory` is a kit.runtime.nvml.GpuInventory."""
    why = why_no_nvml or (inventory.error if inventory is not None else None) or "NVML was not read"
    if inventory is None or inventory.error:
        gpu_fields: dict[str, Any] = {
            "driver": unknown(why),
            "cuda_driver": unknown(why),
            "gpu_count": unknown(why),
            "gpu_models": unknown(why),
            "gpus": unknown(why),
        }
    else:
        gpu_fields = {
            "driver": inventory.driver_version or unknown("NVML gave no driver version"),
            "cuda_driver": inventory.cuda_driver_version or unknown("NVML gave no CUDA driver version"),
            "gpu_count": inventory.count,
            "gpu_models": sorted({d.name for d in inventory.devices}),
            "gpus": [
                {
                    "index": d.index,
                    "name": d.name,
                    "uuid": d.uuid,
                    "memory_gib": round(d.memory_total_bytes / (1 << 30), 1),
                    "compute_capability": d.compute_capability,
                    "pci_bus_id": d.pci_bus_id or unknown("NVML gave no PCI bus id"),
                    "nvlinks": d.nvlinks,
                }
                for d in inventory.devices
            ],
        }
    return {
        **gpu_fields,
        "p2p": dict(p2p) if p2p is not None else unknown(why),
        "topology": dict(topology) if topology is not None else unknown(why),
        "nvidia_smi_topo": smi_topo,
        "container_toolkit": toolkit,
        "engine_runtimes": runtimes,
        "cdi": cdi,
    }


# -- the launch ----------------------------------------------------------------------------------


def overrides_of(notes: Sequence[str]) -> list[str]:
    """The --set overrides a LaunchSpec was resolved with (kit.launch writes them as notes)."""
    return [n.removeprefix("override: ") for n in notes if n.startswith("override: ")]


def limits_data(limits: Any) -> dict:
    """PhaseLimits as JSON (kit.logs.verdicts.PhaseLimits)."""
    from kit.output import jsonable

    data = jsonable(limits)
    for name in ("cpu_counts_in", "compile_counts_in"):  # sets: sorted, or their order changes per process
        if name in data:
            data[name] = sorted(data[name] or [])
    return data


def limits_from_data(data: Mapping[str, Any]) -> Any:
    """The PhaseLimits a bundle recorded; InputError names the field when it is not readable."""
    from dataclasses import fields

    from kit.errors import InputError
    from kit.logs import PhaseLimits, StageSeconds

    try:
        values = {f.name: data[f.name] for f in fields(PhaseLimits) if f.name in data}
        values["deadline_s"] = StageSeconds(**values["deadline_s"])
        values["stall_window_s"] = StageSeconds(**values["stall_window_s"])
        for name in ("cpu_counts_in", "compile_counts_in", "deadlines_given"):  # JSON lists back to sets
            if name in values:
                values[name] = frozenset(values[name] or ())
        return PhaseLimits(**values)
    except (KeyError, TypeError) as exc:
        raise InputError(
            "fingerprint.json: launch.limits", f"not readable ({exc})", "make the bundle again"
        ) from exc


def launch_section(
    *,
    target: str | dict,
    profile: str | dict,
    model: str | dict,
    dialect: str | dict,
    device: str | dict,
    ranks: int | dict,
    overrides: list[str] | dict,
    argv: Sequence[str] | dict,
    env: Mapping[str, str] | dict,
    container: dict,
    limits: dict | Unknown,
    argv_from: str,
    port: int | None = None,
    catalog_argv: Sequence[str] | None = None,
) -> dict:
    """The launch with every secret masked: env values of secret names, values of secret flags."""
    secrets: list[str] = []
    secret_flags: list[str] = []
    if isinstance(env, Mapping) and not is_unknown(env):
        env_masked, secrets_found = split_env(env)
        secrets = list(secrets_found)
        env_out: Any = dict(sorted(env_masked.items()))
    else:
        env_out = env
    if is_unknown(argv):
        argv_out: Any = argv
    else:
        masked, flags = mask_argv(list(argv))  # type: ignore[arg-type]
        argv_out, secret_flags = masked, list(flags)
    section = {
        "target": target,
        "profile": profile,
        "model": model,
        "dialect": dialect,
        "device": device,
        "ranks": ranks,
        "overrides": overrides,
        "fault": (env.get("KIT_FAULT") or None) if isinstance(env, Mapping) and not is_unknown(env) else None,
        "argv": argv_out,
        "argv_from": argv_from,
        "env": env_out,
        "secrets": secrets,
        "secret_flags": secret_flags,
        "port": port,
        "container": container,
        "limits": limits,
    }
    if catalog_argv is not None:
        section["catalog_argv"] = mask_argv(list(catalog_argv))[0]
    return section


# -- one builder: a source's facts -> the fingerprint ---------------------------------------------


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def made(by: str) -> dict:
    return {"by": by, "at": now_iso()}


def kit_section() -> dict:
    """The kit that made the fingerprint: its version decides argv translation and verdict rules."""
    import kit

    return {"version": kit.__version__}


@dataclass(frozen=True)
class Launch:
    """A source's answer about its launch, unmasked: launch_section masks it."""

    catalog: Mapping[str, Any]  # target, profile, model, dialect, device, ranks, overrides, port
    argv: Sequence[str] | Unknown
    env: Mapping[str, str] | Unknown
    settings: dict | Unknown  # the container's settings (a host process's pid, unit and restart)
    argv_from: str
    catalog_argv: Sequence[str] | None = None  # the catalog's argv, where another one ran


class FactSource(Protocol):
    """The questions the builder asks of what ran a server. kit/diagnose/fact_sources.py answers
    them for a container, a replayed scenario, a host process and a pasted log; each answer is a
    section (or {"unknown": why}), and a reader may raise KitError or OSError (the engine or the
    process went away): the fingerprint then says so."""

    by: str  # who made the fingerprint: "kit up", "kit watch (host)", ...

    @property
    def absent(self) -> str | None:
        """Why there is nothing to read at all (a host server's process is gone), else None."""
        ...

    def image(self) -> tuple[dict, dict, str | None]:
        """(image section, versions section, the lock's text or None)."""
        ...

    def host(self) -> dict: ...

    def nvidia(self) -> dict: ...

    def launch(self) -> Launch: ...

    def process(self) -> dict | None:
        """What only a host process has (interpreter, unit, its whole environment, masked), else None."""
        ...

    def raw_launch(self) -> tuple[dict[str, str], list[str]]:
        """The unmasked environment and argv, for the Redactor only; never raises."""
        ...


@dataclass(frozen=True)
class Built:
    """A fingerprint, the lock text beside it (lock.txt), and what the Redactor must mask."""

    fingerprint: dict
    lock: str | None
    raw_env: dict[str, str]
    raw_argv: list[str]


def failed(by: str, why: str) -> dict:
    """The fingerprint of a source that could not be read."""
    return {"format": FORMAT, "made": made(by), "error": unknown(why)}


def build(source: FactSource, limits: Any) -> Built:
    """The fingerprint of SOURCE, the one way every fingerprint of a start-up is made."""
    from kit.errors import KitError

    raw_env, raw_argv = source.raw_launch()
    if source.absent is not None:
        return Built(failed(source.by, source.absent), None, raw_env, raw_argv)
    try:
        image, versions, lock = source.image()
        fingerprint = {
            "format": FORMAT,
            "kit": kit_section(),
            "made": made(source.by),
            "image": image,
            "versions": versions,
            "host": source.host(),
            "nvidia": source.nvidia(),
            "launch": launch_of(source.launch(), limits),
        }
        process = source.process()
    except (KitError, OSError) as exc:  # the engine or the process went away between the verdict and now
        why = exc.one_line() if isinstance(exc, KitError) else str(exc)
        return Built(failed(source.by, why), None, raw_env, raw_argv)
    if process is not None:
        fingerprint["process"] = process
    return Built(fingerprint, lock, raw_env, raw_argv)


def launch_of(launch: Launch, limits: Any) -> dict:
    """The launch section: the source's answer, masked, with the limits the verdict was reached under."""
    return launch_section(
        **launch.catalog,
        argv=launch.argv,
        env=launch.env,
        container=launch.settings,
        limits=limits_data(limits) if limits is not None else unknown("no limits were applied"),
        argv_from=launch.argv_from,
        catalog_argv=launch.catalog_argv,
    )


# -- comparing -----------------------------------------------------------------------------------

# Suspects, most likely first: (group, key patterns). A key takes the first group it matches.
SUSPECTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "versions",
        (
            r"versions\.sglang",
            r"versions\.nccl",
            r"versions\.torch",
            r"versions\.cuda",
            r"nvidia\.driver",
            r"nvidia\.cuda_driver",
            r"versions\.flashinfer",
            r"versions\.sglang_kernel",
            r"versions\.(?!from$).*",
        ),
    ),
    (
        "gpus",
        (
            r"nvidia\.gpu_count",
            r"nvidia\.gpu_models",
            r"nvidia\.gpus(\.\d+\.(name|compute_capability|memory_gib))?",
        ),
    ),
    ("p2p and topology", (r"nvidia\.p2p(\..*)?", r"nvidia\.topology(\..*)?", r"nvidia\.nvidia_smi_topo")),
    ("environment", (r"launch\.env(\..*)?", r"launch\.secrets")),
    ("argv", (r"launch\.argv",)),
    ("overrides", (r"launch\.overrides",)),
)
OTHERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("image", (r"image\.(name|tag|id|digest)",)),
    ("image lock", (r"image\.lock\..*",)),
    ("launch", (r"launch\..*",)),
    ("nvidia", (r"nvidia\..*",)),
    ("host", (r"host\..*",)),
    ("kit", (r"kit\..*",)),
    ("other", (r".*",)),
)
MATTERS = {group for group, _ in SUSPECTS} | {"image"}
# Not facts about a start-up: when and how a bundle was made, where its versions were read, and
# the names one run's container had (its name, its session label).
_IGNORED = re.compile(
    r"^(made|format)(\.|$)|^versions\.from$|^image\.lock\.(sha256|from)$|^launch\.argv_from$"
    r"|^launch\.container\.(name|labels\.io\.kit\.session)$"
)
_ORDER = [(group, re.compile(p)) for group, patterns in (*SUSPECTS, *OTHERS) for p in patterns]


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys to leaves; lists of plain values and unknown markers are leaves."""
    if is_unknown(data) or not isinstance(data, (Mapping, list)):
        return {prefix: data}
    if isinstance(data, list) and all(not isinstance(v, (Mapping, list)) for v in data):
        return {prefix: data}
    items = data.items() if isinstance(data, Mapping) else enumerate(data)
    out: dict[str, Any] = {}
    for key, value in items:
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    if not out and prefix:
        out[prefix] = data
    return out


def _rank(key: str) -> tuple[int, str]:
    for index, (group, pattern) in enumerate(_ORDER):
        if pattern.fullmatch(key):
            return index, group
    return len(_ORDER), "other"


@dataclass(frozen=True)
class Difference:
    key: str
    group: str
    a: Any
    b: Any
    matters: bool

    @property
    def one_side_unknown(self) -> bool:
        return is_unknown(self.a) or is_unknown(self.b)

    def describe(self, a_name: str = "A", b_name: str = "B") -> str:
        if self.key == "launch.argv" and isinstance(self.a, list) and isinstance(self.b, list):
            return f"{self.key}: {argv_change(self.a, self.b)}"
        return f"{self.key}: {show_value(self.a)} ({a_name}) -> {show_value(self.b)} ({b_name})"


@dataclass(frozen=True)
class FingerprintDiff:
    differences: tuple[Difference, ...]
    equal: int
    unknown_both: int
    groups: dict[str, int] = field(default_factory=dict)

    @property
    def suspects(self) -> tuple[Difference, ...]:
        return tuple(d for d in self.differences if d.matters)


def show_value(value: Any) -> str:
    if value is None:
        return "(absent)"
    if is_unknown(value):
        return f"unknown ({value['unknown']})"
    if isinstance(value, list):
        return shlex.join(str(v) for v in value) if value else "(none)"
    return str(value)


def argv_change(a: Sequence[str], b: Sequence[str]) -> str:
    """'--tp-size 2 -> 4; added --disable-custom-all-reduce' from two argv lists."""
    parts = []
    matcher = difflib.SequenceMatcher(a=list(a), b=list(b), autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "replace":
            parts.append(f"{shlex.join(a[i1:i2])} -> {shlex.join(b[j1:j2])}")
        elif op == "delete":
            parts.append(f"removed {shlex.join(a[i1:i2])}")
        elif op == "insert":
            parts.append(f"added {shlex.join(b[j1:j2])}")
    return "; ".join(parts) or "(same)"


def diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> FingerprintDiff:
    """What differs between two fingerprints, likely suspects first; equal fields only counted."""
    flat_a, flat_b = flatten(a), flatten(b)
    found: list[tuple[tuple[int, str], Difference]] = []
    equal = unknown_both = 0
    for key in sorted(flat_a.keys() | flat_b.keys()):
        if _IGNORED.search(key):
            continue
        va, vb = flat_a.get(key), flat_b.get(key)
        if is_unknown(va) and is_unknown(vb):
            unknown_both += 1
            continue
        if va == vb:
            equal += 1
            continue
        if va == MASK and vb == MASK:
            equal += 1
            continue
        rank, group = _rank(key)
        found.append(((rank, key), Difference(key, group, va, vb, group in MATTERS)))
    found.sort(key=lambda item: item[0])
    differences = tuple(d for _, d in found)
    groups: dict[str, int] = {}
    for d in differences:
        groups[d.group] = groups.get(d.group, 0) + 1
    return FingerprintDiff(differences, equal, unknown_both, groups)
