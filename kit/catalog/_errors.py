"""Pydantic's validation errors as the kit's one-line input errors: file, key, problem, allowed keys.

Shared by the catalog and the dialect loaders, so every data file fails the same way.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from kit.errors import InputError


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (Model, Model | None, dict[str, Model], ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, dict, list, tuple):
        for arg in typing.get_args(annotation):
            found = _submodel(arg)
            if found:
                return found
    return None


def model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel]:
    """The model that owns the last key of `loc` (for its list of allowed keys)."""
    model = root
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        if field is None:
            continue  # a dict key or a list index: stay on the model that holds it
        inner = _submodel(field.annotation)
        if inner is None:
            break
        model = inner
    return model


def allowed_keys(model: type[BaseModel]) -> str:
    return ", ".join(field.alias or name for name, field in model.model_fields.items())


# What each pydantic type is called in the hint, with TOML's syntax for it (not "give a int").
_SYNTAX = {
    "int": "a whole number, e.g. 4",
    "float": "a number, e.g. 0.85",
    "bool": "true or false",
    "string": 'a string, e.g. "qwen3"',
    "tuple": 'a list, e.g. ["--flag", "value"]',
    "list": 'a list, e.g. ["a", "b"]',
    "model": "a table: [section] with key = value lines, or {key = value}",
    "dict": "a table: [section] with key = value lines, or {key = value}",
    "finite_number": "a finite number, e.g. 600",
}


def translate(
    where: Path | str, exc: ValidationError, root: type[BaseModel], prefix: tuple[str, ...] = ()
) -> InputError:
    """The first error as an InputError naming `where: dotted.key`."""
    err = exc.errors(include_url=False)[0]
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    key = ".".join(str(p) for p in (*prefix, *loc)) or "(top level)"
    model = model_at(root, loc) if loc else root
    fix = f"allowed keys: {allowed_keys(model)}"
    kind = err["type"]
    if kind == "extra_forbidden":
        return InputError(f"{where}: {key}", "unknown key", fix)
    if kind == "missing":
        return InputError(f"{where}: {key}", "missing", fix)
    message = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    # Cross-field checks say which key they mean ("hardware: ..."); put it into the dotted key.
    owner = model_at(root, (*loc, "")) if loc else root
    field, sep, rest = message.partition(": ")
    if sep and field.split(".")[0] in owner.model_fields:
        key = ".".join(str(p) for p in (*prefix, *loc, field))
        message = rest
        fix = f"allowed keys: {allowed_keys(model_at(root, (*loc, *field.split('.'))))}"
    given = err.get("input")
    if kind not in ("model_type", "dict_type") and isinstance(given, (str, int, float, bool)):
        message = f"{message} (got {given!r})"
    if kind in ("literal_error", "enum"):
        fix = "use one of the values above"
    elif kind.endswith("_type") or kind.endswith("_parsing"):
        base = kind.removesuffix("_type").removesuffix("_parsing")
        fix = "give " + _SYNTAX.get(base, f"a {base}")
    return InputError(f"{where}: {key}", message, fix)
