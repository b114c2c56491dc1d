"""No module of kit/ imports itself back, directly or round a longer circle, within a package or
across packages, counting the imports made only for type checking and inside functions (a circle is a
circle wherever it is written; tests/layering/import_rules.py reads them all)."""

from __future__ import annotations

from pathlib import Path

from import_rules import edges_of_tree, module_name

ROOT = Path(__file__).resolve().parents[2]


def module_graph(root: Path) -> dict[str, set[str]]:
    """module -> the kit modules it imports anywhere in its text (`from kit.x import name` is kit.x,
    `from kit.x import submodule` is kit.x.submodule)."""
    modules = {module_name(root, p) for p in (root / "kit").rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for edge in edges_of_tree(root):
        target = edge.imported
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != edge.importer:
            graph[edge.importer].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each set of modules that import one another round a circle (a strongly connected component of
    more than one module), sorted."""
    reach: dict[str, set[str]] = {}
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo += graph.get(node, ())
        reach[start] = seen
    found = {frozenset({v} | {w for w in reach[v] if v in reach[w]}) for v in graph if v in reach[v]}
    return sorted(sorted(c) for c in found)


def test_no_import_circle_anywhere_in_kit():
    graph = module_graph(ROOT)
    assert len(graph) > 100
    assert circles(graph) == []


def test_the_circle_finder_finds_every_circle_and_nothing_else():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}, "e": set()}) == [["a", "b"], ["c", "d"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_a_function_level_import_across_packages_makes_an_edge():
    graph = module_graph(ROOT)
    # kit/cli/up.py imports kit.startup.run_up inside the `up` command only
    assert "kit.startup" in graph["kit.cli.up"]
    assert "kit.images.manifest" in graph["kit.images.build"]
