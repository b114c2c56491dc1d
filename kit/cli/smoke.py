"""`kit smoke TARGET`: pass/fail table of the smoke checks, with timings."""

from __future__ import annotations

import click

from kit.cli import cli
from kit.cli.catalog import json_option, target_options
from kit.cli.exits import DOCUMENT, exits
from kit.cli.up import VERDICT_EXITS, fault_option, no_validate_option
from kit.output import console, show


@exits("OK", *VERDICT_EXITS[1:], "FAILED", json=DOCUMENT)
@cli.command()
@target_options
@no_validate_option
@click.option("--no-faults", is_flag=True, help="Skip the planted-fault checks (CPU rehearsal only).")
@fault_option("CPU rehearsal only, test-only: plant a fault in the start the checks run on.")
@json_option
def smoke(
    target: str,
    image: str | None,
    overrides: tuple[str, ...],
    no_validate: bool,
    no_faults: bool,
    fault: str | None,
    as_json: bool,
) -> None:
    """Start TARGET and run the smoke checks: init and first token within deadlines, health,
    repeatable greedy answers, one structured-output request, one tool call, for a speculative
    profile its greedy answer against the reference profile's (a tie is no failure) and SGLang's
    acceptance length (under SGLang's draft simulation too, where the profile asks), a serving window,
    and (rehearsal) planted hang and crash named.

    A start that does not reach READY exits with its verdict (CRASHED, HUNG); a stage past its
    deadline ends it with DEADLINE (here the deadline is what is tested); after READY, any failed
    check is FAILED."""
    from kit.cli.signals import interruptible
    from kit.launch import api_key_from_env
    from kit.model import require_model
    from kit.startup import limits_from_spec
    from kit.startup.prepare import prepare_launch
    from kit.startup.server import check_start
    from kit.testing.smoke import run_smoke

    spec = prepare_launch(target, image=image, overrides=overrides, validate=not no_validate)
    require_model(spec)  # a missing model is one line with the fetch command, before any container
    tool_overrides = tuple(spec.smoke.get("tool_call_overrides") or ())
    tool_spec = (
        prepare_launch(target, image=image, overrides=(*overrides, *tool_overrides), validate=not no_validate)
        if tool_overrides
        else None
    )
    from kit.testing.speculative import simulated_overrides

    simulated = simulated_overrides(spec)  # a start under SGLang's accepted-draft simulation
    simulated_spec = (
        prepare_launch(target, image=image, overrides=(*overrides, *simulated), validate=not no_validate)
        if simulated
        else None
    )
    api_key_from_env(spec, required=bool(spec.api_key_env))
    check_start(spec, fault=fault)  # the fault switch, the engine, the image, the GPUs: before the header
    out = console()
    interruptible()  # Ctrl-C and SIGTERM unwind through run_smoke's cleanup: no container stays

    def progress(check) -> None:
        if not as_json:
            out.print(f"  {'ok  ' if check.ok else 'FAIL'} {check.name}", markup=False, highlight=False)

    if not as_json:
        out.print(f"kit smoke {spec.target} ({spec.image})", markup=False, highlight=False)
    report = run_smoke(
        spec,
        limits_from_spec(spec),
        faults=not no_faults,
        on_check=progress,
        tool_spec=tool_spec,
        fault=fault,
        simulated_spec=simulated_spec,
    )
    show(report, as_json=as_json, human=_table)
    raise SystemExit(report.exit_code)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _table(report, out) -> None:
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("check", "result", "measured", "limit", "detail"):
        table.add_column(column)
    for check in report.checks:
        table.add_row(
            check.name,
            "[green]pass[/]" if check.ok else "[red]FAIL[/]",
            _seconds(check.seconds),
            _seconds(check.limit_s),
            check.detail[:70],
        )
    out.print(table)
    out.print(
        f"{'PASS' if report.ok else 'FAIL'}: {sum(c.ok for c in report.checks)}/{len(report.checks)} checks"
    )
