"""`kit scenario list` and `kit scenario run NAME`: GPU-shaped start-ups replayed through the watcher."""

from __future__ import annotations

import click
from rich.console import Console

from kit.cli import cli
from kit.cli.catalog import json_option
from kit.cli.exits import DOCUMENT, PLAIN, exits
from kit.output import console, show


@exits(*PLAIN)
@cli.group()
def scenario() -> None:
    """Start-ups known from reports (GPU hangs, cold loads, MTP), replayed on their own clock through
    the same watcher, tracker and verdict code as `kit up`."""


@exits(*PLAIN, json=DOCUMENT)
@scenario.command("list")
@json_option
def list_cmd(as_json: bool) -> None:
    """The scenarios, what each replays and the verdict it must reach."""
    from kit.scenarios import list_scenarios, load_scenario

    rows = []
    for name in list_scenarios():
        s = load_scenario(name)
        rows.append({"name": name, "target": s.target, "expect": s.expect.verdict, "title": s.title})
    show(rows, as_json=as_json, human=_list_table)


def _list_table(rows, out) -> None:
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("name", "target", "expect", "title"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["name"], row["target"], row["expect"].upper(), row["title"])
    out.print(table)


@exits("OK", "FAILED", "USAGE", json=DOCUMENT)
@scenario.command("run")
@click.argument("name")
@json_option
def run_cmd(name: str, as_json: bool) -> None:
    """Replay NAME and check the verdict it must reach: OK when every expectation holds, else FAILED
    (the replayed verdict is data here, not the exit code)."""
    from kit.scenarios import load_scenario, run_scenario
    from kit.startup.live import LiveView

    load_scenario(name)  # a bad name or file is one line, before the live view's header
    if as_json:
        run = run_scenario(name)
    else:
        # The plain live view (as in CI logs), on the scenario's clock.
        plain = Console(file=console().file, force_terminal=False, highlight=False, soft_wrap=True)
        with LiveView(plain, title=f"kit scenario run {name} (replayed, scenario time)") as view:
            run = run_scenario(name, on_progress=view.update)
    show(run, as_json=as_json, human=_print_run)
    raise SystemExit(run.exit_code)


def _print_run(run, out) -> None:
    from kit.startup.result import verdict_lines

    if run.result is not None:
        for line in verdict_lines(run.result):
            out.print(line, markup=False, highlight=False)
    where = f" at {run.verdict_at_s:.1f} s of scenario time" if run.verdict_at_s is not None else ""
    latency = f", {run.latency_s:.1f} s after the stall window" if run.latency_s is not None else ""
    out.print(f"{run.scenario}: verdict{where}{latency}", markup=False, highlight=False)
    for check in run.expectations:
        mark = "ok  " if check.ok else "FAIL"
        out.print(f"  {mark} {check.name}: {check.detail}", markup=False, highlight=False)
