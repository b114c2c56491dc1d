"""The watcher's input: output split on \\n and \\r (tqdm progress is output), docker timestamps."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kit.runtime.docker_source import parse_docker_time, proc_read_bytes, stats_counters
from kit.runtime.source import LineSplitter, SourceState


def split(*chunks: bytes) -> list[str]:
    splitter = LineSplitter()
    out: list[str] = []
    for chunk in chunks:
        out += splitter.feed(chunk)
    return out + splitter.flush()


def test_newlines_crlf_and_lone_cr_all_end_a_line():
    assert split(b"a\nb\r\nc\rd") == ["a", "b", "c", "d"]


def test_a_tqdm_redraw_counts_the_moment_it_arrives():
    splitter = LineSplitter()
    assert splitter.feed(b"[TP0] Load weight begin.\n") == ["[TP0] Load weight begin."]
    assert splitter.feed(b"\rLoading shards:  10% | 4/39") == ["Loading shards:  10% | 4/39"]
    assert splitter.feed(b"\rLoading shards:  12% | 5/39") == ["Loading shards:  12% | 5/39"]
    assert splitter.feed(b"\rLoading shards: 100% | 39/39\n") == ["Loading shards: 100% | 39/39"]


def test_a_line_written_in_pieces_is_one_line():
    assert split(b"[TP0] Init par", b"allel begin.", b"\n") == ["[TP0] Init parallel begin."]


def test_crlf_split_across_chunks_is_one_break():
    assert split(b"first\r", b"\nsecond\n") == ["first", "second"]


def test_blank_segments_are_dropped_and_bad_utf8_is_replaced():
    assert split(b"\r\r\n\n  \nx\xff\n") == ["x\ufffd"]


@given(st.lists(st.text(alphabet="ab\r\n ", max_size=12), max_size=12))
def test_chunking_never_changes_the_lines(pieces):
    """However the bytes are cut into chunks, no character is lost, duplicated or reordered, and no
    blank line comes out. (A chunk starting with \\r is emitted at once as a redraw, so a line whose
    rest arrives in a later chunk may come out in two pieces: the price of seeing progress live.)"""
    text = "".join(pieces)
    whole = [line for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n") if line.strip()]
    got = split(*(p.encode() for p in pieces))
    assert "".join(got).replace(" ", "") == "".join(whole).replace(" ", "")
    assert all(line.strip() for line in got)


@given(st.lists(st.text(alphabet="ab ", min_size=1, max_size=8), max_size=8))
def test_lines_written_in_pieces_without_redraws_come_out_whole(pieces):
    text = "".join(pieces) + "\n"
    assert split(*(p.encode() for p in pieces), b"\n") == ([text.strip("\n")] if text.strip() else [])


def test_docker_timestamps_with_nanoseconds():
    assert parse_docker_time("2026-12-02T17:32:56.123456789Z") == parse_docker_time(
        "2026-12-02T17:32:56.123456Z"
    )
    assert parse_docker_time("2026-12-02T17:32:56Z") is not None
    assert parse_docker_time("0001-01-01T00:00:00Z") is None  # the engine's "never"
    assert parse_docker_time("garbage") is None


def teststats_counters_read_cpu_blkio_and_network():
    stats = {
        "cpu_stats": {"cpu_usage": {"total_usage": 2_500_000_000}},
        "blkio_stats": {
            "io_service_bytes_recursive": [{"op": "Read", "value": 10}, {"op": "Write", "value": 99}]
        },
        "networks": {"eth0": {"rx_bytes": 5}, "eth1": {"rx_bytes": 7}},
    }
    assert stats_counters(stats) == (2.5, 10, 12)
    assert stats_counters({}) == (None, None, None)  # cgroup v1 without blkio, host networking


def test_proc_read_bytes_sums_what_it_can_read(tmp_path):
    (tmp_path / "10").mkdir()
    (tmp_path / "10" / "io").write_text("rchar: 5\nread_bytes: 4096\nwrite_bytes: 0\n")
    (tmp_path / "11").mkdir()
    (tmp_path / "11" / "io").write_text("read_bytes: 1000\n")
    assert proc_read_bytes([10, 11, 12], proc=tmp_path) == 5096
    assert proc_read_bytes([12], proc=tmp_path) is None


def test_restart_policies_that_bring_a_server_back():
    assert SourceState(False, exit_code=1, restart_policy="on-failure").restarting
    assert not SourceState(False, exit_code=0, restart_policy="on-failure").restarting
    assert SourceState(False, exit_code=0, restart_policy="always").restarting
    assert not SourceState(False, exit_code=1, restart_policy="no").restarting
    assert not SourceState(False, exit_code=137, oom_killed=True, restart_policy="always").restarting


# -- compile activity and ranks, read from the host's /proc (real processes, real files) ---------


def test_compilers_and_rank_cpu_are_read_off_a_real_process_tree(tmp_path):
    """A shell standing in for the container's PID 1, with a child named like a compiler (by its
    executable, which is what /proc/PID/comm shows) and a child titled like an SGLang scheduler."""
    import shutil
    import subprocess
    import time

    from kit.runtime.docker_source import compilers_running, process_tree, rank_cpu_seconds

    # Triton 3.8's assembler for sm_120: a name (15 characters, all of comm) outside the old list.
    ptxas = tmp_path / "ptxas-blackwell"
    shutil.copy(shutil.which("sleep"), ptxas)
    script = f"{ptxas} 30 & (exec -a sglang::scheduler_TP1 sleep 30) & wait"
    root = subprocess.Popen(["bash", "-c", script])
    try:
        # Three processes are not enough: the subshell is 'bash' until its exec renames it, so wait
        # for the scheduler's title as well (under load the exec comes late).
        deadline = time.monotonic() + 20
        tree = process_tree(root.pid)
        while time.monotonic() < deadline and not (
            compilers_running(tree) == 1 and "TP1" in dict(rank_cpu_seconds(tree))
        ):
            time.sleep(0.05)
            tree = process_tree(root.pid)
        assert compilers_running(tree) == 1
        ranks = dict(rank_cpu_seconds(tree))
        assert set(ranks) == {"TP1"} and ranks["TP1"] >= 0
    finally:
        for proc in process_tree(root.pid)[1:]:
            proc.kill()
        root.kill()
        root.wait()
    assert process_tree(None) == [] and compilers_running([]) is None


def test_compilers_are_matched_by_family():
    from kit.runtime.compile_cache import is_compiler

    for name in (
        "ptxas",
        "ptxas-blackwell",
        "nvcc",
        "cicc",
        "cc1plus",
        "ld",
        "ld.lld",
        "ld.gold",
        "ninja",
        "g++-12",
    ):
        assert is_compiler(name), name
    for name in ("python3", "sglang::schedul", "bash", "sleep", "ldconfig", "tini", "docker-init"):
        assert not is_compiler(name), name


def test_a_gpu_nvml_cannot_read_is_a_fact_in_the_sample_not_an_exception():
    from kit.runtime.docker_source import DockerSource

    class LostGpus:
        def usage(self, pids):
            raise RuntimeError("GPU is lost")

    source = object.__new__(DockerSource)
    source.gpus = LostGpus()
    memory, util, error = source._gpu_usage([1, 2])
    assert (memory, util) == (None, ()) and "GPU is lost" in error


def test_writes_fall_back_on_the_cgroup_where_proc_io_is_unreadable():
    """No process of the tree readable (another user's, no ptrace): the engine's block-I/O write
    bytes of the container's cgroup count from the first reading, and the source says so."""
    from kit.runtime.docker_source import DockerSource, blkio_bytes
    from kit.runtime.processes import WriteMeter

    stats = {
        "blkio_stats": {
            "io_service_bytes_recursive": [{"op": "read", "value": 7}, {"op": "write", "value": 5}]
        }
    }
    assert (
        blkio_bytes(stats, "write") == 5
        and blkio_bytes(stats, "read") == 7
        and blkio_bytes({}, "write") is None
    )
    source = object.__new__(DockerSource)
    source._writes, source._cgroup_writes_at_start, source.notes = WriteMeter(), None, []
    assert source._written([], 1000) == (0, "cgroup")
    assert source._written([], 5096) == (4096, "cgroup")
    assert any("cgroup" in note for note in source.notes)
    assert source._written([], None) == (None, None)  # neither: unknown, never zero
    assert any("unknown" in note for note in source.notes)


def test_the_counters_a_host_lets_the_watch_read():
    from kit.logs import ActivitySample
    from kit.logs.counters import readable_counters

    hidden = ActivitySample(t=1, cpu_seconds=2.0, read_bytes=0, compile_bytes=10, writes_via="cgroup")
    readable = readable_counters(hidden)
    assert "cpu" in readable.read and "writes (the container's cgroup" in readable.line()
    assert {"compilers", "ranks' processes", "gpu memory", "network"} <= set(readable.unread)
    full = ActivitySample(
        t=1,
        cpu_seconds=1,
        read_bytes=0,
        net_rx_bytes=0,
        gpu_mem_bytes=0,
        compile_bytes=0,
        compilers=0,
        rank_processes=(),
        writes_via="proc",
    )
    assert readable_counters(full).unread == () and "/proc/PID/io" in readable_counters(full).line()
