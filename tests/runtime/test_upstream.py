"""The upstream probe's wire protocol and dump trigger, on real sockets and a real named pipe (no
NCCL, no GPU here: the RAS server is a stand-in speaking NCCL's protocol, src/ras/client_support.cc
at v2.28.7-1), and its answer read into evidence."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

from kit.logs.evidence import UpstreamWord
from kit.runtime import upstream_probe
from kit.runtime.upstream import gather, read_answer

RAS = Path(__file__).parents[1] / "fixtures" / "ras"


def _ras_server(status: str, *, json_ok: bool) -> tuple[int, list[str]]:
    """One-connection-at-a-time server: greets, answers SET FORMAT, sends STATUS, closes."""
    listener = socket.create_server(("127.0.0.1", 0))
    heard: list[str] = []

    def serve() -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            with conn, conn.makefile("rwb") as stream:
                for raw in stream:
                    line = raw.decode().strip()
                    heard.append(line)
                    if line.startswith("CLIENT PROTOCOL"):
                        stream.write(b"SERVER PROTOCOL 2\n")
                    elif line == "SET FORMAT json":
                        stream.write(b"OK\n" if json_ok else b"ERROR: Unknown command set format json\n")
                    elif line == "STATUS":
                        stream.write(status.encode())
                        stream.flush()
                        break
                    stream.flush()
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1], heard


def test_the_probe_speaks_rass_protocol_and_takes_two_snapshots():
    status = (RAS / "json-all-entered-1.json").read_text()
    port, heard = _ras_server(status, json_ok=True)
    answer = upstream_probe.ras(port, 0.2, pids=[4242])
    assert heard[:3] == ["CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"]
    assert [s["format"] for s in answer["snapshots"]] == ["json", "json"]
    found = read_answer({"ras": answer, "flight_recorder": {"skipped": "x"}})
    assert found.ras.lines()[0].startswith("NCCL RAS: all 4 ranks launched AllReduce #12, Broadcast #1")
    assert set(found.files) == {"ras-1.json", "ras-2.json"}


def test_before_2_28_7_the_probe_reads_text():
    port, _ = _ras_server((RAS / "text-mismatch.txt").read_text(), json_ok=False)
    answer = upstream_probe.ras(port, 0.1, pids=[1])
    assert [s["format"] for s in answer["snapshots"]] == ["text", "text"]
    found = read_answer({"ras": answer})
    assert "rank 3 never launched AllReduce" in found.ras.lines()[0] and "ras-2.txt" in found.files


def test_no_nccl_no_pipe_and_no_live_server_are_each_said():
    assert upstream_probe.ras(1, 0.1, pids=[])["skipped"].startswith("NCCL is not loaded")
    assert (
        "no rank made a dump pipe"
        in upstream_probe.flight_recorder("/nonexistent/fr_rank_", "/nonexistent/p_", 0.1)["skipped"]
    )

    class Replay:
        name = "replay:p2p-after-init"

    fired = UpstreamWord("sglang-watchdog", "SGLang's soft watchdog fired 1 time(s)", "soft-watchdog")
    said = gather(Replay(), (fired,)).lines()
    assert said[0] == "SGLang's soft watchdog fired 1 time(s)"
    assert said[1] == "NCCL RAS: not asked (replay:p2p-after-init is no live server)"
    assert said[2] == "flight recorder: no dump (replay:p2p-after-init is no live server)"


def test_a_rank_asked_through_its_pipe_dumps_and_fr_trace_is_run_on_the_fresh_dump(tmp_path, monkeypatch):
    """A stand-in rank reads its FIFO as ProcessGroupNCCL's DumpPipe does and writes its dump; the
    analyzer (a stand-in for `python -m torch...fr_trace`: no torch here) gets the fresh copy."""
    pipe, dump = tmp_path / "fr_pipe_rank_0.pipe", tmp_path / "fr_rank_0"
    os.mkfifo(pipe)
    dump.write_bytes(b"stale")
    os.utime(dump, (1, 1))  # an earlier run's dump is never taken for this one

    def rank() -> None:
        fd = os.open(pipe, os.O_RDONLY)  # blocks until the probe opens it for writing
        os.read(fd, 1)
        os.close(fd)
        dump.write_bytes(b"fresh dump")

    reader = threading.Thread(target=rank, daemon=True)
    reader.start()
    seen = {}

    def fake_run(command, **_):
        folder = Path(command[3])
        seen["files"] = {p.name: p.read_bytes() for p in folder.iterdir()}

        class Done:
            returncode, stdout, stderr = 0, "Not all ranks joining collective, sequence number: 3\n", ""

        return Done()

    monkeypatch.setattr(upstream_probe.subprocess, "run", fake_run)
    # The stand-in opens the pipe for reading only once the thread runs: give the writer a moment.
    import time

    time.sleep(0.2)
    answer = upstream_probe.flight_recorder(str(tmp_path / "fr_rank_"), str(tmp_path / "fr_pipe_rank_"), 5)
    reader.join(5)
    assert seen["files"] == {"fr_rank_0": b"fresh dump"} and answer["dumped"] == ["0"]
    found = read_answer({"flight_recorder": answer, "ras": {"skipped": "no NCCL"}})
    assert found.files["fr_trace.txt"].startswith("Not all ranks joining")
    failed = read_answer({"flight_recorder": {"report": "No module named torch", "rc": 1}})
    assert failed.flight_recorder.lines() == (
        "flight recorder: fr_trace could not analyse the dumps: exit 1: No module named torch",
    )


def test_an_odd_answer_is_a_skip_never_a_traceback():
    odd = (
        {},
        {"ras": 3, "flight_recorder": []},
        {"ras": {"snapshots": 7}},
        {"ras": {"snapshots": [{"text": "{"}, {"text": "{"}]}},
        {"ras": {"snapshots": [{"text": "{}", "at": "x"}, {"text": "{}"}]}},
    )
    for answer in odd:
        lines = read_answer(answer).lines()
        assert lines[0].startswith("NCCL RAS: not asked (") and lines[1].startswith(
            "flight recorder: no dump"
        )


def test_sglang_own_phases_are_kept_at_ready_beside_the_kits():
    """`/server_info`'s startup_time as SGLang 0.5.23 builds it (srt/observability/startup_time.py)."""
    import httpx

    from kit.runtime.http import server_startup_time
    from kit.startup.result import sglang_phases

    said = {
        "load_weight": 812.4,
        "kv_cache_allocation": 3.2,
        "scheduler_e2e": 901.0,
        "cuda_graph": {"decode": 41.5, "prefill": 0.0},
        "tokenizer_e2e": 930.7,
    }

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/server_info":
            return httpx.Response(200, json={"version": "0.5.23", "startup_time": said})
        return httpx.Response(404)

    got = server_startup_time("http://server.invalid", transport=httpx.MockTransport(handle))
    assert got == said
    assert sglang_phases(got) == (
        "SGLang's own (/server_info startup_time): load_weight 812.4 s, kv_cache_allocation 3.2 s, "
        "scheduler_e2e 901.0 s, cuda_graph.decode 41.5 s, tokenizer_e2e 930.7 s"
    )
    missing = httpx.MockTransport(lambda request: httpx.Response(200, json={"version": "0.5.9"}))
    assert server_startup_time("http://server.invalid", transport=missing) is None
    assert (
        server_startup_time(
            "http://server.invalid", transport=httpx.MockTransport(lambda r: httpx.Response(503))
        )
        is None
    )
    assert sglang_phases(None) is None
