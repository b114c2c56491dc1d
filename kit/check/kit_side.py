"""The kit's side of a conformance cell: what `kit validate` says, and what the driver should run.

Resolving a cell is exactly `kit validate`'s path: a temporary image manifest says 'this target's
image, with sglang RELEASE and the dialect its range picks'. Pure but for reading data files.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kit.catalog import load_catalog
from kit.check.matrix import Cell
from kit.dialects import Dialect, Rule, dialect_for, matches, translate
from kit.errors import InputError
from kit.images.manifest import load_manifest
from kit.launch import Resolved, context_of, intent_of, resolve_full


@dataclass(frozen=True)
class KitSide:
    """What the kit says about one cell on one release."""

    dialect: str
    errors: tuple[Rule, ...]
    """The dialect's error rules that fire: the kit's claim that SGLang refuses this."""
    warnings: tuple[str, ...]
    policy: tuple[str, ...]
    """The kit's own findings (TP fits the GPUs, memory, pitfalls): beyond the parser, not compared."""
    request: dict[str, Any]
    """What the driver runs (kit.check.check_request), with an id."""
    expect: str | None = None
    """Probes and companion variants: 'refused', 'warned', 'silent' or 'accepted'."""
    argv: tuple[str, ...] = ()


def _manifest_text(data: dict[str, Any]) -> str:
    lines: list[str] = []
    tables: list[str] = []
    for key, value in data.items():
        if isinstance(value, dict):
            tables.append(f"\n[{key}]")
            tables += [f"{k} = {_value(v)}" for k, v in value.items() if v is not None]
        elif value is not None:
            lines.append(f"{key} = {_value(value)}")
    return "\n".join(lines + tables) + "\n"


def _value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else str(value)


class Releases:
    """Image manifests that say 'this target's image, with sglang RELEASE and its dialect by range'.

    They live in a temporary images folder, so resolving a cell is exactly `kit validate`'s path.
    """

    def __init__(self, directory: Path):
        self.directory = directory
        self._made: dict[tuple[str, str], str] = {}

    def image(self, base_image: str, release: str) -> str:
        key = (base_image, release)
        if key not in self._made:
            base = load_manifest(base_image)
            name = f"{base.name}--as-sglang-{release}"
            data = base.model_dump(mode="json")
            data.update(name=name, dialect=dialect_for(release).name)
            data["pins"]["sglang"] = release
            data["description"] = f"{base.description}, with sglang {release} (conformance matrix)"
            (self.directory / f"{name}.toml").write_text(_manifest_text(data), encoding="utf-8")
            self._made[key] = name
        return self._made[key]


def _request(r: Resolved, cell_id: str, args: Sequence[str] | None = None, env: dict | None = None) -> dict:
    from kit.check import check_request

    request = check_request(r)
    if args is not None:
        request["args"] = list(args)
    if env is not None:
        request["env"] = env
    request["id"] = cell_id
    return request


def kit_side(cell: Cell, release: str, releases: Releases) -> KitSide | str:
    """The kit's verdict and the driver's request for CELL on RELEASE, or why the cell cannot exist."""
    from kit.validate import findings_for

    catalog = load_catalog()
    if cell.target not in catalog.targets:
        return f"unknown target '{cell.target}'"
    image = releases.image(catalog.targets[cell.target][1].image, release)
    try:
        r = resolve_full(cell.target, image=image, overrides=cell.overrides, images_dir=releases.directory)
    except InputError as exc:
        return f"not a valid launch for the catalog: {exc}"
    cell_id = f"{release}|{cell.key}"
    findings, _ = findings_for(r)
    fired = tuple(rule for rule in r.dialect.rules if matches(rule.when, r.translation.facts))
    errors = tuple(rule for rule in fired if rule.severity == "error")
    warns = tuple(rule.id for rule in fired if rule.severity == "warning")
    dialect_ids = {f"{r.dialect.name}:{rule.id}" for rule in fired}
    policy = tuple(sorted({f.id for f in findings if f.severity == "error" and f.id not in dialect_ids}))
    if cell.probe is not None:
        probe = cell.probe
        request = _request(r, cell_id, [*r.spec.argv[3:], *probe.args], {**r.spec.env, **probe.env})
        return KitSide(
            r.dialect.name, errors, warns, policy, request, fate(r.dialect, probe.names), r.spec.argv
        )
    if cell.without is not None:
        return _without(cell, r, cell_id, errors, warns, policy)
    return KitSide(r.dialect.name, errors, warns, policy, _request(r, cell_id), None, r.spec.argv)


def fate(dialect: Dialect, name: str) -> str:
    """What the dialect says the release does with an old NAME (a flag or an env variable)."""
    if name.startswith("--"):
        if name in dialect.deprecated.flags:
            return "warned"
        if name in dialect.renamed or name in dialect.removed.flags:
            return "refused"
        return "accepted"
    if name in dialect.deprecated.env:
        return "warned"
    if name in dialect.removed.env:
        return "silent"
    return "accepted"


def companion_cells(cell: Cell, release: str, releases: Releases) -> list[Cell]:
    """For each companion that filled in intent on this cell, the same cell without it."""
    catalog = load_catalog()
    if cell.probe or cell.without or cell.target not in catalog.targets:
        return []
    image = releases.image(catalog.targets[cell.target][1].image, release)
    try:
        r = resolve_full(cell.target, image=image, overrides=cell.overrides, images_dir=releases.directory)
    except InputError:
        return []
    return [
        replace(cell, without=companion.id)
        for companion in r.dialect.companions
        if companion.id in r.translation.applied
        and companion.set
        and any(r.translation.intent.get(k) == v for k, v in companion.set.items())
    ]


def _without(cell: Cell, r: Resolved, cell_id: str, errors, warns, policy) -> KitSide:
    dialect = r.dialect.model_copy(
        update={"companions": tuple(c for c in r.dialect.companions if c.id != cell.without)}
    )
    gpus = r.spec.gpus
    bare = translate(
        dialect,
        intent_of(r.profile, r.model, r.spec.device),
        context=context_of(r.model, r.profile, r.hardware, gpus),
        profile_env=r.profile.env,
        extra_args=r.profile.extra_args,
    )
    request = _request(r, cell_id, list(bare.args), dict(bare.env))
    return KitSide(r.dialect.name, errors, warns, policy, request, "refused", r.spec.argv)
