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
import tomllib
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from kit.catalog._errors import _submodel, allowed_keys, translate
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
            raise InputError(f"--set {here}", "unknown key", f"allowed keys: {allowed_keys(model)}")
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


def apply_overrides(profile: dict, overrides: Sequence[str]) -> dict:
    """A copy of the raw profile table with each override applied in order (later ones win)."""
    result = copy.deepcopy(profile)
    for item in overrides:
        parts, text = parse_override(item)
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
