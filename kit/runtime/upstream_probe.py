"""Asks the upstream tools inside a server's namespaces; run by the server's own Python.

Standard library only: kit/runtime/upstream.py hands this file's text to `python -c` in the
server's container (`docker exec`: its network namespace, its /proc, its torch) or, for host
processes, to the server's interpreter. One JSON object on stdout:

    {"nccl_pids": [...],
     "ras": {"snapshots": [{"format": "json"|"text", "text": "...", "at": 0.0}, ...]} | {"skipped": "..."},
     "flight_recorder": {"report": "...", "rc": 0, "dumped": [0, 1]} | {"skipped": "..."}}

NCCL RAS: NCCL's line protocol on 127.0.0.1:PORT (NCCL src/ras/client.cc at v2.28.7-1: `CLIENT
PROTOCOL 2`, `SET FORMAT json` from 2.28.7, `STATUS`, then the status until the connection closes),
asked only where a process has libnccl mapped, twice, GAP seconds apart. Flight recorder: a byte
into every `<pipe prefix><rank>.pipe` (ProcessGroupNCCL's DumpPipe), then the dumps written since,
copied apart and read by `python -m torch.distributed.flight_recorder.fr_trace DIR -p fr_rank_ -v`.
"""

import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time


def nccl_pids():
    found = []
    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            with open(maps, encoding="utf-8", errors="replace") as handle:
                if "libnccl" in handle.read():
                    found.append(int(maps.split("/")[2]))
        except OSError:
            continue
    return sorted(found)


def _line(sock):
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    return data.decode("utf-8", "replace").strip()


def ras_status(port, timeout):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(b"CLIENT PROTOCOL 2\n")
        hello = _line(sock)
        if not hello.upper().startswith("SERVER PROTOCOL"):
            raise OSError(f"unexpected greeting {hello[:80]!r}")
        sock.sendall(b"SET FORMAT json\n")
        form = "json" if _line(sock).upper() == "OK" else "text"  # before 2.28.7: ERROR, text it is
        sock.sendall(b"STATUS\n")
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return {"format": form, "text": b"".join(chunks).decode("utf-8", "replace")}


def ras(port, gap, pids):
    if not pids:
        return {"skipped": "NCCL is not loaded in any process of the server (a gloo or CPU run has no RAS)"}
    snapshots, start = [], time.monotonic()
    for index in range(2):
        if index:
            time.sleep(gap)
        try:
            answer = ras_status(port, timeout=gap + 10)
        except OSError as exc:
            return {"skipped": f"RAS on 127.0.0.1:{port} did not answer: {exc}", "snapshots": snapshots}
        answer["at"] = round(time.monotonic() - start, 1)
        snapshots.append(answer)
    return {"snapshots": snapshots}


def flight_recorder(dump_prefix, pipe_prefix, wait):
    pipes = sorted(glob.glob(glob.escape(pipe_prefix) + "*.pipe"))
    if not pipes:
        return {
            "skipped": "no rank made a dump pipe (ProcessGroupNCCL makes one per rank; gloo and torch's "
            "CPU build have none)"
        }
    asked, said = time.time(), []
    ranks = []
    for pipe in pipes:
        rank = pipe[len(pipe_prefix) : -len(".pipe")]
        try:
            fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
            try:
                os.write(fd, b"1")
            finally:
                os.close(fd)
            ranks.append(rank)
        except OSError as exc:  # ENXIO: no rank reads it (a pipe left by an earlier run)
            said.append(f"{os.path.basename(pipe)}: {exc.strerror or exc}")
    if not ranks:
        return {"skipped": "no rank read its dump pipe: " + "; ".join(said)}
    deadline = time.monotonic() + wait
    fresh = {}
    while time.monotonic() < deadline and len(fresh) < len(ranks):
        for rank in ranks:
            path = dump_prefix + rank
            try:
                if os.path.getmtime(path) >= asked - 1 and os.path.getsize(path) > 0:
                    fresh[rank] = path
            except OSError:
                pass
        time.sleep(0.5)
    if not fresh:
        return {"skipped": f"no rank wrote a dump within {wait:.0f} s of being asked", "asked": ranks}
    folder = tempfile.mkdtemp(prefix="kit-fr-")
    try:
        for rank, path in fresh.items():
            shutil.copyfile(path, os.path.join(folder, "fr_rank_" + rank))
        command = [
            sys.executable,
            "-m",
            "torch.distributed.flight_recorder.fr_trace",
            folder,
            "-p",
            "fr_rank_",
            "-v",
        ]
        if len(fresh) < len(ranks):
            command.append("--allow-incomplete-ranks")
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        return {
            "report": (done.stdout + done.stderr)[-200000:],
            "rc": done.returncode,
            "dumped": sorted(fresh),
            "asked": ranks,
            "notes": said,
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main():
    args = json.loads(sys.argv[1])
    pids = nccl_pids()
    out = {"nccl_pids": pids}
    out["flight_recorder"] = flight_recorder(args["dump_prefix"], args["pipe_prefix"], args["fr_wait_s"])
    out["ras"] = ras(args["ras_port"], args["ras_gap_s"], pids)
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main()
