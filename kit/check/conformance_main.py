"""`scripts/conformance`: run the conformance matrix, write docs/conformance.md, exit 1 on any disagreement.

Unverified and not-run cells are counted and listed apart from agreement; they do not fail the run.

scripts/conformance                    the full matrix (every release in kit/check/matrix.toml)
scripts/conformance --ci               the CI subset (one release per dialect, the groups that ever disagreed)
scripts/conformance --release 0.5.23 --group mamba --jobs 2 --out -
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kit import paths
from kit.check.conformance import load_matrix, planned_count, render_markdown, run_matrix
from kit.errors import ExitCode, KitError
from kit.output import emit_json, err_console


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--release", "releases", multiple=True, metavar="X.Y.Z", help="Only these releases (repeatable)."
)
@click.option(
    "--group",
    "groups",
    multiple=True,
    metavar="NAME",
    help="Only these groups (repeatable; 'old-names' = probes).",
)
@click.option("--ci", is_flag=True, help="The CI subset: [ci] in kit/check/matrix.toml.")
@click.option("--jobs", "-j", default=2, show_default=True, help="Releases checked in parallel.")
@click.option(
    "--out",
    default=None,
    metavar="PATH",
    help="Where the table goes ('-' for stdout). Default: docs/conformance.md for the full matrix, "
    "none otherwise.",
)
@click.option("--json", "as_json", is_flag=True, help="Print every outcome as JSON instead of a summary.")
def main(releases, groups, ci, jobs, out, as_json) -> None:
    matrix = load_matrix()
    keys = None
    if ci:
        releases = releases or matrix.ci.releases
        keys = matrix.ci.cells
    chosen = tuple(releases or matrix.releases)
    full = not ci and not releases and not groups
    if out is None and full:
        out = str(paths.project_root() / "docs" / "conformance.md")
    console = err_console()
    total = planned_count(matrix, chosen, groups or None, keys)
    started = time.monotonic()
    with Progress(
        TextColumn("[bold]conformance[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as bar:
        task = bar.add_task("", total=total)

        def progress(message: str, done: int) -> None:
            if done:
                # Companion variants come on top of the planned cells: let the total grow.
                left = bar.tasks[0].total - bar.tasks[0].completed
                if done > left:
                    bar.update(task, total=bar.tasks[0].total + done - left)
                bar.advance(task, done)
            bar.update(task, description=message[:80])
            if not console.is_terminal and done == 0 and ("parser on" in message or "creating" in message):
                console.print(message)

        report = run_matrix(
            releases=chosen, groups=groups or None, keys=keys, jobs=jobs, matrix=matrix, progress=progress
        )
    command = "scripts/conformance" + "".join(
        [" --ci" if ci else "", *(f" --release {r}" for r in releases), *(f" --group {g}" for g in groups)]
    )
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime()) + f", --jobs {jobs}"
    if out:
        text = render_markdown(report, matrix, command=command, when=when)
        if out == "-":
            sys.stdout.write(text)
        else:
            Path(out).write_text(text, encoding="utf-8")
    bad = report.disagreements
    if as_json:
        emit_json(
            {
                "seconds": report.seconds,
                "cells": report.ran,
                "releases": list(report.releases),
                "disagreements": len(bad),
                "counts": report.counts(),
                "outcomes": [
                    {
                        "release": o.release,
                        "cell": o.cell.key,
                        "group": o.cell.group,
                        "status": o.status,
                        "mark": o.mark,
                        "detail": o.detail,
                    }
                    for o in report.outcomes
                ],
            }
        )
    else:
        for o in bad:
            console.print(f"[red]≠[/] {o.release} {o.cell.key}: {o.detail}")
        n = report.counts()
        console.print(
            f"conformance: {report.ran} cells on {len(report.releases)} releases in "
            f"{time.monotonic() - started:.0f} s: {n['agree']} agree, {n['unverified']} unverified, "
            f"{n['not run']} not run, {len(bad)} disagreements"
            + (f"; table: {out}" if out and out != "-" else "")
        )
    sys.exit(ExitCode.FAILED if bad else ExitCode.OK)


def run() -> None:
    try:
        main(prog_name="scripts/conformance", standalone_mode=True)
    except KitError as exc:
        err_console().print(f"conformance: error: {exc.one_line()}")
        sys.exit(int(exc.exit_code))


if __name__ == "__main__":
    run()
