"""The kit image nearest to a host environment, and a host bundle made ready for `kit repro`.

    nearest_image(manifests, versions)   the manifest whose pins match the versions best (pure)
    host_replay(bundle)                  a host bundle with that image, the image's interpreter in
                                         its argv, and the version differences to print first

Matching weighs what decides a start-up most: SGLang, then torch and the CUDA build, then NCCL,
flashinfer and sgl-kernel, then Python. A field scores 1 when equal, a share of it when the
release numbers agree in their leading parts (0.5.22 is nearer 0.5.23 than 0.5.10), 0.75 when only
the local build label differs (2.14.1 vs 2.14.1+cu130); ties go to the smaller numeric distance,
then the name. An environment with CUDA torch is never matched with the CPU rehearsal on SGLang's
version alone: the CUDA field weighs as much as torch.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from kit.diagnose import fingerprint as fp
from kit.errors import InputError

FIELDS: tuple[tuple[str, float], ...] = (
    ("sglang", 8.0),
    ("torch", 4.0),
    ("cuda", 4.0),
    ("nccl", 2.0),
    ("flashinfer", 2.0),
    ("sglang_kernel", 2.0),
    ("python", 1.0),
)
_ABSENT = ("not installed", "not pinned (not installed)", "")


@dataclass(frozen=True)
class VersionDifference:
    name: str
    host: str
    image: str

    def line(self) -> str:
        return f"{self.name}: {self.host} (host) -> {self.image} (image)"


@dataclass(frozen=True)
class Choice:
    manifest: str
    tag: str
    score: float
    best: float  # what a perfect match would score
    same: tuple[str, ...]
    differences: tuple[VersionDifference, ...]


def _shown(value: Any) -> str:
    if value is None or fp.is_unknown(value):
        return "unknown"
    return "not installed" if str(value) in _ABSENT else str(value)


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def similarity(host: Any, image: Any) -> tuple[float, float]:
    """(0..1 alike, numeric distance) of two version fields. Pure."""
    a, b = _shown(host), _shown(image)
    if a == b:
        return (1.0 if a != "unknown" else 0.0), 0.0
    va, vb = _version(a.removeprefix("python")), _version(b.removeprefix("python"))
    if va is None or vb is None:
        return 0.0, 1e9
    if va.release == vb.release:
        return 0.75, 0.0  # same release, another build (local label, post release)
    shared = 0
    for x, y in zip(va.release, vb.release, strict=False):
        if x != y:
            break
        shared += 1
    longest = max(len(va.release), len(vb.release))
    first_diff = va.release[shared] if shared < len(va.release) else 0
    other = vb.release[shared] if shared < len(vb.release) else 0
    return 0.7 * shared / longest, float(abs(first_diff - other))


def manifest_versions(manifest: Any) -> dict:
    return fp.versions_from_pins(
        manifest.pins.model_dump(), manifest.base.python, f"images/{manifest.name}.toml"
    )


def compare(
    host: Mapping[str, Any], image: Mapping[str, Any]
) -> tuple[tuple[str, ...], tuple[VersionDifference, ...]]:
    same, different = [], []
    for name, _ in FIELDS:
        a, b = _shown(host.get(name)), _shown(image.get(name))
        if a == b:
            same.append(name)
        else:
            different.append(VersionDifference(name, a, b))
    return tuple(same), tuple(different)


def nearest_image(manifests: Sequence[Any], versions: Mapping[str, Any]) -> Choice:
    """The manifest whose pins are nearest to VERSIONS (a fingerprint's `versions` section). Pure."""
    if not manifests:
        raise InputError("images/", "this kit has no image manifests", "add images/NAME.toml")
    ranked = []
    best = sum(weight for _, weight in FIELDS)
    for manifest in manifests:
        pins = manifest_versions(manifest)
        score = distance = 0.0
        for name, weight in FIELDS:
            alike, far = similarity(versions.get(name), pins.get(name))
            score += weight * alike
            distance += weight * far
        same, differences = compare(versions, pins)
        ranked.append((-round(score, 6), distance, manifest.name, manifest, same, differences, score))
    ranked.sort(key=lambda r: r[:3])
    _, _, name, manifest, same, differences, score = ranked[0]
    return Choice(name, manifest.tag, round(score, 2), best, same, differences)


# -- a host bundle, ready for kit repro ----------------------------------------------------------


@dataclass(frozen=True)
class HostReplay:
    bundle: Any  # kit.diagnose.bundle.Bundle, its fingerprint naming the chosen image
    choice: Choice
    notes: tuple[str, ...]


def is_host_bundle(fingerprint: Mapping[str, Any]) -> bool:
    launch = fingerprint.get("launch")
    container = launch.get("container") if isinstance(launch, dict) else None
    return isinstance(container, dict) and container.get("kind") == "host process"


def replay_argv(argv: Sequence[str], launcher: Sequence[str]) -> list[str] | None:
    """The host argv with the image's launcher in front of SGLang's flags (the host interpreter's path
    means nothing in the image); None when the argv does not run SGLang's launcher."""
    joined = " ".join(argv)
    if "sglang.launch_server" not in joined and "sglang serve" not in joined:
        return None
    first_flag = next((i for i, a in enumerate(argv) if a.startswith("--")), len(argv))
    return [*launcher, *argv[first_flag:]]


def host_replay(bundle: Any, manifests: Sequence[Any] | None = None) -> HostReplay | None:
    """For a bundle of a host process: the nearest image written into its fingerprint, the argv's
    interpreter replaced by the catalog's launcher, container settings left to the catalog.
    None for any other bundle (its own image is replayed)."""
    from kit.diagnose.fact_sources import HostReplayFacts
    from kit.diagnose.hostenv import infer_target
    from kit.images.manifest import load_all
    from kit.launch import resolve

    finger = bundle.fingerprint
    if not is_host_bundle(finger):
        return None
    versions = finger.get("versions") if isinstance(finger.get("versions"), dict) else {}
    choice = nearest_image(load_all() if manifests is None else manifests, versions)
    launch = finger["launch"]
    argv = fp.known(launch.get("argv"))
    target = fp.known(launch.get("target")) or (infer_target(argv) if isinstance(argv, list) else None)
    if not isinstance(target, str):
        raise InputError(
            str(bundle.path),
            "the host bundle names no catalog target to replay",
            "make it again with 'kit bundle create --pid N --target T'",
        )
    base = resolve(target, image=choice.manifest)
    launcher = list(base.argv[: next((i for i, a in enumerate(base.argv) if a.startswith("--")), 0)])
    notes = [
        f"a host process, replayed in the nearest kit image {choice.manifest} "
        f"(score {choice.score:g} of {choice.best:g}; same: {', '.join(choice.same) or 'none'})"
    ]
    argv_out, argv_from = launch.get("argv"), str(launch.get("argv_from") or "the host bundle's argv")
    if isinstance(argv, list):
        replayed = replay_argv([str(a) for a in argv], launcher)
        if replayed is None:
            notes.append("the host argv does not run sglang.launch_server; replayed as it is")
        else:
            before = [str(a) for a in argv[: len(argv) - len(replayed) + len(launcher)]]
            if before != launcher:
                notes.append(f"argv: the host's {' '.join(before)} -> {' '.join(launcher)} (the image's)")
                argv_from = f"the host process's argv with {choice.manifest}'s launcher (kit repro)"
            argv_out = replayed
    recorded = launch.get("limits")
    limits = (
        fp.limits_from_data(recorded) if isinstance(recorded, dict) and not fp.is_unknown(recorded) else None
    )
    source = HostReplayFacts(finger, choice.manifest, target, argv_out, argv_from)
    changed = fp.build(source, limits).fingerprint
    members = {**bundle.members, "fingerprint.json": (json.dumps(changed, indent=2) + "\n").encode()}
    replayed_bundle = dataclasses.replace(bundle, members=members)
    # summary.md must agree with the rewritten fingerprint, or repro reads the rewrite as a hand edit;
    # a summary that already disagreed with the host's own fingerprint is kept, so the edit still shows.
    from kit.diagnose.show import rendered_summary, summary_differs

    if not summary_differs(bundle):
        members["summary.md"] = rendered_summary(replayed_bundle).encode("utf-8")
        replayed_bundle = dataclasses.replace(bundle, members=members)
    return HostReplay(replayed_bundle, choice, tuple(notes))
