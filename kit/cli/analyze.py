"""`kit analyze LOGFILE`: where an SGLang start-up got to, who is behind, and likely causes."""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table

from kit.cli import cli
from kit.errors import InputError
from kit.logs import AnalysisReport, analyze_path, analyze_text
from kit.output import show

_OUTCOME_STYLE = {"ready": "green", "crashed": "red", "stalled": "yellow"}


@cli.command()
@click.argument("logfile")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON document.")
def analyze(logfile: str, as_json: bool) -> int:
    """Analyse an SGLang server log (a file, a bundle from kit bundle create, or - for stdin).

    Exits 0 whenever the log could be read: the outcome (ready, crashed, stalled) is in the report.
    """
    if logfile == "-":
        try:
            text = sys.stdin.buffer.read().decode("utf-8", errors="replace")
        except OSError as exc:
            raise InputError("LOGFILE", f"cannot read stdin: {exc}", "pipe a log in, or give a file") from exc
        report = analyze_text(text, source="-")
    elif _is_bundle(logfile):  # a bundle: its full log (a damaged one is exit 2, one line)
        from kit.diagnose.bundle import bundle_log_text

        report = analyze_text(bundle_log_text(logfile), source=logfile)
    else:
        report = analyze_path(logfile)
    show(report, as_json=as_json, human=_human)
    return 0


def _is_bundle(path: str) -> bool:
    from kit.diagnose.bundle import looks_like_bundle

    return looks_like_bundle(path)


def _human(report: AnalysisReport, out: Console) -> None:
    style = _OUTCOME_STYLE[report.outcome]
    where = f"in phase {report.phase.value}" if report.phase else "before any start-up phase"
    last = report.last_milestone.value if report.last_milestone else "none"
    dialect = f", SGLang wording {report.dialect}+" if report.dialect else ""
    out.print(
        f"[bold {style}]{report.outcome.upper()}[/] {where} (last milestone: {last}; "
        f"{report.lines} lines{dialect})"
    )
    if report.startup_s is not None:
        out.print(f"ready after {report.startup_s:.0f} s")

    if report.ranks:
        table = Table(title=None, show_edge=False, pad_edge=False)
        for column in ("rank", "last milestone", "phase", "in phase", "last line at"):
            table.add_column(column)
        for row in report.ranks:
            table.add_row(
                row.rank,
                row.last_milestone.value if row.last_milestone else "-",
                row.phase.value if row.phase else "-",
                "-" if row.phase_elapsed_s is None else f"{row.phase_elapsed_s:.0f} s",
                row.last_time.strftime("%H:%M:%S") if row.last_time else "-",
            )
        out.print(table)

    if report.missing:
        out.print("[bold]Missing from a milestone other ranks reached:[/]")
        for entry in report.missing:
            out.print(f"  {entry.milestone.value}: {', '.join(entry.ranks)}", markup=False)
    if report.exception:
        out.print(f"[bold]Exception:[/] {report.exception}", highlight=False)
    if report.outcome != "ready" and report.evidence:
        out.print("[bold]Evidence:[/]")
        for line in report.evidence[-8:]:
            out.print(f"  {line.line_no:>6}  {line.text}", markup=False, highlight=False)
    if report.likely_causes:
        out.print("[bold]Likely causes:[/]")
        for number, cause in enumerate(report.likely_causes, start=1):
            because = f" (seen: {', '.join(cause.hints_found)})" if cause.hints_found else ""
            out.print(f" {number}. {cause.title}{because}", markup=False, highlight=False)
            out.print(f"    why: {cause.why}", markup=False, highlight=False)
            for step in cause.what_to_try:
                out.print(f"    try: {step}", markup=False, highlight=False)
