"""The conformance matrix: `kit validate`'s hand-written rules against each release's own parser.

`kit validate` is fast because each dialect encodes a range of SGLang releases by hand; `kit check`
is right because it runs the release's own ServerArgs (and, for hybrid models on CUDA, its attention
registry). The matrix holds the two together, cell by cell (a target, `--set` overrides, a
release). It also checks the dialects' other claims: a companion that fills in intent must be
needed (the launch without it is refused), and an old flag or variable is refused, warned about or
ignored as the dialect's [renamed] / [removed] / [deprecated] say.

The parts, along their seams:

    kit/check/matrix.py     matrix.toml as data, its cells                       pure
    kit/check/kit_side.py   what `kit validate` says about a cell; the request   pure (data files)
    kit/check/compare.py    agree / unverified / not run / disagree / error      pure
    kit/check/table.py      docs/conformance.md                                  pure
    this module             the shell: venvs, one driver process per release, `jobs` at a time
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from kit.check.compare import STATUSES, Outcome, Report, compare
from kit.check.kit_side import KitSide, Releases, companion_cells, fate, kit_side
from kit.check.matrix import (
    MATRIX,
    Cell,
    Group,
    Matrix,
    Probe,
    Subset,
    cells_of,
    load_matrix,
    planned_count,
    read_matrix_toml,
)
from kit.check.table import render_markdown, unexercised
from kit.dialects import dialect_for
from kit.errors import KitError

__all__ = [
    "MATRIX",
    "STATUSES",
    "Cell",
    "Group",
    "KitSide",
    "Matrix",
    "Outcome",
    "Probe",
    "Releases",
    "Report",
    "Subset",
    "cells_of",
    "companion_cells",
    "compare",
    "fate",
    "kit_side",
    "load_matrix",
    "plan",
    "planned_count",
    "read_matrix_toml",
    "render_markdown",
    "run_matrix",
    "run_release",
    "unexercised",
]

Progress = Callable[[str, int], None]
"""progress(message, cells_done_since_last_call)."""


def plan(
    matrix: Matrix, release: str, cells: Sequence[Cell], releases: Releases
) -> tuple[list[tuple[Cell, KitSide]], list[Outcome]]:
    """The kit's side of every cell on RELEASE (plus companion variants), and the cells skipped."""
    planned: list[tuple[Cell, KitSide]] = []
    skipped: list[Outcome] = []
    for cell in cells:
        for each in [cell, *companion_cells(cell, release, releases)]:
            side = kit_side(each, release, releases)
            if isinstance(side, str):
                skipped.append(Outcome(release, each, "skipped", "not a launch", side))
            else:
                planned.append((each, side))
    return planned, skipped


def run_release(
    release: str, cells: Sequence[Cell], releases: Releases, progress: Progress, matrix: Matrix
) -> tuple[list[Outcome], float]:
    from kit.check import ensure_venv, run_cells

    planned, outcomes = plan(matrix, release, cells, releases)
    venv, setup = ensure_venv(release, lambda message: progress(f"{release}: {message}", 0))
    progress(f"{release}: SGLang's parser on {len(planned)} cells", len(outcomes))
    results = run_cells(
        venv,
        [side.request for _, side in planned],
        on_result=lambda _: progress(f"{release}: running", 1),
        timeout_s=max(600.0, 5.0 * len(planned)),
    )
    by_key = {cell.key: side.request["id"] for cell, side in planned}
    for cell, side in planned:
        base = results.get(by_key.get(replace(cell, without=None).key, "")) if cell.without else None
        outcomes.append(compare(release, cell, side, results[side.request["id"]], base))
    return outcomes, setup


def run_matrix(
    *,
    releases: Sequence[str] | None = None,
    groups: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    jobs: int = 2,
    matrix: Matrix | None = None,
    progress: Progress = lambda message, done: None,
) -> Report:
    """Every cell on every release; releases run in parallel, `jobs` at a time."""
    matrix = matrix or load_matrix()
    chosen = tuple(releases or matrix.releases)
    cells = cells_of(matrix, groups, keys)
    started = time.monotonic()
    report = Report(releases=chosen, groups=tuple(groups or [g.name for g in matrix.groups] + ["old-names"]))
    with tempfile.TemporaryDirectory(prefix="kit-conformance-") as tmp:
        made = Releases(Path(tmp))
        for release in chosen:  # resolve every dialect up front: a release no range covers is input
            dialect_for(release)
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {r: pool.submit(run_release, r, cells, made, progress, matrix) for r in chosen}
            for release, future in futures.items():
                try:
                    outcomes, setup = future.result()
                except KitError as exc:
                    raise KitError(f"sglang {release}: {exc}") from exc
                report.outcomes += outcomes
                report.setup_seconds[release] = round(setup, 1)
    report.seconds = round(time.monotonic() - started, 1)
    return report
