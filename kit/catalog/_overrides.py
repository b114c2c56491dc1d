"""`--set key=value` overrides: dotted keys into a profile, applied before anything is checked.

    --set mamba_cache=no_buffer          a profile key
    --set speculative.num_steps=2        a key of a sub-table
    --set env.NCCL_P2P_DISABLE=1         an entry of a free-form table (env, container.ulimits)
    --set speculative=none               back to the default (here: no speculative decoding)

Values are read as TOML values (2, 0.85, true, ["a", "b"]); anything that is not one is a string,
so `--set reasoning_parser=qwen3` needs no quotes. Entries of `env` always stay strings.
"""

from __future__ import annotations

import copy
import difflib
import tomllib
import typing
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from kit.catalog._errors import _submodel, translate
from kit.catalog._schema import Profile
from kit.errors import InputError

_STRING_TABLES = {("env",)}
RESET = "none"


def parse_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_override(item: str) -> tuple[tuple[str, ...], str]:
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise InputError(f"--set {item}", "expected KEY=VALUE", "e.g. --set mamba_cache=no_buffer")
    parts = tuple(key.split("."))
    if any(not p for p in parts):
        raise InputError(f"--set {key}", "empty part in the dotted key", "e.g. speculative.num_steps")
    return parts, value.strip()


def _check_path(parts: tuple[str, ...], model: type[BaseModel] = Profile) -> tuple[bool, bool]:
    """Raise unless `parts` names a settable key. Returns (inside a free-form table, keeps strings)."""
    for depth, part in enumerate(parts):
        here = ".".join(parts[: depth + 1])
        fields = {(f.alias or n): f for n, f in model.model_fields.items()}
        field = fields.get(part)
        if field is None or part == "extends":
            raise InputError(f"--set {here}", "unknown key", _closest(part, model))
        rest = parts[depth + 1 :]
        if not rest:
            return False, parts[: depth + 1] in _STRING_TABLES
        inner = _submodel(field.annotation)
        annotation_text = str(field.annotation)
        if inner is None and annotation_text.startswith("dict["):
            if len(rest) > 1:
                raise InputError(
                    f"--set {'.'.join(parts)}", f"'{here}' holds plain values", f"use {here}.NAME=VALUE"
                )
            return True, parts[: depth + 1] in _STRING_TABLES
        if inner is None:
            raise InputError(
                f"--set {'.'.join(parts)}", f"'{here}' is a value, not a table", f"use {here}=VALUE"
            )
        model = inner
    return False, False


def _closest(part: str, model: type[BaseModel]) -> str:
    """The keys nearest to a misspelt one (not all of them: a profile has two dozen)."""
    names = [f.alias or n for n, f in model.model_fields.items() if (f.alias or n) != "extends"]
    near = difflib.get_close_matches(part, names, n=3, cutoff=0.5)
    if near:
        return "did you mean " + " or ".join(near) + "? docs/catalog.md lists the keys"
    return "docs/catalog.md lists the keys, e.g. --set mem_fraction=0.85"


# Strict: `true` is no integer, 1e21 no context length, nan and inf no number (TOML reads all of them).
_STRICT = ConfigDict(strict=True, allow_inf_nan=False)


def _leaf(parts: tuple[str, ...], model: type[BaseModel] = Profile) -> Any:
    """The type (with its bounds) of the value at `parts`, a path _check_path accepted."""
    annotation: Any = None
    for depth, part in enumerate(parts):
        if annotation is not None:  # a free-form table: its values' type
            return typing.get_args(annotation)[1]
        fields = {(f.alias or n): f for n, f in model.model_fields.items()}
        field = fields[part]
        if depth == len(parts) - 1:
            return Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
        inner = _submodel(field.annotation)
        if inner is None:
            annotation = field.annotation
        else:
            model = inner
    return annotation


def _literals(kind: Any) -> list[str]:
    if typing.get_origin(kind) is typing.Literal:
        return [str(a) for a in typing.get_args(kind)]
    return [v for arg in typing.get_args(kind) for v in _literals(arg)]


def _example(kind: Any, key: str) -> tuple[str, str]:
    """What a value of this type is, and an example of the --set syntax for it."""
    text = str(kind)
    literal = _literals(kind)
    if literal:
        return f"one of {', '.join(literal)}", f"--set {key}={literal[0]}"
    if "tuple[" in text or "list[" in text:
        return "a list of strings", f'--set \'{key}=["--flag", "value"]\''
    if "bool" in text:
        return "true or false", f"--set {key}=false"
    seconds = key.startswith("timing.")
    if "int" in text:
        return "a whole number", f"--set {key}={600 if seconds else 4}"
    if "float" in text:
        return "a finite number", f"--set {key}={600 if seconds else 0.85}"
    if "kit.catalog" in text:
        return "a table", f"--set {key}.KEY=VALUE one key at a time, or --set {key}=none"
    return "a string", f"--set {key}=value"


def _unprintable(text: str) -> str | None:
    bad = next((c for c in text if not c.isprintable()), None)
    return None if bad is None else repr(bad)


def check_override(item: str) -> tuple[tuple[str, ...], Any]:
    """One `--set KEY=VALUE` parsed and checked strictly, before anything is resolved: the key
    exists, the value has the key's type and bounds, nothing unprintable (a newline would land in
    a rendered unit or Compose file as a line of its own). Returns (dotted key, value or RESET)."""
    bad = _unprintable(item)
    if bad:
        key = item.partition("=")[0]
        raise InputError(
            f"--set {_printable(key)}",
            f"a control character ({bad}) in the value",
            "one line of printable text: a newline would end up as a line of its own in a unit file",
        )
    parts, text = parse_override(item)
    _, keep_string = _check_path(parts)
    key = ".".join(parts)
    if text.lower() == RESET:
        return parts, RESET
    value: Any = text if keep_string else parse_value(text)
    if isinstance(value, list):
        value = tuple(value)
    kind = _leaf(parts)
    try:
        TypeAdapter(kind, config=_STRICT).validate_python(value)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        message = str(err["msg"]).removeprefix("Value error, ").replace("Input should be", "must be")
        what, example = _example(kind, key)
        if err["type"] in ("literal_error", "enum"):
            message, what = f"'{text}' is not one of the values", what
        elif err["type"].endswith("_type") or err["type"] == "finite_number":
            message, what = f"'{text}' is not {what}", "one"
        else:
            message = f"{message} (got {text})"
        raise InputError(f"--set {key}", message, f"give {what}, e.g. {example}") from None
    except Exception:  # a type a TypeAdapter cannot take alone (a forward reference): the full check decides
        pass
    return parts, value


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)


def apply_overrides(profile: dict, overrides: Sequence[str]) -> dict:
    """A copy of the raw profile table with each override applied in order (later ones win)."""
    result = copy.deepcopy(profile)
    for item in overrides:
        parts, _ = check_override(item)
        text = parse_override(item)[1]
        _, keep_string = _check_path(parts)
        node = result
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        if text.lower() == RESET:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = text if keep_string else parse_value(text)
    return result


def profile_with_overrides(profile: dict, overrides: Sequence[str]) -> Profile:
    """The checked profile; a value the schema refuses is an InputError naming the --set key."""
    table = apply_overrides(profile, overrides)
    try:
        return Profile.model_validate(table)
    except ValidationError as exc:
        raise translate("--set", exc, Profile) from exc
