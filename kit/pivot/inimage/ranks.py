"""Preflight ranks: N torch.distributed ranks in one container, step by step. Standalone.

This file runs inside the image, never inside the kit: `kit preflight` copies it into a fresh
container at run time (put_archive), so no image carries it. It imports only the standard library
and torch. argv[1] names a request (JSON):

    {"world_size": 2, "device": "cpu" | "cuda", "backend": "gloo" | "nccl",
     "steps": ["init", "allreduce", "p2p", "sweep"], "until": null | "allreduce",
     "sweep": {"min_bytes": 8, "max_bytes": 134217728, "factor": 2, "iters": 20, "warmup": 5},
     "p2p_bytes": 1048576, "collective_timeout_s": 600, "run_timeout_s": 900}

The launcher imports torch once and forks one process per rank (a second import per rank would
cost seconds on the CPU rehearsal). Every rank prints its own events on stdout, one line each,
`KIT_PREFLIGHT {json}`; the kit reads them from the container's output and keeps the deadlines.

    start   a rank is up (its pid, for py-spy)        begin / end   a step, with its seconds and detail
    progress  one all_reduce size of the sweep (rank 0)  fail   wrong values (a step's check said no)
    error   an exception in a step                     done   a rank finished every step
    exit    the launcher saw a rank end (exit code)    timeout   the launcher's own last-resort limit

Steps, the same code on both devices:
  init       init_process_group (NCCL with device_id: eager communicator set-up; Gloo on CPU)
  allreduce  an all_reduce of known values, checked element by element
  p2p        every rank writes into every other rank's memory through the OS's sharing, and each
             owner checks what arrived: a CUDA IPC handle and a GPU-to-GPU copy on GPUs (as vLLM's
             p2p check does), a shared-memory mapping on CPU
  sweep      all_reduce from min_bytes to max_bytes by factor (as nccl-tests' all_reduce_perf does):
             each size checked once, then timed; the slowest rank's time gives algbw and busbw
"""

from __future__ import annotations

import json
import mmap
import multiprocessing
import multiprocessing.connection
import os
import socket
import sys
import time
import traceback
from datetime import timedelta

MARK = "KIT_PREFLIGHT "
STEPS = ("init", "allreduce", "p2p", "sweep")


def emit(**event) -> None:
    event["t"] = round(time.time(), 3)
    sys.stdout.write(MARK + json.dumps(event, separators=(",", ":")) + "\n")
    sys.stdout.flush()


class Mismatch(Exception):
    """A step ran to the end and its check found wrong values."""


class Rank:
    """One rank's state across steps."""

    def __init__(self, rank: int, request: dict, port: int):
        import torch

        self.torch = torch
        self.rank = rank
        self.request = request
        self.world = int(request["world_size"])
        self.device_kind = request["device"]
        self.backend = request["backend"]
        self.port = port
        self.control = None  # a gloo group for the kit's own bookkeeping (never the path under test)
        if self.device_kind == "cuda":
            torch.cuda.set_device(rank)
            self.device = torch.device("cuda", rank)
        else:
            self.device = torch.device("cpu")

    def sync(self) -> None:
        if self.device_kind == "cuda":
            self.torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier(group=self.control)

    # -- steps ------------------------------------------------------------------------------------

    def init(self) -> dict:
        import torch.distributed as dist

        options = {
            "backend": self.backend,
            "init_method": f"tcp://127.0.0.1:{self.port}",
            "rank": self.rank,
            "world_size": self.world,
            "timeout": timedelta(seconds=float(self.request.get("collective_timeout_s", 600))),
        }
        if self.device_kind == "cuda":
            options["device_id"] = self.device  # eager NCCL set-up: a communicator hang shows here
        dist.init_process_group(**options)
        self.control = dist.new_group(backend="gloo") if self.backend != "gloo" else None
        detail = {"backend": dist.get_backend()}
        if self.device_kind == "cuda":
            detail["nccl"] = ".".join(str(p) for p in self.torch.cuda.nccl.version())
            detail["device"] = self.torch.cuda.get_device_name(self.device)
        return detail

    def allreduce(self) -> dict:
        import torch.distributed as dist

        torch = self.torch
        n = 4096
        pattern = torch.arange(n, dtype=torch.float32, device=self.device) % 7 + 1
        values = pattern * (self.rank + 1)
        dist.all_reduce(values)
        self.sync()
        expected = pattern * (self.world * (self.world + 1) / 2)
        wrong = int((values != expected).sum().item())
        if wrong:
            first = int((values != expected).nonzero()[0].item())
            raise Mismatch(
                f"{wrong} of {n} values wrong after all_reduce "
                f"(element {first}: {values[first].item()}, expected {expected[first].item()})"
            )
        return {"elements": n, "dtype": "float32"}

    def _shared_buffer(self, rows: int, elements: int):
        """A buffer other ranks can write into: (tensor, handle to send them, what keeps it alive)."""
        torch = self.torch
        if self.device_kind == "cuda":
            from torch.multiprocessing.reductions import reduce_tensor

            buffer = torch.zeros((rows, elements), dtype=torch.float32, device=self.device)
            return buffer, ("cuda-ipc", reduce_tensor(buffer)), None
        path = f"/dev/shm/kit-preflight-{self.port}-{self.rank}"
        size = rows * elements * 4
        with open(path, "w+b") as handle:
            handle.truncate(size)
            mapping = mmap.mmap(handle.fileno(), size)
        buffer = torch.frombuffer(mapping, dtype=torch.float32).view(rows, elements)
        buffer.zero_()
        return buffer, ("shared-memory", (path, rows, elements)), (mapping, path)

    def _open_remote(self, handle):
        torch = self.torch
        kind, payload = handle
        if kind == "cuda-ipc":
            rebuild, args = payload
            return rebuild(*args), None
        path, rows, elements = payload
        with open(path, "r+b") as file:
            mapping = mmap.mmap(file.fileno(), rows * elements * 4)
        return torch.frombuffer(mapping, dtype=torch.float32).view(rows, elements), mapping

    @staticmethod
    def _pattern(writer: int, owner: int) -> float:
        return float(writer * 100 + owner + 1)

    def p2p(self) -> dict:
        import torch.distributed as dist

        torch = self.torch
        elements = max(1, int(self.request.get("p2p_bytes", 1 << 20)) // 4)
        buffer, handle, keep = self._shared_buffer(self.world, elements)
        handles: list = [None] * self.world
        dist.all_gather_object(handles, handle, group=self.control)
        pairs = []
        mappings = []
        for peer in range(self.world):
            if peer == self.rank:
                continue
            remote, mapping = self._open_remote(handles[peer])
            mappings.append(mapping)
            source = torch.full((elements,), self._pattern(self.rank, peer), device=self.device)
            self.sync()
            started = time.perf_counter()
            remote[self.rank].copy_(source)
            self.sync()
            if self.device_kind == "cuda":
                torch.cuda.synchronize(peer)
            seconds = time.perf_counter() - started
            pairs.append(
                {
                    "src": self.rank,
                    "dst": peer,
                    "bytes": elements * 4,
                    "s": round(seconds, 6),
                    "gbps": round(elements * 4 / seconds / 1e9, 3) if seconds > 0 else None,
                    "peer_access": (
                        bool(torch.cuda.can_device_access_peer(self.rank, peer))
                        if self.device_kind == "cuda"
                        else None
                    ),
                }
            )
            del remote
        self.barrier()  # every writer is done before anyone reads its own buffer
        wrong = [
            peer
            for peer in range(self.world)
            if peer != self.rank and not bool((buffer[peer] == self._pattern(peer, self.rank)).all().item())
        ]
        self.barrier()  # nobody still maps a buffer its owner is about to free
        del buffer
        for mapping in mappings:
            if mapping is not None:
                mapping.close()
        if keep is not None:
            os.unlink(keep[1])
        if wrong:
            raise Mismatch(f"what rank(s) {wrong} wrote into rank {self.rank}'s memory arrived wrong")
        return {"method": handle[0], "pairs": pairs}

    def sweep(self) -> dict:
        import torch.distributed as dist

        torch = self.torch
        plan = self.request.get("sweep") or {}
        size = int(plan.get("min_bytes", 8))
        top = int(plan.get("max_bytes", 1 << 27))
        factor = int(plan.get("factor", 2))
        iters, warmup = int(plan.get("iters", 20)), int(plan.get("warmup", 5))
        expected = self.world * (self.world + 1) / 2
        rows = []
        while size <= top:
            elements = max(1, size // 4)
            data = torch.full((elements,), float(self.rank + 1), dtype=torch.float32, device=self.device)
            dist.all_reduce(data)
            self.sync()
            if not bool((data == expected).all().item()):
                raise Mismatch(f"all_reduce of {elements * 4} B gave wrong values")
            for _ in range(warmup):
                dist.all_reduce(data)
            self.sync()
            self.barrier()
            started = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(data)
            self.sync()
            seconds = torch.tensor([(time.perf_counter() - started) / max(1, iters)], dtype=torch.float64)
            dist.all_reduce(seconds, op=dist.ReduceOp.MAX, group=self.control)  # the slowest rank counts
            slowest = float(seconds.item())
            algbw = elements * 4 / slowest / 1e9 if slowest > 0 else 0.0
            row = {
                "bytes": elements * 4,
                "time_us": round(slowest * 1e6, 2),
                "algbw_gbps": round(algbw, 6),
                # nccl-tests' bus bandwidth for all_reduce: what each link carries, 2(n-1)/n of the data.
                "busbw_gbps": round(algbw * 2 * (self.world - 1) / self.world, 6),
            }
            rows.append(row)
            if self.rank == 0:
                emit(ev="progress", rank=0, step="sweep", **row)
            size *= factor
        return {"sizes": len(rows), "peak_busbw_gbps": max((r["busbw_gbps"] for r in rows), default=0.0)}


def plan_steps(request: dict) -> list[str]:
    wanted = [s for s in request.get("steps", STEPS) if s in STEPS]
    until = request.get("until")
    if until in wanted:
        wanted = wanted[: wanted.index(until) + 1]
    return wanted


def rank_main(rank: int, request: dict, port: int) -> None:
    try:
        import setproctitle

        setproctitle.setproctitle(f"kit-preflight::rank{rank}")
    except ImportError:
        pass
    emit(ev="start", rank=rank, pid=os.getpid())
    step = "start"
    try:
        state = Rank(rank, request, port)
        for step in plan_steps(request):
            emit(ev="begin", rank=rank, step=step)
            started = time.perf_counter()
            detail = getattr(state, step)()
            emit(ev="end", rank=rank, step=step, s=round(time.perf_counter() - started, 4), detail=detail)
    except Mismatch as exc:
        emit(ev="fail", rank=rank, step=step, error=str(exc))
        os._exit(1)
    except Exception as exc:
        emit(
            ev="error",
            rank=rank,
            step=step,
            error=f"{type(exc).__name__}: {exc}"[:2000],
            traceback=traceback.format_exc()[-4000:],
        )
        os._exit(1)
    emit(ev="done", rank=rank)
    try:
        import torch.distributed as dist

        dist.destroy_process_group()
    except Exception:  # tearing down is not under test
        pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as handle:
        request = json.load(handle)
    world = int(request["world_size"])
    started = time.monotonic()
    import torch
    import torch.distributed  # imported before the fork, so every rank shares it (and the fault switch)

    emit(
        ev="launcher",
        pid=os.getpid(),
        world=world,
        torch=torch.__version__,
        python=sys.version.split()[0],
        import_s=round(time.monotonic() - started, 3),
    )
    port = free_port()
    context = multiprocessing.get_context("fork")
    processes = {
        rank: context.Process(target=rank_main, args=(rank, request, port), name=f"rank{rank}")
        for rank in range(world)
    }
    for process in processes.values():
        process.start()
    # A last resort only: the kit keeps each step's deadline; this ends a run the kit lost sight of.
    deadline = started + float(request.get("run_timeout_s", 900))
    running = dict(processes)
    codes: dict[int, int] = {}
    while running:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            emit(ev="timeout", after_s=round(time.monotonic() - started, 1), ranks=sorted(running))
            for process in running.values():
                process.kill()
            return 124
        sentinels = {process.sentinel: rank for rank, process in running.items()}
        for ready in multiprocessing.connection.wait(list(sentinels), timeout=min(remaining, 1.0)):
            rank = sentinels[ready]
            process = running.pop(rank)
            process.join()
            codes[rank] = int(process.exitcode or 0)
            emit(ev="exit", rank=rank, code=codes[rank])
    return 0 if not any(codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
