"""Compile progress from the processes' own writes (/proc/PID/io write_bytes): the accounting, pure,
and a real child process whose writes the meter sees."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
from hypothesis import given
from hypothesis import strategies as st

from kit.runtime.processes import WriteMeter, process_tree, write_readings


def test_the_first_reading_is_the_baseline_and_each_process_counts_from_its_own_last():
    meter = WriteMeter()
    assert meter.read({(1, 10.0): 5000, (2, 11.0): 100}) == 0  # what was written before the watch
    assert meter.read({(1, 10.0): 5000, (2, 11.0): 400}) == 300
    # a compiler started since: everything it wrote, it wrote while watched
    assert meter.read({(1, 10.0): 5100, (2, 11.0): 400, (3, 20.0): 2000}) == 2400
    # the compiler exited (gone from the tree): what it wrote stays counted
    assert meter.read({(1, 10.0): 5100, (2, 11.0): 400}) == 2400
    # PID 2 reused by a new process (another start time): a new process, counted from zero
    assert meter.read({(1, 10.0): 5100, (2, 30.0): 50}) == 2450


def test_nothing_readable_is_unknown_never_zero_progress():
    meter = WriteMeter()
    assert meter.read(None) is None
    assert meter.read({(1, 1.0): 10}) == 0
    assert meter.read(None) is None  # unknown now, not "no progress"
    assert meter.read({(1, 1.0): 30}) == 20  # and the count goes on from the last readable reading


@given(
    st.lists(st.dictionaries(st.tuples(st.integers(1, 5), st.just(1.0)), st.integers(0, 10**9)), max_size=20)
)
def test_the_count_never_goes_down(readings):
    meter, last = WriteMeter(), 0
    for reading in readings:
        written = meter.read(reading or None)
        if written is not None:
            assert written >= last
            last = written


WRITER = (
    "import os, sys, time; time.sleep(1.5); out = open(sys.argv[1], 'wb'); "
    "out.write(os.urandom(1 << 20)); out.flush(); time.sleep(30)"
)

PARENT = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]]).wait()"


def test_a_child_writing_a_megabyte_is_seen_through_its_parents_tree(tmp_path):
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            PARENT,
            WRITER,
            str(tmp_path / "kernel.cubin"),
        ]
    )
    try:
        meter = WriteMeter()
        assert meter.read(write_readings(process_tree(parent.pid))) == 0
        written, deadline = 0, time.monotonic() + 20
        while written < 1 << 20 and time.monotonic() < deadline:
            time.sleep(0.3)
            written = meter.read(write_readings(process_tree(parent.pid))) or 0
        assert written >= 1 << 20, f"{written} bytes seen"
    finally:
        for child in psutil.Process(parent.pid).children(recursive=True):
            child.kill()
        parent.kill()
        parent.wait(timeout=10)
