"""No two modules of a package import each other, directly or round a longer circle, counting the
imports made only for type checking and inside functions (a circle is a circle wherever it is written)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2] / "kit"


def _imports(package: str) -> dict[str, set[str]]:
    """module -> the modules of PACKAGE it imports anywhere in its text."""
    folder = KIT / package.removeprefix("kit.").replace(".", "/")
    modules = {f"{package}.{p.stem}": p for p in folder.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


@pytest.mark.parametrize("package", ["kit.logs"])
def test_no_import_circle_inside_the_package(package):
    assert _circle(_imports(package)) is None, " -> ".join(_circle(_imports(package)) or [])


def test_the_circle_finder_finds_a_circle():
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set()}) is None
