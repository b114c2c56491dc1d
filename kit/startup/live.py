"""Showing start-up as it happens: a live table on a terminal, plain lines in logs, JSON lines for machines.

The only place that draws progress; it reads Progress values and never changes them.
"""

from __future__ import annotations

import time

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from kit.logs.counters import Readable, readable_counters
from kit.output import emit_json, jsonable
from kit.startup.watch import Progress

_PHASE_STYLE = {
    "init": "cyan",
    "load": "blue",
    "memory": "magenta",
    "autotune": "bright_magenta",
    "capture": "yellow",
    "warmup": "green",
    "serving": "bold green",
}


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e6:.0f} MB"


# Before the first milestone SGLang imports itself, checks its arguments and starts the schedulers:
# tens of seconds with little or no output. Say so instead of showing an empty table.
_LAUNCH = "starting SGLang: imports, argument checks, scheduler processes"
HEARTBEAT_S = 15.0  # plain logs: a status line when nothing else was printed for this long


def _activity(progress: Progress) -> str:
    sample = progress.sample
    if sample is None:
        return "cpu -  read -"
    parts = [
        f"cpu {'-' if sample.cpu_seconds is None else f'{sample.cpu_seconds:.1f} s'}",
        f"read {_mb(sample.read_bytes)}",
    ]
    if sample.net_rx_bytes:
        parts.append(f"net {_mb(sample.net_rx_bytes)}")
    if sample.gpu_mem_bytes is not None:
        util = "/".join("-" if u is None else str(u) for u in sample.gpu_util) or "-"
        parts.append(f"gpu mem {sample.gpu_mem_bytes / (1 << 30):.1f} GiB util {util} %")
    if sample.gpu_error:
        parts.append("gpu unreadable")
    if sample.compile_bytes or sample.compilers:
        parts.append(f"compile {_mb(sample.compile_bytes)} {sample.compilers or 0} compilers")
    return "  ".join(parts)


def status_line(progress: Progress, load_bytes: int | None = None) -> str:
    window = "-" if progress.stall_window is None else f"{progress.stall_window:.0f} s"
    late = "  PAST DEADLINE" if progress.overrun is not None else ""
    load = progress.load(load_bytes)
    return (
        f"{progress.container}  {progress.elapsed:5.1f} s  stage {progress.tracker.stage} "
        f"{progress.in_stage:5.1f} s{late}  quiet {progress.quiet_for:4.1f} s / window {window}  "
        + (f"load {load.describe()}  " if load is not None else "")
        + _activity(progress)
    )


def _clip(line: str | None, width: int = 100) -> str:
    text = (line or "").strip()
    return text if len(text) <= width else text[: width - 1] + "…"


def rank_table(progress: Progress) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("rank", "phase", "in phase", "last milestone"):
        table.add_column(column)
    states = progress.tracker.rank_states
    for state in states:
        phase = state.phase.value if state.phase else "-"
        table.add_row(
            state.label,
            Text(phase, style=_PHASE_STYLE.get(phase, "")),
            f"{max(0.0, progress.now - state.phase_since):6.1f} s",
            state.milestone.value if state.milestone else "-",
        )
    if not states:
        table.add_row("main", Text("launch", style="dim"), f"{progress.in_stage:6.1f} s", _LAUNCH)
    return table


class LiveView:
    """Context manager; `update(progress)` after each watcher step."""

    def __init__(self, console: Console, *, title: str, as_json: bool = False, load_bytes: int | None = None):
        """`load_bytes`: the checkpoint's size on disk (the catalog's), for the load's progress."""
        self.console = console
        self.load_bytes = load_bytes
        self._overruns_said = 0
        self.title = title
        self.as_json = as_json
        self.tty = console.is_terminal and not as_json
        self._live: Live | None = None
        self._last_stage: str | None = None
        self._attempt = 1
        self._last_json_sample = 0.0
        self._said_at = 0.0
        self._counters: Readable | None = None  # the counters last said to be readable
        self._status_probes = -1  # the serving status last emitted as JSON (its probe count)
        self._status_said = 0.0  # when a plain serving status line was last printed
        self._paused_said = False
        self._stacks_said: tuple[str, ...] = ()
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
        if progress.attempt != self._attempt:
            self._new_attempt(progress)
        self._overruns(progress)
        self._readable(progress)
        self._paused(progress)
        self._stacks(progress)
        if self.as_json:
            self._json(progress)
        elif self._live:
            late = progress.overrun
            counters = [Text(self._counters.line(), style="dim")] if self._counters else []
            self._live.update(
                Group(
                    Text(self.title, style="bold"),
                    Text(status_line(progress, self.load_bytes)),
                    *counters,
                    *([Text(late.describe() + " (followed on)", style="yellow")] if late else []),
                    rank_table(progress),
                    Text(f"last: {_clip(progress.last_line)}", style="dim"),
                )
            )
        else:
            self._plain(progress)

    def _readable(self, progress: Progress) -> None:
        """Which counters this host lets the watch read: a row on a terminal, a line (plain or
        JSON) when it is first known and whenever it changes (a process tree that became readable)."""
        if progress.sample is None:
            return
        readable = readable_counters(progress.sample)
        if readable == self._counters:
            return
        self._counters = readable
        if self.as_json:
            emit_json({"type": "counters", "t": round(progress.elapsed, 3), **readable.as_dict()})
        elif not self._live:
            self._say(progress, readable.line())

    def _overruns(self, progress: Progress) -> None:
        """Say each stage that passed its deadline once, as it happens (a terminal keeps a line too)."""
        for overrun in progress.overruns[self._overruns_said :]:
            self._overruns_said += 1
            if self.as_json:
                emit_json(
                    {
                        "type": "deadline",
                        "t": round(progress.elapsed, 3),
                        "stage": overrun.stage,
                        "limit_s": overrun.limit_s,
                        "attempt": overrun.attempt,
                        "moving": overrun.moving,
                    }
                )
            elif self._live:
                self._live.console.print(f"{overrun.describe()}; followed on", markup=False, highlight=False)
            else:
                self._say(progress, f"{overrun.describe()}; followed on to READY, HUNG or CRASHED")

    def _note(self, progress: Progress, record: dict, text: str) -> None:
        """One line that stays: a JSON object, a line above the live table, or a plain line."""
        if self.as_json:
            emit_json({"t": round(progress.elapsed, 3), **record})
        elif self._live:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            self._say(progress, text)

    def _paused(self, progress: Progress) -> None:
        """Say at once that the engine paused the container (and when it is unpaused)."""
        paused = progress.paused_since is not None
        if paused == self._paused_said:
            return
        self._paused_said = paused
        name = progress.container
        if paused:
            text = f"PAUSED: container {name} is paused (docker pause): nothing runs; `docker unpause {name}`"
            self._note(
                progress, {"type": "paused", "container": name, "command": f"docker unpause {name}"}, text
            )
        else:
            self._note(progress, {"type": "unpaused", "container": name}, f"container {name} was unpaused")

    def _stacks(self, progress: Progress) -> None:
        """Each stack sample taken while quiet: what every rank is doing (said when it changes)."""
        sample = progress.stacks
        if sample is None:
            return
        said = tuple(r.describe() for r in sample.ranks) or (f"stacks unreadable: {sample.why_unreadable()}",)
        if said == self._stacks_said:
            return
        self._stacks_said = said
        ranks = [
            {"rank": r.rank, "state": r.word, "what": r.what, "where": r.where, "held": r.held}
            for r in sample.ranks
        ]
        unreadable = None if sample.readable else sample.why_unreadable()
        self._note(
            progress,
            {"type": "stacks", "ranks": ranks, "unreadable": unreadable},
            "stacks: " + "; ".join(_clip(line, 120) for line in said),
        )

    def serving(self, event) -> None:
        """The serving watch (kit/startup/serving.py): READY and its first token before it begins
        (ReadyNotice), its status at each step (ServingStatus: refreshed in place on a terminal, a
        JSON line per probe, a plain line every HEARTBEAT_S), and each new verdict (Change)."""
        from kit.startup.serving import ReadyNotice, ServingStatus

        if isinstance(event, ReadyNotice):
            self._ready(event.result)
        elif isinstance(event, ServingStatus):
            self._serving_status(event)
        else:
            self._change(event)

    def _ready(self, result) -> None:
        from kit.startup.result import sglang_phases, verdict_lines

        if self.as_json:
            keys = ("verdict", "startup_s", "first_token_s", "first_token_endpoint", "first_token_in")
            emit_json({"type": "ready", **{k: getattr(result, k) for k in keys}})
            return
        lines = verdict_lines(result)
        said = sglang_phases(result.sglang_startup_time)
        out = self._live.console if self._live else self.console
        out.print(Text(lines[0], style="bold green"))
        for line in [
            *lines[1:],
            *([f"  {said}"] if said else []),
            "  serving: watched until HUNG, CRASHED or Ctrl-C",
        ]:
            out.print(line, markup=False, highlight=False)

    def _serving_status(self, status) -> None:
        if self.as_json:
            if status.probes != self._status_probes:  # one line per probe window
                self._status_probes = status.probes
                emit_json(status.as_json())
        elif self._live:
            self._live.update(Text(status.line()))
        elif time.monotonic() - self._status_said >= HEARTBEAT_S:
            self._status_said = time.monotonic()
            self.console.print(status.line(), markup=False, highlight=False)

    def _change(self, change) -> None:
        call = change.call
        if self.as_json:
            emit_json(
                {
                    "type": "serving",
                    "t": round(change.since_ready_s, 3),
                    "verdict": call.verdict.value,
                    "why": call.why,
                    "ranks": list(call.ranks),
                }
            )
            return
        style = {"serving": "green", "degraded": "yellow"}.get(call.verdict.value, "bold red")
        self.console.print(
            Text(
                f"{change.since_ready_s:7.1f} s after READY  {call.verdict.value.upper()}: {call.why}",
                style=style,
            )
        )

    def _new_attempt(self, progress: Progress) -> None:
        """A supervisor started the server again: its milestones and stages begin anew."""
        self._attempt = progress.attempt
        self._shown.clear()
        self._last_stage = None
        if self.as_json:
            emit_json({"type": "attempt", "t": round(progress.elapsed, 3), "attempt": progress.attempt})
        elif not self.tty:
            self._say(progress, f"attempt {progress.attempt}: the server started again (a restart policy)")

    def _say(self, progress: Progress, text: str) -> None:
        self.console.print(f"{progress.elapsed:7.1f} s  {text}", markup=False, highlight=False)
        self._said_at = progress.now

    def _plain(self, progress: Progress) -> None:
        for event in progress.events:
            if event.milestone is not None and self._first_time(event):
                self._say(progress, f"{event.rank_label:8} {event.milestone.value}")
        stage = progress.tracker.stage
        if stage != self._last_stage:
            self._last_stage = stage
            self._say(progress, f"stage {stage}" + (f" ({_LAUNCH})" if stage == "launch" else ""))
        elif stage != "serving" and progress.now - self._said_at >= HEARTBEAT_S:
            # CI logs: what is happening and for how long, when nothing else was said for a while.
            window = "-" if progress.stall_window is None else f"{progress.stall_window:.0f} s"
            load = progress.load(self.load_bytes)
            late = progress.overrun
            self._say(
                progress,
                f"  {stage} for {progress.in_stage:.0f} s"
                + (f" (past its {late.limit_s:.0f} s deadline)" if late else "")
                + f", quiet {progress.quiet_for:.0f} s of {window}; "
                + (f"load {load.describe()}; " if load is not None else "")
                + f"{_activity(progress)}; last: {_clip(progress.last_line, 80)}",
            )

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
                    "in_stage_s": round(progress.in_stage, 1),
                    "cpu_s": progress.sample.cpu_seconds,
                    "read_bytes": progress.sample.read_bytes,
                    "net_rx_bytes": progress.sample.net_rx_bytes,
                    "gpu_mem_bytes": progress.sample.gpu_mem_bytes,
                    "gpu_util": list(progress.sample.gpu_util),
                    "compile_bytes": progress.sample.compile_bytes,
                    "compilers": progress.sample.compilers,
                    "last_line": _clip(progress.last_line, 200),
                    **_load_json(progress.load(self.load_bytes)),
                }
            )


def _load_json(load) -> dict:
    """The load's progress in an activity line (only during load, where a read counter is known)."""
    if load is None:
        return {}
    return {
        "load_read_bytes": load.read_bytes,
        "load_total_bytes": load.total_bytes,
        "load_rate_bytes_s": None if load.rate_bytes_s is None else round(load.rate_bytes_s),
        "load_eta_s": None if load.eta_s is None else round(load.eta_s, 1),
        "load_fraction": None if load.fraction is None else round(load.fraction, 4),
        "load_basis": load.basis,
        "load_shards": None if load.shards is None else f"{load.shards.done}/{load.shards.total}",
        "load_storage": load.storage,
    }
