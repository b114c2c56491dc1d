"""One reader of the kernel's log (kit/runtime/kernel_log.py) serves both of its readers: the OOM
killer's lines for a verdict's evidence (the sources' `kernel_log()`) and the NVIDIA driver's Xid lines
for NVML (kit/runtime/nvml.py). Records as /dev/kmsg gives them (the kernel's
Documentation/ABI/testing/dev-kmsg), read from the server's start on."""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from pathlib import Path

from kit.logs.evidence import kernel_findings
from kit.runtime import host_source
from kit.runtime.host_source import HostSource
from kit.runtime.kernel_log import KernelLog
from kit.runtime.xids import kernel_xid

KMSG = Path(__file__).resolve().parents[1] / "fixtures" / "kernel" / "kmsg-oom.txt"


def recorded(since_wall: float | None) -> KernelLog:
    return KernelLog(since_wall=since_wall, path=str(KMSG), journal=False)


def test_the_oom_lines_from_the_servers_start_on_are_kept_for_every_verdict():
    boot = recorded(None)._boot_wall
    log = recorded(boot + 60)  # the server started 60 s after boot: the OOM kill at 50 s is another's
    lines, unreadable = log.kept()
    assert unreadable is None
    assert not any("Killed process 777" in line for line in lines)
    [found] = kernel_findings(lines, {21806: "TP1"})
    assert (found.key, found.rank, found.pid) == ("kernel-oom", "TP1", 21806)
    # A later verdict (serving after READY) reads again: nothing new came, the kill is still there.
    assert log.read() == [] and log.kept()[0] == lines


def test_the_same_reader_gives_nvml_its_xid_lines():
    xids = [kernel_xid(text, wall) for wall, text in recorded(None).read()]
    assert [(x.xid, x.pci) for x in xids if x is not None] == [(119, "0000:37:00")]


def test_a_kernel_log_nobody_may_read_says_what_is_unknown():
    lines, unreadable = KernelLog(since_wall=None, path="/nonexistent/kmsg", journal=False).kept()
    assert lines == ()
    assert "cannot be read here" in unreadable and "OOM kills" in unreadable and "CAP_SYSLOG" in unreadable


def test_a_host_source_reads_the_kernel_log_from_its_servers_start(tmp_path, monkeypatch):
    """Every recorded line is from a minute after boot, long before this server started: none is its."""
    monkeypatch.setattr(host_source, "KernelLog", functools.partial(KernelLog, path=str(KMSG), journal=False))
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdout=out)
    try:
        time.sleep(0.2)
        source = HostSource.for_pid(process.pid, log=str(log))
        try:
            assert source.kernel_log() == ((), None)
        finally:
            source.close()
    finally:
        process.kill()
        process.wait(timeout=10)
