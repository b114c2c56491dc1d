"""The rungs of a bisect and the changes on them: what each launches, resolved through the catalog.

plan_rungs("qwen-mtp", None, ())                 # doctor, preflight, base (qwen-base), target
apply_change(rung, change, image_built=..., nvlink=False)   # Variant | Skip | why-not (str)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from kit.catalog._load import read_toml
from kit.errors import InputError
from kit.launch import Resolved, resolve_full
from kit.pivot.ladder import Change, Rung, Variant
from kit.pivot.sglang_rules import Skip, launch_facts, sglang_skip


def base_of(r: Resolved) -> tuple[str, tuple[str, ...], str]:
    """(catalog target, extra overrides, what it is) for the base rung of resolved target R."""
    raw = read_toml(r.model.path).get("profiles", {}).get(r.target_def.profile, {})
    parent = raw.get("extends") if isinstance(raw, dict) else None
    if parent:
        for name, target in sorted(r.model.targets.items()):
            if target.profile == parent:
                return name, (), f"{name} (profile {parent}, which {r.target_def.profile} extends)"
    if r.profile.speculative is not None:
        return r.target, ("speculative=none",), f"{r.target} with MTP off"
    return r.target, (), f"{r.target} (its profile has no MTP)"


def plan_rungs(target: str, image: str | None, overrides: tuple[str, ...]) -> tuple[Rung, ...]:
    r = resolve_full(target, image=image, overrides=overrides)
    image_name = r.spec.image
    base_target, base_extra, base_about = base_of(r)
    base = resolve_full(base_target, image=image_name, overrides=(*overrides, *base_extra)).spec
    same = base.argv == r.spec.argv and base.env == r.spec.env and base.image_ref == r.spec.image_ref
    return (
        Rung("doctor", target, image_name, overrides, "host checks for the target"),
        Rung("preflight", target, image_name, overrides, "the image's SGLang groups alone"),
        Rung("base", base_target, image_name, (*overrides, *base_extra), base_about),
        Rung("target", target, image_name, overrides, f"{target} itself", same_as="base" if same else None),
    )


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version))


def previous_image(image: str) -> str | None:
    """The image of the same flavour with the newest SGLang older than IMAGE's (by manifest pins)."""
    from kit import paths
    from kit.images.manifest import load_manifest

    current = load_manifest(image)
    older = []
    for path in sorted(paths.images_dir().glob("*.toml")):
        try:
            other = load_manifest(path.stem)
        except InputError:
            continue
        if other.flavor == current.flavor and _version_key(other.pins.sglang) < _version_key(
            current.pins.sglang
        ):
            older.append((_version_key(other.pins.sglang), other.name))
    return max(older)[1] if older else None


def apply_change(
    rung: Rung,
    change: Change | None,
    *,
    image_built: Callable[[str], bool],
    nvlink: bool | None = None,
) -> Variant | Skip | str:
    """The rung with CHANGE applied; a Skip where SGLang's own rules make the change a no-op on this
    launch (NVLINK: the host's GPUs joined by NVLink, None unknown); or why it does not apply (str)."""
    if change is None:
        return Variant(rung, None, rung.target, rung.image, rung.overrides)
    if rung.name not in change.rungs:
        return "applies to " + ", ".join(change.rungs)
    r = resolve_full(rung.target, image=rung.image, overrides=rung.overrides)
    profile, spec = r.profile, r.spec
    overrides = rung.overrides
    image = rung.image
    if change.needs == "speculative" and profile.speculative is None:
        return "the profile has no MTP"
    if change.needs == "cuda_graph" and not profile.cuda_graph:
        return "CUDA graphs are already off"
    if change.kind == "set":
        for item in change.set:
            key, _, value = item.partition("=")
            if key.startswith("env.") and spec.env.get(key[4:]) == value:
                return f"{key[4:]}={value} is already set"
        overrides = (*overrides, *change.set)
    elif change.kind == "extra_arg":
        if change.arg in profile.extra_args or change.arg in spec.argv:
            return f"{change.arg} is already set"
        overrides = (*overrides, f"extra_args={json.dumps([*profile.extra_args, change.arg])}")
    elif change.kind == "attention":
        choices = [b for b in change.backends.get(spec.device, ()) if b != profile.attention_backend]
        if not choices:
            return f"no other attention backend listed for {spec.device}"
        overrides = (*overrides, f"attention_backend={choices[0]}")
    elif change.kind == "image":
        previous = previous_image(rung.image)
        if previous is None:
            return f"no older {r.manifest.flavor} image than {rung.image}"
        from kit.images.manifest import load_manifest

        if not image_built(load_manifest(previous).tag):
            return f"{previous} is not built (kit image build {previous})"
        image = previous
    else:
        return f"unknown kind {change.kind}"
    return sglang_skip(change.id, launch_facts(spec, nvlink=nvlink)) or Variant(
        rung, change, rung.target, image, overrides
    )
