"""SGLang dialects: one data file per range of releases (kit/dialects/*.toml), read by name.

An image manifest names its dialect; the dialect turns a profile's intent into that release's flags
and env and holds its rules. A new SGLang release that renames or removes something is one new file
here (often a few lines with `extends`). See docs/catalog.md.
"""

from __future__ import annotations

import functools
from pathlib import Path

from pydantic import ValidationError

from kit.catalog._errors import translate as _schema_error
from kit.catalog._load import deep_merge, read_toml
from kit.dialects._schema import FACTS, INTENTS, Companion, Dialect, Flag, Removed, Rule
from kit.dialects._translate import Translation, facts_of, matches, translate
from kit.errors import InputError

DIALECTS_DIR = Path(__file__).resolve().parent

__all__ = [
    "DIALECTS_DIR",
    "FACTS",
    "INTENTS",
    "Companion",
    "Dialect",
    "Flag",
    "Removed",
    "Rule",
    "Translation",
    "facts_of",
    "list_dialects",
    "load_dialect",
    "matches",
    "translate",
]


def list_dialects(directory: Path | None = None) -> list[str]:
    return sorted(p.stem for p in (directory or DIALECTS_DIR).glob("*.toml"))


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
    # Tables merge key by key; lists (companions, rules) are replaced whole when a file gives them.
    own = {k: v for k, v in data.items() if k != "extends"}
    return {**deep_merge(_raw(parent, directory, (*chain, parent)), own), "extends": parent}


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
    """The dialect NAME (kit/dialects/NAME.toml), with `extends` merged."""
    return _cached(name) if directory is None else parse_dialect(name, Path(directory))
