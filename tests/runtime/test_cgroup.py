"""The server cgroup's counters on cgroup v1 and v2 (kit/runtime/cgroup.py), over a /proc and
/sys/fs/cgroup laid out as the kernel does (docs.kernel.org admin-guide/cgroup-v2 and cgroup-v1)."""

from __future__ import annotations

from pathlib import Path

from kit.runtime.cgroup import read_cgroup

ID = "docker/0123abcd"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def v2(tmp_path: Path, *, frozen: int, oom_kill: int) -> tuple[Path, Path]:
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    write(proc / "42" / "cgroup", f"0::/{ID}\n")
    write(
        root / ID / "memory.events", f"low 0\nhigh 0\nmax 3\noom 2\noom_kill {oom_kill}\noom_group_kill 0\n"
    )
    write(root / ID / "cgroup.events", f"populated 1\nfrozen {frozen}\n")
    write(root / ID / "cpu.stat", "usage_usec 900\nnr_throttled 4\nthrottled_usec 2500000\n")
    return proc, root


def test_cgroup_v2_reads_oom_kills_the_freezer_and_throttling(tmp_path):
    proc, root = v2(tmp_path, frozen=1, oom_kill=1)
    reading = read_cgroup(42, proc, root)
    assert reading is not None
    assert (reading.oom, reading.oom_kill, reading.frozen, reading.throttled_s) == (2, 1, True, 2.5)
    assert reading.where == ID


def test_cgroup_v1_reads_each_controllers_own_tree(tmp_path):
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    write(
        proc / "7" / "cgroup",
        f"9:memory:/{ID}\n6:freezer:/{ID}\n1:cpu,cpuacct:/{ID}\n0::/{ID}\n",
    )
    write(root / "memory" / ID / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    write(root / "freezer" / ID / "freezer.state", "FROZEN\n")
    write(root / "cpu,cpuacct" / ID / "cpu.stat", "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n")
    (root / "unified").mkdir()  # hybrid: v2 mounted beside v1, holding no controller
    reading = read_cgroup(7, proc, root)
    assert reading is not None
    assert (reading.oom_kill, reading.frozen, reading.throttled_s) == (3, True, 0.0)
    assert reading.where == f"memory/{ID}"


def test_nothing_readable_is_none_not_zero(tmp_path):
    assert read_cgroup(1, tmp_path / "proc", tmp_path / "cgroup") is None
    assert read_cgroup(None) is None
