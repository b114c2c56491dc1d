"""A systemd unit's output from the journal: `journalctl -u UNIT -f -o json`, as timed lines.

    argv = journal_argv("sglang-qwen.service", since_wall=start)   # pure
    entry = parse_entry(json_line)                                 # pure: (wall seconds, text) or None
    follower = JournalFollower(argv)                               # a thread reading journalctl

`journalctl -o json` writes one JSON object per entry and line (systemd.journal-fields(7),
journalctl(1)). MESSAGE is a string, or an array of byte values when it is not valid UTF-8 (a tqdm
bar's glyphs cut mid-character), or null when it is over 4096 bytes and `--all` was not given (it
is given here). __REALTIME_TIMESTAMP is microseconds since the epoch, as a decimal string.

journald itself splits a service's stdout at `\\n` only (LineMax=, 48K by default), so a tqdm bar
drawn with `\\r` arrives as one entry when it finishes: the activity counters (reads, GPU memory)
carry a quiet load, as they do for a container's log driver. An entry's `\\r` segments still
become separate lines here, as the `LineSplitter` makes them for a container's raw stream.
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

from kit.runtime.source import LineSplitter, take_all


def journal_argv(unit: str, *, since_wall: float | None, follow: bool = True) -> list[str]:
    """journalctl's arguments for UNIT's entries since a wall time (the watched run's start)."""
    argv = ["journalctl", "--unit", unit, "--output", "json", "--all", "--no-pager", "--lines", "all"]
    if since_wall is not None:
        argv += ["--since", f"@{since_wall:.6f}"]
    if follow:
        argv.append("--follow")
    return argv


def _message(value: object) -> str | None:
    """A field's text: a string, an array of byte values, or (a field set twice) an array of those."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(b, int) and 0 <= b < 256 for b in value):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, list) and value and all(isinstance(v, (str, list)) for v in value):
        parts = [_message(v) for v in value]
        return "\n".join(p for p in parts if p is not None)
    return None  # null: over the size journalctl shows without --all


def parse_entry(line: str | bytes) -> tuple[float | None, str] | None:
    """(wall seconds or None, MESSAGE) of one `journalctl -o json` line; None for anything else."""
    try:
        entry = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(entry, dict):
        return None
    message = _message(entry.get("MESSAGE"))
    if message is None:
        return None
    stamp = entry.get("__REALTIME_TIMESTAMP")
    try:
        wall = int(stamp) / 1e6 if stamp is not None else None
    except (TypeError, ValueError):
        wall = None
    return wall, message


class JournalFollower:
    """Runs `argv` (journalctl ... -o json) and hands over its entries as (monotonic time, line).

    An entry's time is its own __REALTIME_TIMESTAMP on the monotonic clock (never later than when
    it arrived), so history read at the start keeps its real phase times."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ):
        self.argv = list(argv)
        self._clock = clock
        offset = clock() - wall()
        self._to_mono = lambda w: w + offset
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        self.done = threading.Event()
        self.error: str | None = None
        self._texts: list[str] = []
        self._process: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._run, name="kit-journal", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        splitter = LineSplitter()
        try:
            self._process = subprocess.Popen(
                self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
            )
        except OSError as exc:
            self.error = f"{self.argv[0]} could not be run ({exc.strerror or exc})"
            self.done.set()
            return
        assert self._process.stdout is not None
        for raw in self._process.stdout:
            parsed = parse_entry(raw)
            if parsed is None:
                continue
            wall, message = parsed
            now = self._clock()
            t = now if wall is None else min(now, self._to_mono(wall))
            self._texts.append(message + "\n")
            for line in [*splitter.feed(message.encode() + b"\n"), *splitter.flush()]:
                self.lines.put((t, line))
        code = self._process.wait()
        if code != 0 and self._process.stderr is not None:
            why = self._process.stderr.read().decode("utf-8", "replace").strip().splitlines()
            self.error = f"{self.argv[0]} exited {code}: {why[-1] if why else 'no output'}"
        self.done.set()

    def take(self) -> list[tuple[float, str]]:
        return take_all(self.lines)

    def drain(self, timeout_s: float) -> list[tuple[float, str]]:
        """What arrived; journalctl --follow never ends by itself, so wait only for what is in flight."""
        self.done.wait(timeout=min(timeout_s, 1.0))
        return self.take()

    def text(self) -> str:
        return "".join(self._texts)

    def close(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
            if process.poll() is None:
                process.kill()
                process.wait(timeout=5)
