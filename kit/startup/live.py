"""Showing start-up as it happens: a live table on a terminal, plain lines in logs, JSON lines for machines.

The only place that draws progress; it reads Progress values and never changes them.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from kit.output import emit_json, jsonable
from kit.startup.watch import Progress

_PHASE_STYLE = {
    "init": "cyan",
    "load": "blue",
    "memory": "magenta",
    "capture": "yellow",
    "warmup": "green",
    "serving": "bold green",
}


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e6:.0f} MB"


def status_line(progress: Progress) -> str:
    sample = progress.sample
    cpu = "-" if sample is None or sample.cpu_seconds is None else f"{sample.cpu_seconds:.1f} s"
    read = "-" if sample is None else _mb(sample.read_bytes)
    window = "-" if progress.stall_window is None else f"{progress.stall_window:.0f} s"
    return (
        f"{progress.container}  {progress.elapsed:5.1f} s  stage {progress.tracker.stage}  "
        f"quiet {progress.quiet_for:4.1f} s / window {window}  cpu {cpu}  read {read}"
    )


def rank_table(progress: Progress) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("rank", "phase", "in phase", "last milestone"):
        table.add_column(column)
    for state in progress.tracker.rank_states:
        phase = state.phase.value if state.phase else "-"
        table.add_row(
            state.label,
            Text(phase, style=_PHASE_STYLE.get(phase, "")),
            f"{max(0.0, progress.now - state.phase_since):6.1f} s",
            state.milestone.value if state.milestone else "-",
        )
    return table


class LiveView:
    """Context manager; `update(progress)` after each watcher step."""

    def __init__(self, console: Console, *, title: str, as_json: bool = False):
        self.console = console
        self.title = title
        self.as_json = as_json
        self.tty = console.is_terminal and not as_json
        self._live: Live | None = None
        self._last_stage: str | None = None
        self._last_json_sample = 0.0
        # Some milestones have two lines per rank (KV cache allocated, memory pool end): show one.
        self._shown: set[tuple[str, str]] = set()

    def _first_time(self, event) -> bool:
        key = (event.rank_label, event.milestone.value)
        if key in self._shown:
            return False
        self._shown.add(key)
        return True

    def __enter__(self) -> LiveView:
        if self.tty:
            self._live = Live(Text(self.title), console=self.console, refresh_per_second=4, transient=True)
            self._live.__enter__()
        elif not self.as_json:
            self.console.print(self.title, markup=False, highlight=False)
        return self

    def __exit__(self, *exc) -> None:
        if self._live:
            self._live.__exit__(*exc)

    def started(self, container: str, url: str | None) -> None:
        if self.as_json:
            emit_json({"type": "start", "container": container, "url": url})
        elif not self.tty:
            self.console.print(f"started {container} ({url})", markup=False, highlight=False)

    def update(self, progress: Progress) -> None:
        if self.as_json:
            self._json(progress)
        elif self._live:
            self._live.update(
                Group(Text(self.title, style="bold"), Text(status_line(progress)), rank_table(progress))
            )
        else:
            self._plain(progress)

    def _plain(self, progress: Progress) -> None:
        for event in progress.events:
            if event.milestone is not None and self._first_time(event):
                self.console.print(
                    f"{progress.elapsed:7.1f} s  {event.rank_label:8} {event.milestone.value}",
                    markup=False,
                    highlight=False,
                )
        stage = progress.tracker.stage
        if stage != self._last_stage:
            self._last_stage = stage
            self.console.print(f"{progress.elapsed:7.1f} s  stage {stage}", markup=False, highlight=False)

    def _json(self, progress: Progress) -> None:
        for event in progress.events:
            if event.milestone is not None and self._first_time(event):
                emit_json(
                    {
                        "type": "milestone",
                        "t": round(progress.elapsed, 3),
                        "rank": event.rank_label,
                        "milestone": event.milestone.value,
                        "fields": jsonable(event.fields),
                        "line": event.text,
                    }
                )
        if progress.sample is not None and progress.now - self._last_json_sample >= 5.0:
            self._last_json_sample = progress.now
            emit_json(
                {
                    "type": "activity",
                    "t": round(progress.elapsed, 3),
                    "stage": progress.tracker.stage,
                    "quiet_s": round(progress.quiet_for, 1),
                    "cpu_s": progress.sample.cpu_seconds,
                    "read_bytes": progress.sample.read_bytes,
                }
            )
