"""`kit analyze LOGFILE`: which launch attempt, where start-up got to, who is behind, likely causes."""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kit.cli import cli
from kit.cli.exits import DOCUMENT, exits
from kit.errors import InputError
from kit.logs import AnalysisReport, analyze_path, analyze_text
from kit.logs.analyze import with_skipped
from kit.output import show

_OUTCOME_STYLE = {"ready": "green", "crashed": "red", "hung": "yellow"}


@exits("READY", "CRASHED", "HUNG", "USAGE", json=DOCUMENT)
@cli.command()
@click.argument("logfile")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON document.")
def analyze(logfile: str, as_json: bool) -> None:
    """Analyse an SGLang server log (a file, a bundle from kit bundle create, or - for stdin).

    A log holding several starts (journald of a restarting unit, an appended file) is split into
    launch attempts; the last one is judged, in `kit up`'s words and exit codes: a log that ends
    before ready without a crash is HUNG (offline, nobody can measure how long it was quiet).
    A log that cannot be read is USAGE.
    """
    if logfile == "-":
        from kit.files import read_log
        from kit.logs.attempts import LaunchCounter

        middle = LaunchCounter()
        try:  # bounded and checked like a file: `- < /dev/zero` is refused at its first NUL
            log = read_log(sys.stdin.buffer, name="stdin", on_skipped=middle)
        except OSError as exc:
            raise InputError("LOGFILE", f"cannot read stdin: {exc}", "pipe a log in, or give a file") from exc
        report = with_skipped(analyze_text(log.text, source="-"), log, middle.launches)
    elif _is_bundle(logfile):  # a bundle: its full log (a damaged one is exit 2, one line)
        from kit.diagnose.bundle import bundle_log_text

        report = analyze_text(bundle_log_text(logfile), source=logfile)
    else:
        report = analyze_path(logfile)
    show(report, as_json=as_json, human=lambda r, out: _human(r, _Printable(out)))
    raise SystemExit(report.exit_code)


class _Printable:
    """The console, with a log's terminal control sequences (window title, clear screen) made
    harmless in every string printed: the log is someone else's text (bundle show does the same)."""

    def __init__(self, out: Console):
        self._out = out

    def print(self, *objects, **kwargs) -> None:
        from kit.diagnose.replay_plan import printable

        def clean(item):
            if isinstance(item, str):
                return printable(item)
            if isinstance(item, Text):
                return Text(printable(item.plain), style=item.style, spans=item.spans)
            return item

        self._out.print(*(clean(o) for o in objects), **kwargs)


def _clean(text: str) -> str:
    from kit.diagnose.replay_plan import printable

    return printable(text)


def _is_bundle(path: str) -> bool:
    from kit.diagnose.bundle import looks_like_bundle

    return looks_like_bundle(path)


def _human(report: AnalysisReport, out: Console) -> None:
    style = _OUTCOME_STYLE[report.outcome]
    if report.phase:
        where = f"in phase {report.phase.value}"
        if report.phase_from == "exception":
            where += " (from the traceback)"
    else:
        where = "before any start-up phase" if report.phase_from or report.last_milestone else "phase unknown"
    last = report.last_milestone.value if report.last_milestone else "none"
    dialect = f", SGLang wording {report.dialect}+" if report.dialect else ""
    out.print(
        f"[bold {style}]{report.outcome.upper()}[/] {where} (last milestone: {last}; "
        f"{report.lines} lines{dialect})"
    )
    for wrapper in report.wrappers:
        out.print(
            f"wrapper: {wrapper.title}; {wrapper.example!r} stripped from {wrapper.count} lines",
            markup=False,
            highlight=False,
        )
    if report.skipped is not None:
        out.print(
            f"read as head and tail: the middle {report.skipped.bytes / 1e6:,.1f} MB "
            f"({report.skipped.lines:,} lines) was skipped to keep memory bounded (its launches counted, "
            "not judged)",
            markup=False,
            highlight=False,
        )
    if report.attempt.count > 1:
        out.print(f"{report.attempt.summary} (from line {report.attempt.first_line})", markup=False)
    if report.startup_s is not None:
        out.print(f"ready after {report.startup_s:.0f} s")

    if report.ranks:
        table = Table(title=None, show_edge=False, pad_edge=False)
        for column in ("rank", "last milestone", "phase", "in phase", "last line at"):
            table.add_column(column)
        for row in report.ranks:
            if not row.seen:
                node = f" (node {row.node})" if row.node is not None else ""
                table.add_row(_clean(row.rank), "-", "-", "-", f"never printed{node}")
                continue
            table.add_row(
                _clean(row.rank),
                _clean(row.last_milestone or "-"),
                row.phase or "-",
                "-" if row.in_phase_s is None else f"{row.in_phase_s:.0f} s",
                row.last_time[11:19] if row.last_time else "-",
            )
        out.print(table)

    if report.missing:
        out.print("[bold]Missing from a milestone other ranks reached:[/]")
        for entry in report.missing:
            never = f" (never printed: {', '.join(entry.never_seen)})" if entry.never_seen else ""
            out.print(f"  {entry.milestone.value}: {', '.join(entry.ranks)}{never}", markup=False)
        if report.expected is not None and report.expected.nodes > 1:
            out.print(
                f"  this log is node {report.expected.node_rank} of {report.expected.nodes}; ranks of the "
                "other nodes print in their own logs: check those nodes started and joined",
                markup=False,
            )
    if report.exception:
        label = "" if report.exception.startswith("Exception:") else "Exception: "
        # Text, not markup: exception messages hold brackets ("[/pytorch/third_party/gloo/...]").
        out.print(Text.assemble((label, "bold"), report.exception), highlight=False)
    if report.outcome != "ready" and report.evidence:
        out.print("[bold]Evidence:[/]")
        for line in report.evidence[-8:]:
            out.print(f"  {line.line_no:>6}  {line.text}", markup=False, highlight=False)
    if report.likely_causes:
        out.print("[bold]Likely causes:[/]")
        for number, cause in enumerate(report.likely_causes, start=1):
            because = (
                " (generic: nothing in the log points at it)"
                if cause.generic
                else f" (seen: {', '.join(cause.evidence)})"
            )
            out.print(f" {number}. {cause.title}{because}", markup=False, highlight=False)
            out.print(f"    why: {cause.why}", markup=False, highlight=False)
            for step in cause.what_to_try:
                out.print(f"    try: {step}", markup=False, highlight=False)
            out.print(f"    source: {cause.source}", markup=False, highlight=False)
