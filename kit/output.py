"""One place decides how a result is shown: rich text for people, JSON for machines.

Commands return data (pydantic models, dataclasses, dicts); `show` prints it either way and the CLI
returns the exit code that came with it. Nothing else in the kit prints results.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any

from rich.console import Console

_stdout = Console(highlight=False, soft_wrap=True)
_stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def console() -> Console:
    return _stdout


def err_console() -> Console:
    return _stderr


def jsonable(value: Any) -> Any:
    """Turn results into plain JSON types (pydantic models, dataclasses, enums, paths, tuples)."""
    if hasattr(value, "model_dump"):
        return jsonable(value.model_dump(mode="json"))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    return value


def emit_json(value: Any, *, stream=None) -> None:
    """One JSON document (or one line of a JSON-lines stream) on stdout."""
    stream = stream or sys.stdout
    stream.write(json.dumps(jsonable(value), separators=(",", ":"), sort_keys=False) + "\n")
    stream.flush()


def show(result: Any, *, as_json: bool, human: Callable[[Any, Console], None]) -> None:
    if as_json:
        emit_json(result)
    else:
        human(result, _stdout)
