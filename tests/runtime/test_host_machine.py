"""The machine as its kernel reports it (kit.runtime.host.read_machine), and the host section a host
process's fingerprint makes of it (kit.diagnose.hostenv.machine_section)."""

from __future__ import annotations

import os
import platform

from kit.diagnose import fingerprint as fp
from kit.diagnose.hostenv import machine_section
from kit.runtime.host import MachineFacts, read_machine
from kit.runtime.host.system import mem_total, os_name

OS_RELEASE = 'NAME="Ubuntu"\nVERSION_ID="24.04"\nPRETTY_NAME="Ubuntu 24.04.2 LTS"\nID=ubuntu\n'
MEMINFO = "MemTotal:       32768000 kB\nMemFree:         1024000 kB\n"


def _root(tmp_path, *, os_release=OS_RELEASE, meminfo=MEMINFO, cgroup2=True):
    (tmp_path / "etc").mkdir()
    (tmp_path / "proc").mkdir()
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    if os_release is not None:
        (tmp_path / "etc/os-release").write_text(os_release)
    if meminfo is not None:
        (tmp_path / "proc/meminfo").write_text(meminfo)
    if cgroup2:
        (tmp_path / "sys/fs/cgroup/cgroup.controllers").write_text("cpu memory\n")
    return tmp_path


def test_the_machine_is_read_from_its_files(tmp_path):
    machine = read_machine(_root(tmp_path))
    assert machine == MachineFacts(
        kernel=platform.release(),
        arch=platform.machine(),
        os="Ubuntu 24.04.2 LTS",
        cpus=os.cpu_count(),
        memory_bytes=32768000 * 1024,
        cgroup="2",
    )
    section = machine_section(machine)
    assert section["os"] == "Ubuntu 24.04.2 LTS"
    assert section["memory_gib"] == 31.2
    assert section["cgroup"] == "2"
    assert all(fp.is_unknown(section[k]) for k in ("docker_engine", "docker_api", "compose"))


def test_what_cannot_be_read_is_unknown_with_the_reason(tmp_path):
    machine = read_machine(_root(tmp_path, os_release=None, meminfo="nothing here\n", cgroup2=False))
    assert (machine.os, machine.memory_bytes, machine.cgroup) == (None, None, "1")
    section = machine_section(machine)
    assert fp.is_unknown(section["os"]) and "/etc/os-release" in str(section["os"])
    assert fp.is_unknown(section["memory_gib"]) and "/proc/meminfo" in str(section["memory_gib"])


def test_the_parsers_take_the_last_matching_line():
    assert os_name("PRETTY_NAME='x'\nPRETTY_NAME=\"Debian GNU/Linux 12\"\n") == "Debian GNU/Linux 12"
    assert os_name("NAME=x\n") is None
    assert mem_total("MemTotal: 1 kB\n") == 1024
    assert mem_total("") is None
