"""Check a command's JSON against the documented JSON Schemas in docs/schema/.

    validate(document, "analyze")       raises SchemaMismatch naming the first wrong field
    problems(document, "up-events")     every mismatch, as "path: message" lines

Schemas: common (ranks, spans, causes), analyze, up-result (kit up/watch's last line), up-events
(every line of their JSON-lines stream), smoke. They reference each other by `$id`
(urn:sglang-kit:schema:NAME). Uses the `jsonschema` package (installed with the test and dev
extras), imported only when a check runs.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from kit import paths
from kit.errors import EnvironmentProblem

SCHEMAS = ("common", "analyze", "up-result", "up-events", "smoke")
_URN = "urn:sglang-kit:schema:"


class SchemaMismatch(ValueError):
    """A document does not match its schema; the message names the field and what is wrong."""


def schema_dir() -> Path:
    """docs/schema in a checkout, or the copy a wheel carries (kit/_project/docs/schema)."""
    return paths.project_root() / "docs" / "schema"


@cache
def load(name: str) -> dict[str, Any]:
    if name not in SCHEMAS:
        raise ValueError(f"unknown schema {name!r} (one of {', '.join(SCHEMAS)})")
    path = schema_dir() / f"{name}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise EnvironmentProblem(f"cannot read the JSON Schema {path}: {exc.strerror or exc}") from exc


@cache
def _validator(name: str) -> Any:
    try:
        from jsonschema import Draft202012Validator
        from referencing import Registry, Resource
    except ImportError as exc:  # a runtime install without the test/dev extras
        raise EnvironmentProblem(
            "checking JSON against the schemas needs the jsonschema package",
            hint="pip install 'sglang-kit[test]'",
        ) from exc
    registry = Registry().with_resources(
        (f"{_URN}{other}", Resource.from_contents(load(other))) for other in SCHEMAS
    )
    schema = load(name)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, registry=registry)


def problems(document: Any, name: str) -> list[str]:
    """Every way `document` differs from schema `name`, as `path: message` (empty when it fits)."""
    found = []
    for error in sorted(_validator(name).iter_errors(document), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(part) for part in error.absolute_path) or "(top)"
        found.append(f"{where}: {error.message}")
    return found


def validate(document: Any, name: str) -> None:
    """Raise SchemaMismatch when `document` does not match schema `name`."""
    found = problems(document, name)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise SchemaMismatch(f"{name} schema: {found[0]}{more}")
