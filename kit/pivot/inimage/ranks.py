"""Preflight ranks: the image's SGLang builds its TP group over N ranks in one container, step by step.

This file runs inside the image, never inside the kit: `kit preflight` copies it into a fresh
container at run time (put_archive) beside sglang_groups.py (kit/images/inimage/, the code `kit
image verify` shares), so no image needs to carry either. It imports the standard library, torch
and, through sglang_groups, the image's sglang. argv[1] names a request (JSON):

    {"world_size": 2, "device": "cpu" | "cuda", "backend": "gloo" | "nccl",
     "steps": ["init", "allreduce", "graph", "p2p", "sweep"], "until": null | "allreduce",
     "launch_argv": ["--model-path", "...", "--tp-size", "4", ...], "start_method": null | "spawn",
     "server_args": ["disable_custom_all_reduce", ...], "env_sources": {"NCCL_DEBUG": "kit", ...},
     "sweep": {"min_bytes": 8, "max_bytes": 134217728, "factor": 2, "iters": 20, "warmup": 5},
     "graph": {"sizes": [{"name": "decode", "tokens": 512, "hidden": 3072}, ...], "pynccl_bytes": 16777216,
               "replays": 20, "warmup": 2} | {"skip": "why"},
     "p2p_bytes": 1048576, "collective_timeout_s": 600, "run_timeout_s": 900}

The launcher imports torch (launch), then does what SGLang's launcher does before it spawns its
schedulers (setup: sglang_groups.prepare: SGLang's arguments and environment), and starts one
process per rank: forked on CPU, so imports are paid once; spawned on CUDA, as SGLang spawns its
schedulers (`start_method` in the request overrides it). Every process prints its events on stdout, one line
each, `KIT_PREFLIGHT {json}`; the kit reads them from the container's output and keeps the deadlines.

    launcher  torch is imported (launch ends)          begin / end   a step (rank -1: the launcher's)
    start     a rank is up (its pid, for py-spy)       progress  one all_reduce size of the sweep
    fail      wrong values (a step's check said no)    error     an exception in a step
    done      a rank finished every step               exit      the launcher saw a rank end
    timeout   the launcher's own last-resort limit

Steps:
  setup      (the launcher) SGLang's own argument parser, ServerArgs resolution and
             _set_envs_and_config: the environment the server's ranks run under, with its sources
  init       SGLang's own group initialisation (init_distributed_environment,
             initialize_model_parallel and what the release calls around them, its warm-up
             all_reduce included); plain torch.distributed where sglang could not be imported
  allreduce  the kit's all_reduce of known values through SGLang's TP group, checked element by element
  graph      (CUDA) inside SGLang's graph_capture() (PyNccl enabled, as for the server's decode and
             verify graphs), a bf16 all_reduce through the TP group captured in a CUDA graph at
             each requested width, then replayed (checked once, timed); and one size through
             PyNccl itself, enabled as capture enables it. Skipped with the reason on CPU, where
             the request says so, or without SGLang's groups
  p2p        every rank writes into every other rank's memory through the OS's sharing, and each
             owner checks what arrived: a CUDA IPC handle and a GPU-to-GPU copy on GPUs (as vLLM's
             p2p check does), a shared-memory mapping on CPU
  sweep      all_reduce on the TP group from min_bytes to max_bytes by factor (as nccl-tests'
             all_reduce_perf does): each size checked once, then timed; the slowest rank's time
             gives algbw and busbw
"""

from __future__ import annotations

import json
import mmap
import os
import sys
import time
import traceback

import sglang_groups

MARK = "KIT_PREFLIGHT "
STEPS = ("init", "allreduce", "graph", "p2p", "sweep")
LAUNCHER = -1
"""The rank of the launcher's own events (setup)."""


def emit(**event) -> None:
    event["t"] = round(time.time(), 3)
    sys.stdout.write(MARK + json.dumps(event, separators=(",", ":"), default=str) + "\n")
    sys.stdout.flush()


Mismatch = sglang_groups.Mismatch


class Rank:
    """One rank's state across steps."""

    def __init__(self, rank: int, request: dict, port: int, prepared: dict):
        import torch

        self.torch = torch
        self.rank = rank
        self.request = request
        self.prepared = prepared
        self.world = int(request["world_size"])
        self.device_kind = request["device"]
        self.port = port
        self.group = None  # the device group the collectives run on (None: torch's default group)
        self.control = None  # a gloo group for the kit's own bookkeeping (never the path under test)
        self.device = torch.device("cuda", rank) if self.device_kind == "cuda" else torch.device("cpu")

    def sync(self) -> None:
        if self.device_kind == "cuda":
            self.torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier(group=self.control)

    # -- steps ------------------------------------------------------------------------------------

    def init(self) -> dict:
        detail = sglang_groups.init_groups(
            self.prepared,
            rank=self.rank,
            world=self.world,
            device=self.device_kind,
            port=self.port,
            timeout_s=float(self.request.get("collective_timeout_s", 600)),
        )
        self.group, self.control = sglang_groups.groups(self.prepared)
        if self.device_kind == "cuda":
            detail["nccl"] = ".".join(str(p) for p in self.torch.cuda.nccl.version())
            detail["device"] = self.torch.cuda.get_device_name(self.device)
        return detail

    def allreduce(self) -> dict:
        return sglang_groups.checked_all_reduce(
            self.prepared, rank=self.rank, world=self.world, device=self.device, elements=4096
        )

    def graph(self) -> dict:
        plan = self.request.get("graph") or {}
        why = graph_skip(self.device_kind, plan, self.prepared)
        if why:
            return {"skipped": why}
        tp = sglang_groups.tp_coordinator(self.prepared)
        expected = self.world * (self.world + 1) / 2  # exact in bf16 for any TP the kit runs
        captured, paths = [], []
        with sglang_groups.capture_context(self.prepared) as context:
            for size in plan["sizes"]:
                captured.append(self._capture(tp, context.stream, size, int(plan.get("warmup", 2))))
                if size.get("op", "all_reduce") == "all_reduce":  # the gathers: the TP group's all_gather
                    paths.append(sglang_groups.all_reduce_path(tp, captured[-1][2]))
        # Replayed after the context exits, as the server replays: the custom all-reduce registers
        # the buffers it saw during capture only then.
        replays = int(plan.get("replays", 20))
        sizes = [
            self._replay(tp, size, graph, out, expected, replays, capture_s)
            for size, (graph, _, _, out, capture_s) in zip(plan["sizes"], captured, strict=True)
        ]
        path = ", ".join(dict.fromkeys(paths))
        pynccl = self._pynccl_size(tp, int(plan.get("pynccl_bytes", 1 << 24)), expected, replays)
        return {"path": path, "sizes": sizes, "pynccl": pynccl, "sources": plan.get("sources") or {}}

    def _capture(self, tp, stream, size: dict, warmup: int):
        """Warm up and capture `work = source; all_reduce(work)` (or `all_gather(work, dim=-1)`, the
        logits' gather, where SIZE's op says so) at SIZE: (graph, source, work, out, seconds); the
        caller keeps the tensors alive while the graph is replayed (it reads them)."""
        torch = self.torch
        shape = (int(size["tokens"]), int(size["hidden"]))
        source = torch.full(shape, float(self.rank + 1), dtype=torch.bfloat16, device=self.device)
        work = torch.empty_like(source)
        gather = size.get("op") == "all_gather"

        def forward():
            work.copy_(source)  # in the graph: every replay starts from the same values
            return tp.all_gather(work, dim=-1) if gather else tp.all_reduce(work)

        for _ in range(warmup):  # as SGLang's runner: synchronize, barrier, run (twice) before capture
            self.sync()
            tp.barrier()
            forward()
        self.sync()
        tp.barrier()
        graph = torch.cuda.CUDAGraph()
        started = time.perf_counter()
        with torch.cuda.graph(graph, stream=stream):
            out = forward()
        self.sync()
        return graph, source, work, out, time.perf_counter() - started

    def _replay(self, tp, size: dict, graph, out, expected: float, replays: int, capture_s: float) -> dict:
        tp.barrier()
        graph.replay()
        self.sync()
        if size.get("op") == "all_gather":  # rank r's shard holds r + 1 everywhere
            want = gathered_values(self.torch, self.world, out.shape, out.device)
        else:
            want = expected
        if not bool((out == want).all().item()):
            wrong = int((out != want).sum().item())
            raise Mismatch(f"{size['name']} graph: {wrong} of {out.numel()} bf16 values wrong after replay")
        tp.barrier()
        started = time.perf_counter()
        for _ in range(replays):
            graph.replay()
        self.sync()
        slowest = self._slowest((time.perf_counter() - started) / max(1, replays))
        tokens, hidden = int(size["tokens"]), int(size["hidden"])
        return {
            "name": size["name"],
            "op": size.get("op", "all_reduce"),
            "tokens": tokens,
            "hidden": hidden,
            "bytes": tokens * hidden * 2,
            "capture_s": round(capture_s, 4),
            "replay_us": round(slowest * 1e6, 2),
        }

    def _pynccl_size(self, tp, nbytes: int, expected: float, iters: int) -> dict:
        """One all_reduce size through SGLang's PyNccl communicator, enabled as capture enables it."""
        torch = self.torch
        pynccl = getattr(tp, "pynccl_comm", None)
        if pynccl is None or not getattr(pynccl, "available", False):
            return {"skipped": "SGLang built no PyNccl communicator (one rank, or NCCL did not load)"}
        elements = max(1, nbytes // 2)
        data = torch.full((elements,), float(self.rank + 1), dtype=torch.bfloat16, device=self.device)
        with pynccl.change_state(enable=True):
            pynccl.all_reduce(data)
            self.sync()
            if not bool((data == expected).all().item()):
                raise Mismatch(f"PyNccl all_reduce of {elements * 2} B gave wrong values")
            tp.barrier()
            started = time.perf_counter()
            for _ in range(iters):
                data.fill_(float(self.rank + 1))
                pynccl.all_reduce(data)
            self.sync()
            per = (time.perf_counter() - started) / max(1, iters)
        slowest = self._slowest(per)
        algbw = elements * 2 / slowest / 1e9 if slowest > 0 else 0.0
        return {
            "bytes": elements * 2,
            "time_us": round(slowest * 1e6, 2),
            "algbw_gbps": round(algbw, 6),
            "busbw_gbps": round(algbw * 2 * (self.world - 1) / self.world, 6),
        }

    def _slowest(self, seconds: float) -> float:
        """The slowest rank's figure (the kit's own bookkeeping group, never the path under test)."""
        import torch.distributed as dist

        value = self.torch.tensor([seconds], dtype=self.torch.float64)
        dist.all_reduce(value, op=dist.ReduceOp.MAX, group=self.control)
        return float(value.item())

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
            dist.all_reduce(data, group=self.group)
            self.sync()
            if not bool((data == expected).all().item()):
                raise Mismatch(f"all_reduce of {elements * 4} B gave wrong values")
            for _ in range(warmup):
                dist.all_reduce(data, group=self.group)
            self.sync()
            self.barrier()
            started = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(data, group=self.group)
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


def gathered_values(torch, world: int, shape, device):
    """What an all_gather along the last dimension of `full(rank + 1)` shards gives: each rank's
    width of columns holding its rank + 1 (bf16-exact for any world the kit runs)."""
    width = shape[-1] // world
    values = torch.arange(1, world + 1, dtype=torch.bfloat16, device=device).repeat_interleave(width)
    return values.expand(*shape)


def graph_skip(device_kind: str, plan: dict | None, prepared: dict) -> str | None:
    """Why the graph step cannot run here, or None: no CUDA graphs on CPU, the kit's plan said so
    (the launch turns graphs off), or SGLang's groups were not built (no graph_capture() to enter)."""
    plan = plan or {}
    if device_kind != "cuda":
        return plan.get("skip") or "CPU: no CUDA graphs (torch.cuda.CUDAGraph needs a GPU)"
    if plan.get("skip"):
        return str(plan["skip"])
    if not plan.get("sizes"):
        return "the request names no widths to capture"
    if prepared.get("_server_args") is None:
        return "SGLang's groups were not built (see setup): no graph_capture() to enter"
    return None


def plan_steps(request: dict) -> list[str]:
    wanted = [s for s in request.get("steps", STEPS) if s in STEPS]
    until = request.get("until")
    if until in wanted:
        wanted = wanted[: wanted.index(until) + 1]
    return wanted


def rank_main(rank: int, request: dict, port: int, prepared: dict) -> None:
    try:
        import setproctitle

        setproctitle.setproctitle(f"kit-preflight::rank{rank}")
    except ImportError:
        pass
    emit(ev="start", rank=rank, pid=os.getpid())
    step = "start"
    try:
        state = Rank(rank, request, port, prepared)
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
    os._exit(0)  # SGLang's groups hold threads and shared memory the kit does not own


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
    emit(ev="begin", rank=LAUNCHER, step="setup")
    begun = time.perf_counter()
    prepared = sglang_groups.prepare(request, world=world, device=request["device"])
    detail = {k: v for k, v in prepared.items() if not k.startswith("_")}
    emit(ev="end", rank=LAUNCHER, step="setup", s=round(time.perf_counter() - begun, 4), detail=detail)
    port = sglang_groups.free_port()
    return sglang_groups.start_ranks(
        world,
        rank_main,
        (request, port, prepared),
        method=request.get("start_method") or sglang_groups.start_method(request["device"]),
        timeout_s=float(request.get("run_timeout_s", 900)) - (time.monotonic() - started),
        on_exit=lambda rank, code: emit(ev="exit", rank=rank, code=code),
        on_timeout=lambda ranks, after: emit(ev="timeout", after_s=after, ranks=ranks),
    )


if __name__ == "__main__":
    sys.exit(main())
