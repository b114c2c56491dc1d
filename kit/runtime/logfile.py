"""A log file followed like `tail -F`: what a server outside the kit's containers wrote, as timed lines.

    follower = FileFollower(path, since_wall=process_start)   # nothing is read until take()
    follower.take()       # [(monotonic time, line)] that arrived since the last call
    follower.text()       # everything read so far (for the bundle)

- **Lines as they are written**: bytes go through the same `LineSplitter` as a container's output,
  so a tqdm bar's `\\r` redraws count as output while they are drawn.
- **Rotation and truncation**: a new file under the name (logrotate's `create`) is read from its
  start once the old one has been read to its end; a file that shrank (`copytruncate`, `: > log`) is
  read again from its start; a name that does not exist yet is waited for.
- **What was written before the watch** keeps its own times: SGLang prefixes each record with
  `[YYYY-MM-DD HH:MM:SS]` (local time), which is mapped onto the monotonic clock; a line without a
  prefix (a traceback's body) takes the time of the record before it. Records stamped before the
  watched process started belong to an earlier run writing to the same file and are skipped.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from kit.runtime.source import LineSplitter

_READ_CHUNK = 1 << 20
# An earlier run's last records and the watched process's first ones can be a second apart.
_EARLIER_RUN_SLACK_S = 2.0
_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,](\d+))?[\] ]")


def record_wall_time(line: str) -> float | None:
    """'[2026-12-03 07:55:21 TP0] ...' -> epoch seconds (local time, as SGLang's logger writes it)."""
    match = _STAMP.match(line)
    if not match:
        return None
    try:
        stamp = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S").timestamp()
    except ValueError:
        return None
    fraction = match[2]
    return stamp + (int(fraction) / 10 ** len(fraction) if fraction else 0.0)


class HistoryTimes:
    """Times for lines written before the watch began, from their own stamps. Pure."""

    def __init__(self, to_mono: Callable[[float], float], *, since_wall: float | None, now_mono: float):
        self._to_mono = to_mono
        self._since = since_wall
        self._now = now_mono
        self._floor = to_mono(since_wall) if since_wall is not None else now_mono
        self._last = self._floor
        self._skipping = False

    def time_of(self, line: str) -> float | None:
        """The line's monotonic time, or None when it belongs to an earlier run (skip it)."""
        wall = record_wall_time(line)
        if wall is not None:
            self._skipping = self._since is not None and wall < self._since - _EARLIER_RUN_SLACK_S
            if not self._skipping:
                self._last = min(self._now, max(self._floor, self._to_mono(wall)))
        return None if self._skipping else self._last


class FileFollower:
    """Follows PATH by name. `to_mono` maps wall seconds onto `clock`'s; `since_wall` is when the
    watched process started (earlier records are another run's)."""

    def __init__(
        self,
        path: str | Path,
        *,
        since_wall: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ):
        self.path = Path(path)
        self._clock = clock
        offset = clock() - wall()
        self._to_mono = lambda w: w + offset
        self._since = since_wall
        self._handle = None
        self._identity: tuple[int, int] | None = None
        self._position = 0
        self._splitter = LineSplitter()
        self._history: HistoryTimes | None = None  # set while the first read takes what was there
        self._chunks: list[str] = []
        self.rotations = 0
        self.truncations = 0

    # -- reading ----------------------------------------------------------------------------------

    def _open(self) -> bool:
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 - kept open across calls, closed in close()
            stat = os.fstat(handle.fileno())
        except OSError:
            return False
        self._handle, self._identity, self._position = handle, (stat.st_dev, stat.st_ino), 0
        return True

    def _read_to_end(self, now: float) -> list[tuple[float, str]]:
        out: list[tuple[float, str]] = []
        assert self._handle is not None
        while True:
            chunk = self._handle.read(_READ_CHUNK)
            if not chunk:
                return out
            self._position += len(chunk)
            if self._history is None:
                self._chunks.append(chunk.decode("utf-8", "replace"))
            out += self._timed(self._splitter.feed(chunk), now)

    def _timed(self, lines: list[str], now: float) -> list[tuple[float, str]]:
        if self._history is None:
            return [(now, line) for line in lines]
        timed = []
        for line in lines:
            t = self._history.time_of(line)
            if t is not None:
                timed.append((t, line))
                self._chunks.append(line + "\n")  # an earlier run's records stay out of the bundle
        return timed

    def _flush(self, now: float) -> list[tuple[float, str]]:
        return self._timed(self._splitter.flush(), now)

    def take(self) -> list[tuple[float, str]]:
        now = self._clock()
        out: list[tuple[float, str]] = []
        if self._handle is None:
            if not self._open():
                return out  # not there (yet): tail -F waits for it
            # The first read takes what is already in the file: history, with its own times.
            self._history = HistoryTimes(self._to_mono, since_wall=self._since, now_mono=now)
        try:
            stat = os.stat(self.path)
        except OSError:
            stat = None  # moved away and not yet recreated: finish the old file
        if stat is not None and (stat.st_dev, stat.st_ino) != self._identity:
            out += self._read_to_end(now) + self._flush(now)
            self._handle.close()
            self._handle = None
            self.rotations += 1
            if self._open():
                self._history = None
                out += self._read_to_end(now)
            return out
        if stat is not None and stat.st_size < self._position:
            out += self._flush(now)
            self._handle.seek(0)
            self._position = 0
            self.truncations += 1
        out += self._read_to_end(now)
        self._history = None  # from now on a line's time is when it was read
        return out

    def drain(self) -> list[tuple[float, str]]:
        """Everything left, the last unterminated line included (the writer has stopped)."""
        out = self.take()
        return out + self._flush(self._clock())

    def text(self) -> str:
        return "".join(self._chunks)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
