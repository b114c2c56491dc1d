"""The layering of docs/architecture.md holds: every import in kit/ (module level and inside
functions) is one docs/layers.toml allows, the table is a layering, and the check bites on a
made-up forbidden import."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from import_rules import (
    Edge,
    Table,
    Unit,
    cycles,
    edges_of_tree,
    forbidden,
    imports_in,
    load_table,
    module_name,
    unowned,
)

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "layers.toml"
MAX_LINES = 600


@pytest.fixture(scope="module")
def table() -> Table:
    return load_table(TABLE)


def test_every_module_in_kit_belongs_to_a_unit(table):
    modules = [module_name(ROOT, p) for p in (ROOT / "kit").rglob("*.py")]
    assert len(modules) > 100
    assert unowned(table, modules) == []


def test_no_import_in_kit_crosses_the_layering(table):
    edges = edges_of_tree(ROOT)
    assert any(e.importer.startswith("kit.startup") and e.imported.startswith("kit.diagnose") for e in edges)
    assert forbidden(table, edges) == []


def test_the_table_is_a_layering(table):
    assert cycles(table) == []


def test_startup_and_diagnose_do_not_import_each_other_both_ways(table):
    assert "diagnose" in table.units["startup"].may_import
    assert "startup" not in table.units["diagnose"].may_import
    assert "diagnose" not in table.units["runtime"].may_import


def test_no_module_in_kit_is_over_600_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "kit").rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


# -- the checker itself: a made-up forbidden edge fails -----------------------------------------

_UPWARD = '''
"""A diagnose module that calls start-up back from inside a function: the old tangle."""
import json

from kit.logs.stacks import classify_stack


def limits(spec):
    from kit.startup.up import run_up

    return run_up
'''


def test_a_function_level_import_against_the_table_is_reported(table):
    edges = imports_in(_UPWARD, "kit.diagnose.made_up")
    assert [(e.imported, e.line) for e in edges] == [
        ("kit.logs.stacks.classify_stack", 5),
        ("kit.startup.up.run_up", 9),
    ]
    lines = forbidden(table, edges)
    assert len(lines) == 1
    assert lines[0].startswith(
        "kit.diagnose.made_up:9 imports kit.startup.up.run_up: diagnose may not import startup"
    )


def test_module_level_type_checking_and_relative_imports_are_seen(table):
    source = (
        "from typing import TYPE_CHECKING\n"
        "import kit.cli\n"
        "if TYPE_CHECKING:\n"
        "    from kit.startup.result import UpResult\n"
        "from . import activity\n"
        "from ..pivot import doctor\n"
    )
    edges = imports_in(source, "kit.logs.made_up")
    assert [e.imported for e in edges] == [
        "kit.cli",
        "kit.startup.result.UpResult",
        "kit.logs.activity",
        "kit.pivot.doctor",
    ]
    assert len(forbidden(table, edges)) == 3  # cli, startup, pivot; its own package is fine
    package = imports_in("from .stacks import classify_stack\n", "kit.logs", package=True)
    assert [e.imported for e in package] == ["kit.logs.stacks.classify_stack"]


def test_a_submodule_lands_in_its_own_unit(table):
    assert table.unit_of("kit.model.snapshots") == "model-cache"
    assert table.unit_of("kit.model.verify") == "model"
    assert table.unit_of("kit") == "core"
    assert table.unit_of("kitchen.sink") is None
    runtime_reads_the_cache = Edge("kit.runtime.host.model_cache", "kit.model.snapshots.scan_cache", 1)
    runtime_fetches = Edge("kit.runtime.host.model_cache", "kit.model.fetch.fetch_repo", 2)
    assert forbidden(table, [runtime_reads_the_cache]) == []
    assert len(forbidden(table, [runtime_fetches])) == 1


def test_the_in_image_code_imports_nothing_of_the_kit(table):
    edges = imports_in("from kit.errors import InputError\n", "kit.rehearsal.made_up")
    assert len(forbidden(table, edges)) == 1


def test_a_table_with_a_loop_is_refused():
    loop = Table(
        {
            "a": Unit("a", ("kit.a",), frozenset({"b"})),
            "b": Unit("b", ("kit.b",), frozenset({"c"})),
            "c": Unit("c", ("kit.c",), frozenset({"a"})),
        }
    )
    assert sorted(cycles(loop)) == [f"{u} can reach itself through may_import" for u in "abc"]


# -- the doc says what the table says ------------------------------------------------------------

_ROW = re.compile(r"^\|\s*`(?P<unit>[a-z-]+)`\s*\|.*\|\s*(?P<may>[^|]*)\|\s*$")


def test_architecture_doc_lists_every_unit_with_what_it_may_import(table):
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        if match := _ROW.match(line):
            may = match["may"].replace("`", "").strip()
            rows[match["unit"]] = set() if may == "nothing" else {m.strip() for m in may.split(",")}
    assert rows == {name: set(unit.may_import) for name, unit in table.units.items()}
