"""The kernel's log: the Xid lines the NVIDIA driver writes there (`NVRM: Xid (PCI:...): N, ...`) and
the OOM killer's lines (`Memory cgroup out of memory: Killed process N (...)`). The one reader of
it: NVML's Xid reading (kit/runtime/nvml.py) and the verdict's evidence (kit/logs/evidence.py
`kernel_findings`, through the sources' `kernel_log()`) each hold their own reader, from the
server's start on.

NVML's Xid events (kit/runtime/nvml.py) are recorded only from the moment a reader registers for
them (NVML API reference, Event Handling Methods: nvmlDeviceRegisterEvents): a watch that attaches to
a server started minutes earlier, or a GPU that failed while nothing watched, leaves its Xid in the
kernel's ring buffer alone. This reads that buffer from a wall time on, two ways:

- /dev/kmsg: one record per read(), `PRIORITY,SEQUENCE,MICROSECONDS,FLAGS;TEXT` (the kernel's
  Documentation/ABI/testing/dev-kmsg), microseconds since boot; non-blocking, so `read()` returns
  what is there and later calls return what came since. Readable by root, or by anyone where
  kernel.dmesg_restrict is 0;
- `journalctl --dmesg --output json` where /dev/kmsg is refused (a user in the systemd-journal or
  adm group reads the kernel's messages there), from the last entry's cursor on.

Neither readable: `note` says so, and the verdict's notes say Xids before NVML's registration are
unknown. A regular file in kmsg's format (recorded lines) reads the same way, for tests.

    log = KernelLog(since_wall=started)      # the server's start
    log.read()   -> [(wall seconds, text), ...]   new lines since the last read
    log.note     -> "/dev/kmsg from 12:03:04" | "the kernel log cannot be read here: ..."
    log.kept()   -> ((text, ...), None | why unreadable)   every line so far (the last KEEP_LINES)
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import time
from collections import deque

import psutil

from kit.runtime.journal import parse_entry

KMSG = "/dev/kmsg"
_MAX_RECORDS_PER_READ = 20000  # the ring holds a few MB; a read never loops forever on a flood
KEEP_LINES = 4000  # what `kept()` holds: the ring's last few thousand records, as dmesg shows


def parse_kmsg(record: str, boot_wall: float) -> tuple[float, str] | None:
    """(wall seconds, text) of one /dev/kmsg record, None for anything else (its continuation lines
    start with a space and carry key=value pairs, not text)."""
    head, sep, text = record.partition(";")
    fields = head.split(",")
    if not sep or len(fields) < 3 or not fields[0].isdigit():
        return None
    try:
        microseconds = int(fields[2])
    except ValueError:
        return None
    return boot_wall + microseconds / 1e6, text.rstrip("\n")


def journal_kernel_argv(since_wall: float | None, cursor: str | None) -> list[str]:
    argv = ["journalctl", "--dmesg", "--output", "json", "--no-pager", "--all"]
    if cursor:
        argv += ["--after-cursor", cursor]
    elif since_wall is not None:
        argv += ["--since", f"@{since_wall:.6f}"]
    return argv


class KernelLog:
    """The kernel's lines from `since_wall` on (see the module docstring)."""

    def __init__(self, since_wall: float | None, *, path: str = KMSG, journal: bool = True):
        self.since_wall = since_wall
        self.path = path
        self._journal = journal and shutil.which("journalctl") is not None
        self._fd: int | None = None
        self._cursor: str | None = None
        self._how: str | None = None
        self.note = "the kernel log not read yet"
        self._boot_wall = psutil.boot_time()
        self._kept: deque[str] = deque(maxlen=KEEP_LINES)

    def _since(self) -> str:
        return time.strftime("%H:%M:%S", time.localtime(self.since_wall)) if self.since_wall else "boot"

    def _open(self) -> None:
        if self._how is not None:
            return
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            self._how = "kmsg"
            self.note = f"the kernel log ({self.path}) from {self._since()}"
            return
        except OSError as exc:
            refused = f"{self.path}: {exc.strerror or exc}"
        if self._journal and self._journal_works():
            self._how = "journal"
            self.note = f"the kernel log (journalctl --dmesg) from {self._since()}"
            return
        self._how = "none"
        self.note = (
            f"the kernel log cannot be read here ({refused}; journalctl --dmesg "
            f"{'refused' if self._journal else 'not installed'}): its OOM kills and the Xids before "
            "NVML's registration are unknown (needs CAP_SYSLOG: run as root, or in the systemd-journal group)"
        )

    def _journal_works(self) -> bool:
        try:
            done = subprocess.run(
                ["journalctl", "--dmesg", "--lines", "1", "--no-pager", "--quiet"],
                capture_output=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return False
        return done.returncode == 0 and bool(done.stdout.strip())

    def read(self) -> list[tuple[float, str]]:
        """The lines logged since the last read (from since_wall on the first), never blocking."""
        self._open()
        if self._how == "kmsg":
            return self._read_kmsg()
        if self._how == "journal":
            return self._read_journal()
        return []

    def kept(self) -> tuple[tuple[str, ...], str | None]:
        """Every line read so far (the last KEEP_LINES), the new ones read now, and why the log
        cannot be read where it cannot (None where it can): for each verdict's evidence, so a line
        read for an earlier verdict is not lost to a later one."""
        self._kept.extend(text for _, text in self.read())
        return tuple(self._kept), (self.note if self._how == "none" else None)

    def _read_kmsg(self) -> list[tuple[float, str]]:
        assert self._fd is not None
        found: list[tuple[float, str]] = []
        pending = b""
        for _ in range(_MAX_RECORDS_PER_READ):
            try:
                chunk = os.read(self._fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten before we read them: go on
                    continue
                break  # EAGAIN: nothing more now
            if not chunk:  # a regular file's end (recorded lines)
                break
            pending += chunk
        for raw in pending.decode("utf-8", "replace").splitlines():
            parsed = parse_kmsg(raw, self._boot_wall)
            if parsed is not None and (self.since_wall is None or parsed[0] >= self.since_wall):
                found.append(parsed)
        return found

    def _read_journal(self) -> list[tuple[float, str]]:
        try:
            done = subprocess.run(
                journal_kernel_argv(self.since_wall, self._cursor),
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return []
        found = []
        for line in done.stdout.splitlines():
            entry = parse_entry(line)
            if entry is not None and entry[0] is not None:
                found.append((entry[0], entry[1]))
            with contextlib.suppress(ValueError, AttributeError):
                self._cursor = json.loads(line).get("__CURSOR") or self._cursor
        return found

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
