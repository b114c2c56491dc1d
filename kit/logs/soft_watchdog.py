"""SGLang's soft watchdog, read from the server's output. Pure: lines in, reports out.

The kit renders `--soft-watchdog-timeout` at the profile's longest stall window (kit/launch.py).
SGLang creates the scheduler's soft watchdog at the top of `Scheduler.__init__`, so it covers init,
load and capture; while the scheduler is initialising (or runs a batch) and its forward counter has
not moved for that long it prints, and never kills (sglang 0.5.23 srt/managers/scheduler.py
init_soft_watchdog; srt/utils/watchdog.py WatchdogRaw._watchdog_once):

    [.. TP0] Pyspy dump for PID 123 (py-spy dump --native --pid 123):
    Process 123: sglang::scheduler_TP0
    Python v3.11.2 (/usr/bin/python3.11)

    Thread 123 (idle): "MainThread"
        __init__ (sglang/srt/managers/scheduler.py:571)
    ...
    [.. TP0] Scheduler watchdog timeout (self.watchdog_timeout=60.0, self.soft=True)

(srt/utils/cudacore_pyspy_dump_utils.py pyspy_dump_schedulers: `Pyspy dump for PID {pid} ({cmd}):`
then py-spy's stdout, or `Pyspy failed ({cmd}). Error: ...` and `All pyspy dump attempts failed for
PID {pid}.`), and again every timeout for as long as the counter stands still.

Those lines are SGLang's own word on where a rank is, not progress: a watch that counted them as
output would call a hung start alive once a window. `SoftWatchdogReader.feed` says which lines are
the watchdog's (the watcher keeps them as evidence and out of the quiet clock) and keeps each
report; kit analyze reads the timeout lines through patterns.toml (the scheduler's through the
serving block's `stall` pattern, which comes first, any other watchdog's through `watchdog.soft`).
A hard watchdog's line (`soft=False`: SIGQUIT follows) is not the soft watchdog's: it goes on to
the parser as the error it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kit.logs.evidence import UpstreamWord
from kit.logs.stacks import main_thread_frames, rank_of_process

SOURCE = "sglang-watchdog"
KEY = "soft-watchdog"  # the evidence key its firing raises (kit/logs/evidence.py KEYS)

TIMEOUT = re.compile(
    r"(?P<name>\w+) watchdog timeout "
    r"\(self\.watchdog_timeout=(?P<timeout>[\d.]+), self\.soft=(?P<soft>True|False)\)"
)
_DUMP_HEADER = re.compile(r"Pyspy dump for PID (?P<pid>\d+) \((?P<cmd>[^)]*)\):\s*$")
_DUMP_FAILED = re.compile(r"Pyspy failed \(|All pyspy dump attempts failed for PID \d+")
# py-spy dump's own lines: the process and interpreter, each thread, each frame (indented), blank.
_DUMP_BODY = re.compile(r"^(?:Process \d+: |Python v\d|Thread (?:0x[0-9A-Fa-f]+|\d+) \(|\s+\S|\s*$)")


@dataclass
class Dump:
    """One py-spy dump the soft watchdog printed: the scheduler's PID, its title, the text."""

    pid: int
    lines: list[str] = field(default_factory=list)
    watchdog: str | None = None  # whose watchdog printed it (the timeout line after it names it)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def rank(self) -> str | None:
        for line in self.lines:
            if line.startswith("Process "):
                return rank_of_process(line.partition(": ")[2])
        return None

    def where(self, frames: int = 3) -> str:
        """The main thread's innermost frames, innermost first: 'sleep <- __init__ (scheduler.py:571)'."""
        found = main_thread_frames(self.text)[:frames]
        return (
            " <- ".join(f"{f.function} ({f.file.rsplit('/', 1)[-1]}:{f.line})" for f in found)
            or "(no frames)"
        )


@dataclass
class SoftWatchdogReader:
    """Fed every output line in order; keeps the soft watchdog's reports."""

    dumps: list[Dump] = field(default_factory=list)
    timeouts: list[str] = field(default_factory=list)  # each soft timeout line, as printed
    failed: list[str] = field(default_factory=list)  # py-spy could not dump (the watchdog's own words)
    _open: Dump | None = None

    def feed(self, line: str) -> bool:
        """True when LINE is the soft watchdog's (a dump header or body, a failure, a soft timeout)."""
        if self._open is not None:
            if _DUMP_BODY.match(line) and not _DUMP_HEADER.search(line):
                self._open.lines.append(line)
                return True
            self._open = None
        if header := _DUMP_HEADER.search(line):
            self._open = Dump(int(header["pid"]))
            self.dumps.append(self._open)
            return True
        if _DUMP_FAILED.search(line):
            self.failed.append(line.strip())
            return True
        timeout = TIMEOUT.search(line)
        if timeout and timeout["soft"] == "True":
            self.timeouts.append(line.strip())
            for dump in reversed(self.dumps):
                if dump.watchdog is None:
                    dump.watchdog = timeout["name"]
                    break
            return True
        return False

    def lines(self) -> tuple[str, ...]:
        """Evidence for a verdict: how often it fired and where each rank's dump found it."""
        return tuple(word.line for word in self.words())

    def words(self) -> tuple[UpstreamWord, ...]:
        """The same lines as the evidence record holds them: the firing itself raises KEY (SGLang's
        own word that a scheduler stood still), the dumps' places and failures are its detail."""
        if not (self.timeouts or self.dumps or self.failed):
            return ()
        found = TIMEOUT.search(self.timeouts[-1]) if self.timeouts else None
        after = f" after {float(found['timeout']):.0f} s without progress" if found else ""
        head = f"SGLang's soft watchdog fired {len(self.timeouts)} time(s){after}"
        out = [UpstreamWord(SOURCE, head, KEY if self.timeouts else None)]
        latest: dict[str, Dump] = {}
        for dump in self.dumps:
            latest[dump.rank or dump.watchdog or "the main process"] = dump
        for who, dump in sorted(latest.items()):
            out.append(UpstreamWord(SOURCE, f"  its py-spy dump of {who} (pid {dump.pid}): {dump.where()}"))
        out += [UpstreamWord(SOURCE, f"  {line}") for line in self.failed[-2:]]
        return tuple(out)
