"""SGLang dialects: one data file per range of releases (kit/dialects/*.toml), read by name.

An image manifest names its dialect; the dialect turns a profile's intent into that release's flags
and env and holds its rules. A new SGLang release that renames or removes something is one new file
here (often a few lines with `extends`). See docs/catalog.md.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from kit.catalog._errors import translate as _schema_error
from kit.catalog._load import deep_merge, read_toml
from kit.dialects._schema import FACTS, INTENTS, Companion, Deprecated, Dialect, Flag, Removed, Rule
from kit.dialects._translate import Translation, facts_of, matches, translate
from kit.errors import InputError

DIALECTS_DIR = Path(__file__).resolve().parent
_REPLACED_WHOLE = ("deprecated",)

__all__ = [
    "DIALECTS_DIR",
    "FACTS",
    "INTENTS",
    "Companion",
    "Deprecated",
    "Dialect",
    "Flag",
    "Removed",
    "Rule",
    "Translation",
    "dialect_for",
    "dialects_dir",
    "facts_of",
    "list_dialects",
    "load_dialect",
    "matches",
    "translate",
]


def dialects_dir() -> Path:
    """kit/dialects, or $KIT_DIALECTS_DIR: a folder of dialect files to try."""
    override = os.environ.get("KIT_DIALECTS_DIR")
    return Path(override) if override else DIALECTS_DIR


def list_dialects(directory: Path | None = None) -> list[str]:
    return sorted(p.stem for p in (directory or dialects_dir()).glob("*.toml"))


def _raw(name: str, directory: Path, chain: tuple[str, ...]) -> dict:
    path = directory / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(list_dialects(directory)) or "none"
        raise InputError("dialect", f"unknown dialect '{name}'", f"known dialects: {known}")
    data = read_toml(path)
    parent = data.get("extends")
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise InputError(f"{path}: extends", "must be a dialect name", 'e.g. extends = "sglang-0.5.16"')
    if parent in chain:
        raise InputError(f"{path}: extends", f"cycle through {' -> '.join((*chain, parent))}", "break it")
    # Tables merge key by key; lists (companions, rules) and [deprecated] are replaced whole when a
    # file gives them (a release that stops taking an old name must be able to drop it).
    own = {k: v for k, v in data.items() if k != "extends"}
    merged = deep_merge(_raw(parent, directory, (*chain, parent)), own)
    for key in _REPLACED_WHOLE:
        if key in own:
            merged[key] = own[key]
    return {**merged, "extends": parent}


def parse_dialect(name: str, directory: Path) -> Dialect:
    path = directory / f"{name}.toml"
    data = _raw(name, directory, (name,))
    try:
        dialect = Dialect.model_validate(data)
    except ValidationError as exc:
        raise _schema_error(path, exc, Dialect) from exc
    if dialect.name != name:
        raise InputError(f"{path}: name", f"'{dialect.name}' differs from the file name", f"use '{name}'")
    return dialect


@functools.cache
def _cached(name: str) -> Dialect:
    return parse_dialect(name, DIALECTS_DIR)


def load_dialect(name: str, directory: Path | None = None) -> Dialect:
    """The dialect NAME (kit/dialects/NAME.toml, or $KIT_DIALECTS_DIR), with `extends` merged."""
    directory = directory or dialects_dir()
    return _cached(name) if directory == DIALECTS_DIR else parse_dialect(name, Path(directory))


if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet


def _range(dialect: Dialect) -> SpecifierSet:
    # packaging is imported here, not at the top: kit validate answers in a fresh process and
    # never needs it (only the conformance matrix and its tests pick a dialect by release).
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(dialect.sglang)
    except InvalidSpecifier as exc:
        raise InputError(
            f"dialect {dialect.name}: sglang", f"'{dialect.sglang}' is not a range", "e.g. '>=0.5.16,<0.5.21'"
        ) from exc


def dialect_for(release: str, directory: Path | None = None) -> Dialect:
    """The one dialect whose `sglang` range holds RELEASE (e.g. 0.5.10 -> sglang-0.5.10)."""
    from packaging.version import InvalidVersion, Version

    try:
        version = Version(release)
    except InvalidVersion as exc:
        raise InputError("release", f"'{release}' is not a version", "e.g. 0.5.10.post1") from exc
    found = [
        dialect
        for dialect in (load_dialect(name, directory) for name in list_dialects(directory))
        if _range(dialect).contains(version, prereleases=True)
    ]
    if len(found) != 1:
        which = ", ".join(f"{d.name} ({d.sglang})" for d in found) or "none"
        raise InputError(
            "release",
            f"{len(found)} dialects cover sglang {release}: {which}",
            "make the ranges in kit/dialects/ meet without overlap",
        )
    return found[0]
