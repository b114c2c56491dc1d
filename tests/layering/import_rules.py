"""The kit's layering as a check: every import in kit/ (at module level and inside functions, where
the old startup/diagnose tangle hid) against the table in docs/layers.toml.

    load_table(path) -> Table            units, the module prefixes each owns, what each may import
    imports_in(source, module) -> edges  every `import kit...` / `from kit... import ...` in a file
    forbidden(table, edges) -> lines     one line per import the table does not allow
    cycles(table) -> lines               the table itself must be a layering: no unit reaches itself

Pure (text and data in, lines out), so a made-up forbidden edge can prove the check bites.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Unit:
    name: str
    modules: tuple[str, ...]  # dotted prefixes: "kit.logs" owns kit.logs and kit.logs.*; "=kit": only kit
    may_import: frozenset[str]
    owns: str = ""


@dataclass(frozen=True)
class Table:
    units: Mapping[str, Unit]

    def unit_of(self, module: str) -> str | None:
        """The unit owning MODULE: the longest prefix that matches at a dot (kit.model.snapshots
        before kit.model)."""
        best, best_len = None, -1
        for unit in self.units.values():
            for prefix in unit.modules:
                exact = prefix.startswith("=")
                prefix = prefix.removeprefix("=")
                fits = module == prefix or (not exact and module.startswith(prefix + "."))
                if fits and len(prefix) > best_len:
                    best, best_len = unit.name, len(prefix)
        return best


@dataclass(frozen=True)
class Edge:
    importer: str  # dotted module doing the import
    imported: str  # dotted module (or module.name) imported
    line: int


def load_table(path: Path) -> Table:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    units: dict[str, Unit] = {}
    for name, raw in data["unit"].items():
        units[name] = Unit(
            name=name,
            modules=tuple(raw["modules"]),
            may_import=frozenset(raw.get("may_import", ())),
            owns=raw.get("owns", ""),
        )
    unknown = {d for u in units.values() for d in u.may_import} - set(units)
    if unknown:
        raise ValueError(f"may_import names units that do not exist: {sorted(unknown)}")
    return Table(units)


def module_name(root: Path, path: Path) -> str:
    """kit/logs/stacks.py -> kit.logs.stacks; kit/logs/__init__.py -> kit.logs (ROOT holds kit/)."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_in(source: str, module: str, *, package: bool = False) -> list[Edge]:
    """Every kit import in SOURCE, wherever it sits (module level, functions, TYPE_CHECKING blocks).

    `from kit.x import y` is recorded as kit.x.y, so a submodule imported by name lands in its own
    unit; a name that is not a module falls back to kit.x's unit by prefix."""
    edges: list[Edge] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing package, up level-1 more
                here = module.split(".") if package else module.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        edges += [Edge(module, n, node.lineno) for n in names if n == "kit" or n.startswith("kit.")]
    return sorted(edges, key=lambda e: e.line)  # ast.walk goes breadth first; report in file order


def edges_of_tree(root: Path) -> list[Edge]:
    """Every kit import of every module under ROOT/kit."""
    edges: list[Edge] = []
    for path in sorted((root / "kit").rglob("*.py")):
        module = module_name(root, path)
        edges += imports_in(path.read_text(encoding="utf-8"), module, package=path.name == "__init__.py")
    return edges


def unowned(table: Table, modules: Iterable[str]) -> list[str]:
    """Modules no unit owns: a new package must be placed in the table before it is imported."""
    return sorted(m for m in modules if table.unit_of(m) is None)


def forbidden(table: Table, edges: Iterable[Edge]) -> list[str]:
    """One line per import the table does not allow (a unit may always import itself)."""
    lines = []
    for edge in edges:
        src, dst = table.unit_of(edge.importer), table.unit_of(edge.imported)
        if src is None or dst is None:
            lines.append(f"{edge.importer}:{edge.line} imports {edge.imported}: no unit owns one of them")
        elif src != dst and dst not in table.units[src].may_import:
            allowed = ", ".join(sorted(table.units[src].may_import)) or "nothing"
            lines.append(
                f"{edge.importer}:{edge.line} imports {edge.imported}: {src} may not import {dst} "
                f"(docs/layers.toml; may import: {allowed})"
            )
    return lines


def cycles(table: Table) -> list[str]:
    """Units that can reach themselves through may_import: the table must describe layers."""
    found = []
    for name in table.units:
        seen: set[str] = set()
        todo = list(table.units[name].may_import)
        while todo:
            unit = todo.pop()
            if unit == name:
                found.append(f"{name} can reach itself through may_import")
                break
            if unit not in seen:
                seen.add(unit)
                todo += table.units[unit].may_import
    return found
