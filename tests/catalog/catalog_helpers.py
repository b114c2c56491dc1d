"""Shared test helpers: a throw-away copy of the catalog, a TOML writer, and the CLI in-process."""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from kit.catalog._load import CATALOG_DIR
from kit.cli import main


def copy_catalog(tmp: Path) -> Path:
    """kit/catalog's data (hardware.toml, models/) copied under tmp; returns the new catalog dir."""
    root = tmp / "catalog"
    (root / "models").mkdir(parents=True, exist_ok=True)
    shutil.copy(CATALOG_DIR / "hardware.toml", root / "hardware.toml")
    for path in (CATALOG_DIR / "models").iterdir():
        if path.suffix in (".toml", ".json"):
            shutil.copy(path, root / "models" / path.name)
    return root


def toml_string(text: str) -> str:
    # JSON's escapes are TOML's, except that TOML refuses surrogate escapes and a raw DEL.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        assert math.isfinite(value)
        text = repr(value)
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_string(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))


def dumps_toml(document: dict[str, Any]) -> str:
    """Enough TOML for tests: every top-level key as `"key" = value`, tables inline."""
    return "".join(f"{toml_string(str(k))} = {toml_value(v)}\n" for k, v in document.items())


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """`kit ARGV` in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as info:
        main(argv)
    code = info.value.code
    return (code if isinstance(code, int) else (0 if code is None else 1)), out.getvalue(), err.getvalue()
