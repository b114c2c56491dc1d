"""Load the catalog: kit/catalog/models/*.toml (one file per model) and kit/catalog/hardware.toml.

Every problem in a file is one InputError naming the file, the key and the allowed keys. Profiles
are merged along `extends` first, then checked one by one, so an error names the profile it is in.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kit.catalog._errors import translate
from kit.catalog._schema import Hardware, ModelFacts, ModelFile, Profile, Target
from kit.errors import InputError

CATALOG_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class CatalogModel:
    facts: ModelFacts
    profiles: dict[str, dict]
    """Profile name -> its raw table with `extends` merged in (overrides apply to this, then checked)."""
    path: Path
    targets: dict[str, Target]

    @property
    def config_path(self) -> Path | None:
        return self.path.parent / self.facts.config_json if self.facts.config_json else None

    def profile(self, name: str) -> Profile:
        return Profile.model_validate(self.profiles[name])


@dataclass(frozen=True)
class Catalog:
    models: dict[str, CatalogModel]
    targets: dict[str, tuple[str, Target]]
    """Target name -> (model name, target)."""
    hardware: dict[str, Hardware]


def read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(path), f"not valid TOML ({exc})", "fix the syntax") from exc
    except UnicodeDecodeError as exc:
        raise InputError(str(path), "not UTF-8 text", "save it as UTF-8") from exc
    except OSError as exc:
        raise InputError(str(path), f"cannot read it ({exc.strerror})", "check the file") from exc


def deep_merge(base: dict, over: dict) -> dict:
    """`over` on top of `base`; tables merge key by key, everything else is replaced."""
    merged = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _merge_profiles(path: Path, raw: dict[str, dict]) -> dict[str, dict]:
    merged: dict[str, dict] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> dict:
        if name in merged:
            return merged[name]
        table = raw[name]
        if not isinstance(table, dict):
            raise InputError(f"{path}: profiles.{name}", "must be a table", "write [profiles.NAME]")
        parent = table.get("extends")
        own = {k: v for k, v in table.items() if k != "extends"}
        if parent is None:
            result = own
        elif not isinstance(parent, str) or parent not in raw:
            raise InputError(
                f"{path}: profiles.{name}.extends",
                f"unknown profile {parent!r}",
                f"known profiles: {', '.join(raw)}",
            )
        elif parent in chain:
            raise InputError(
                f"{path}: profiles.{name}.extends",
                f"extends itself through {' -> '.join((*chain, name, parent))}",
                "break the cycle",
            )
        else:
            result = deep_merge(resolve(parent, (*chain, name)), own)
        merged[name] = result
        return result

    for name in raw:
        resolve(name, ())
    return merged


def parse_model_file(path: Path) -> CatalogModel:
    data = read_toml(path)
    try:
        parsed = ModelFile.model_validate(data)
    except ValidationError as exc:
        raise translate(path, exc, ModelFile) from exc
    if parsed.model.name != path.stem:
        raise InputError(
            f"{path}: model.name", f"'{parsed.model.name}' differs from the file name", f"use '{path.stem}'"
        )
    profiles = _merge_profiles(path, parsed.profiles)
    for name, table in profiles.items():
        try:
            Profile.model_validate(table)
        except ValidationError as exc:
            raise translate(path, exc, Profile, ("profiles", name)) from exc
    for name, table in profiles.items():
        reference = (table.get("smoke") or {}).get("greedy_reference")
        if reference is not None and (reference not in profiles or profiles[reference].get("speculative")):
            plain = [p for p, t in profiles.items() if not t.get("speculative")]
            raise InputError(
                f"{path}: profiles.{name}.smoke.greedy_reference",
                f"'{reference}' is not a profile of this model without speculative decoding",
                f"one of: {', '.join(plain) or 'none'}",
            )
    for name, target in parsed.targets.items():
        if target.profile not in profiles:
            raise InputError(
                f"{path}: targets.{name}.profile",
                f"unknown profile '{target.profile}'",
                f"known profiles: {', '.join(profiles)}",
            )
    model = CatalogModel(facts=parsed.model, profiles=profiles, path=path, targets=dict(parsed.targets))
    if model.config_path is not None:
        _check_config_json(path, model.config_path)
    return model


def _check_config_json(path: Path, config: Path) -> None:
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(
            f"{path}: model.config_json", f"cannot read {config.name}", "put it beside the file"
        ) from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"{config}", f"not valid JSON ({exc})", "fix the syntax") from exc
    if not isinstance(data, dict) or not isinstance(data.get("architectures"), list):
        raise InputError(f"{config}: architectures", "missing", "SGLang reads architectures[0]")


def parse_hardware(path: Path) -> dict[str, Hardware]:
    if not path.is_file():
        return {}
    result = {}
    for name, table in read_toml(path).items():
        try:
            result[name] = Hardware.model_validate(table)
        except ValidationError as exc:
            raise translate(path, exc, Hardware, (name,)) from exc
    return result


def _load(directory: Path) -> Catalog:
    hardware = parse_hardware(directory / "hardware.toml")
    models: dict[str, CatalogModel] = {}
    targets: dict[str, tuple[str, Target]] = {}
    for path in sorted((directory / "models").glob("*.toml")):
        model = parse_model_file(path)
        models[model.facts.name] = model
        for name, target in model.targets.items():
            if name in targets:
                raise InputError(
                    f"{path}: targets.{name}",
                    f"also defined by model '{targets[name][0]}'",
                    "target names are global: rename one",
                )
            if target.hardware and target.hardware not in hardware:
                raise InputError(
                    f"{path}: targets.{name}.hardware",
                    f"unknown hardware '{target.hardware}'",
                    f"known: {', '.join(hardware) or 'none'} (kit/catalog/hardware.toml)",
                )
            targets[name] = (model.facts.name, target)
    return Catalog(models=models, targets=targets, hardware=hardware)


@functools.cache
def _load_default() -> Catalog:
    return _load(CATALOG_DIR)


def load_catalog(directory: Path | None = None) -> Catalog:
    """The catalog in `directory`, else $KIT_CATALOG_DIR, else the kit's own (read once per process)."""
    directory = directory or os.environ.get("KIT_CATALOG_DIR") or None
    return _load_default() if directory is None else _load(Path(directory))
