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
@click.option(
    "--target",
    default=None,
    metavar="TARGET",
    help="A catalog target whose profile's smoke floor the speculative acceptance length is held to.",
)
def analyze(logfile: str, as_json: bool, target: str | None) -> None:
    """Analyse an SGLang server log (a file, a bundle from kit bundle create, or - for stdin).

    A log holding several starts (journald of a restarting unit, an appended file) is split into
    launch attempts; the last one is judged, in `kit up`'s words and exit codes: a log that ends
    before ready without a crash is HUNG (offline, nobody can measure how long it was quiet).
    A log that cannot be read is USAGE.
    """
    floor = _accept_floor(target)
    if logfile == "-":
        from kit.files import read_log
        from kit.logs.attempts import LaunchCounter

        middle = LaunchCounter()
        try:  # bounded and checked like a file: `- < /dev/zero` is refused at its first NUL
            log = read_log(sys.stdin.buffer, name="stdin", on_skipped=middle)
        except OSError as exc:
            raise InputError("LOGFILE", f"cannot read stdin: {exc}", "pipe a log in, or give a file") from exc
        report = with_skipped(analyze_text(log.text, source="-", accept_floor=floor), log, middle.launches)
    elif _is_bundle(logfile):  # a bundle: its full log (a damaged one is exit 2, one line)
        from kit.diagnose.bundle import bundle_log_text

        report = analyze_text(bundle_log_text(logfile), source=logfile, accept_floor=floor)
    else:
        report = analyze_path(logfile, accept_floor=floor)
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


def _accept_floor(target: str | None) -> float | None:
    """The target's smoke floor for SGLang's acceptance length (1.0 when its profile sets none, as
    kit smoke holds it); None without --target."""
    if target is None:
        return None
    from kit.catalog import Smoke, load_catalog

    catalog = load_catalog()
    if target not in catalog.targets:
        raise InputError(
            "--target", f"unknown target {target!r}", f"one of: {', '.join(sorted(catalog.targets))}"
        )
    model, entry = catalog.targets[target]
    smoke = Smoke.model_validate(catalog.models[model].profiles[entry.profile].get("smoke") or {})
    return smoke.min_accept_length or 1.0


def _is_bundle(path: str) -> bool:
    from kit.diagnose.bundle import looks_like_bundle

    return looks_like_bundle(path)


_MEASURE_NAMES = {
    "accept_len": "accept len",
    "accept_rate": "accept rate",
    "gen_throughput": "gen throughput (token/s)",
    "running": "running requests",
    "queued": "queued requests",
    "kv_usage": "KV usage",
    "mamba_usage": "mamba usage",
}


def serving_lines(serving) -> list[str]:
    """The serving stretch in a few lines: counts, each measure's min/median/max, the acceptance
    against the floor, the medians over time, retractions and out-of-memory lines."""
    counted = (
        f"{serving.decode_batches:,} decode and {serving.prefill_batches:,} prefill batches, "
        f"{serving.requests:,} request stats"
        if serving.decode_batches is not None
        else f"read as {serving.lines_read:,} batch lines from evenly spaced stretches of a large log"
    )
    lines = [f"serving: {counted}"]
    for name, stat in serving.over_log.items():
        spread = f"{stat.min:g} .. {stat.max:g} (median {stat.median:g}, {stat.count:,} lines)"
        text = f"  {_MEASURE_NAMES[name]}: {spread}"
        if name == "accept_len" and serving.accept_floor is not None:
            word = "BELOW" if serving.accept_below_floor else "at or above"
            text += f"; {word} the target's floor {serving.accept_floor:g}"
        lines.append(text)
    if len(serving.over_time) > 1:
        for name in ("accept_len", "gen_throughput", "kv_usage", "mamba_usage"):
            medians = [w.get(name) for w in serving.over_time]
            if any(m is not None for m in medians):
                shown = ", ".join("-" if m is None else f"{m:g}" for m in medians)
                lines.append(f"  {_MEASURE_NAMES[name]} over time (median per slice): {shown}")
    if serving.retractions:
        lines.append(f"  retractions: {serving.retractions} (first: {serving.retraction_lines[0]})")
    if serving.oom_lines:
        lines.append(f"  out-of-memory lines: {serving.oom_lines} (first: {serving.oom_evidence[0]})")
    return lines


def _human(report: AnalysisReport, out: Console) -> None:
    style = _OUTCOME_STYLE[report.outcome]
    if report.phase:
        where = f"in phase {report.phase.value}"
        if report.phase_from == "exception":
            where += " (from the traceback)"
        elif report.phase_from == "serving":
            where += " (from its serving lines)"
        elif report.phase_from == "progress":
            where += " (from its progress bar)"
    else:
        where = "before any start-up phase" if report.phase_from or report.last_milestone else "phase unknown"
    last = report.last_milestone.value if report.last_milestone else "none"
    dialect = f", SGLang wording {report.dialect}+" if report.dialect else ""
    out.print(
        f"[bold {style}]{report.outcome.upper()}[/] {where} (last milestone: {last}; "
        f"{report.lines} lines{dialect})"
    )
    if report.mid_life:
        out.print(
            "the excerpt holds no start-up lines: READY read off the server at work (its batches, request"
            " stats, answered requests)",
            markup=False,
            highlight=False,
        )
    if report.server == "diffusion":
        out.print(
            "SGLang's diffusion server (multimodal_gen): not a language-model server's start-up; only its"
            " HTTP server's milestones and warm-up apply",
            markup=False,
            highlight=False,
        )
    if report.serving is not None:
        for line in serving_lines(report.serving):
            out.print(line, markup=False, highlight=False)
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
                f" (generic: rests on {cause.basis}; nothing in the log names it)"
                if cause.generic and cause.basis
                else " (generic: rests on the phase alone; nothing in the log names it)"
                if cause.generic
                else f" (seen: {', '.join(cause.evidence)})"
            )
            out.print(f" {number}. {cause.title}{because}", markup=False, highlight=False)
            out.print(f"    why: {cause.why}", markup=False, highlight=False)
            for step in cause.what_to_try:
                out.print(f"    try: {step}", markup=False, highlight=False)
            out.print(f"    source: {cause.source}", markup=False, highlight=False)
