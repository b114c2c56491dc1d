"""verify.py's collective: an all_reduce over N ranks built as the image's SGLang builds its TP group.

One child process (`verify.py --child-collective`) does what `kit preflight`'s launcher does, with
the same code (sglang_groups.py): SGLang's own arguments and environment (`_set_envs_and_config`:
NCCL_CUMEM_ENABLE=0, NCCL_NVLS_ENABLE=0, ...), then one process per rank (forked on CPU, spawned on
CUDA) builds SGLang's own groups (its warm-up all_reduce included) and all-reduces (rank + 1)
through SGLang's TP group. NCCL with one GPU per rank, or gloo on the CPU; only the backend and
the device differ. Where sglang cannot be imported, the report says so and the groups are plain
torch.distributed.
Standalone: the standard library, plus torch and sglang in the child.
"""

from __future__ import annotations

import json
import os
import sys
import time

import sglang_groups
from verify_children import child_env, emit, ended, run_children

ALL_REDUCE_ELEMENTS = 1 << 20
"""4 MiB of float32: big enough for NCCL's ring/P2P protocols, not only its small-message path."""
SETUP_S = 240.0
"""On top of the collective's own timeout, which the launcher keeps from the moment its ranks start:
`import sglang` and its set-up (tens of seconds on a busy two-core machine)."""


def collective_env(device: str) -> tuple[dict, dict[str, str]]:
    """(the child's environment, {variable: 'kit'} for what the kit set in it)."""
    env = child_env()
    kit = {key: env[key] for key in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "NCCL_DEBUG") if key in env}
    if device == "cpu":
        # SGLang's CPU engine binds each rank's threads: one core per rank here (the rehearsal's profile
        # does the same), as its bootstrap refuses more ranks than NUMA nodes without it.
        cores = sorted(os.sched_getaffinity(0)) or [0]
        env.setdefault("SGLANG_CPU_OMP_THREADS_BIND", "|".join(str(cores[i % len(cores)]) for i in range(8)))
        env.setdefault("SGLANG_USE_CPU_ENGINE", "1")
        kit.update({k: env[k] for k in ("SGLANG_CPU_OMP_THREADS_BIND", "SGLANG_USE_CPU_ENGINE")})
    return env, dict.fromkeys(kit, "kit")


def _rank(rank: int, world: int, device: str, port: int, timeout_s: float, prepared: dict) -> None:
    emit(stage="start", rank=rank)
    try:
        import torch

        emit(stage="init", rank=rank)
        started = time.perf_counter()
        groups = sglang_groups.init_groups(
            prepared, rank=rank, world=world, device=device, port=port, timeout_s=timeout_s
        )
        emit(stage="all_reduce", rank=rank, init_s=round(time.perf_counter() - started, 3), groups=groups)
        where = torch.device("cuda", rank) if device == "cuda" else torch.device("cpu")
        tensor = torch.full((ALL_REDUCE_ELEMENTS,), float(rank + 1), dtype=torch.float32, device=where)
        started = time.perf_counter()
        tensor = sglang_groups.tp_all_reduce(prepared, tensor)
        if device == "cuda":
            torch.cuda.synchronize(where)
        reduce_s = round(time.perf_counter() - started, 3)
        want = world * (world + 1) / 2
        low, high = float(tensor.min()), float(tensor.max())
        emit(
            stage="done",
            rank=rank,
            ok=low == high == want,
            low=low,
            high=high,
            want=want,
            all_reduce_s=reduce_s,
        )
    except Exception as exc:
        emit(stage="error", rank=rank, error=f"{type(exc).__name__}: {exc}"[:1000])
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)  # SGLang's groups hold threads and shared memory the probe does not own


def collective_child(world: int, backend: str, timeout_s: float, sources: dict[str, str]) -> int:
    device = "cuda" if backend == "nccl" else "cpu"
    try:
        import torch  # noqa: F401 - before any rank starts (a forked one shares it)
    except Exception as exc:
        emit(stage="launcher", ok=False, error=f"{type(exc).__name__}: {exc}"[:1000])
        return 1
    emit(stage="setup begin")
    prepared = sglang_groups.prepare({"env_sources": sources}, world=world, device=device)
    emit(stage="setup", **{k: v for k, v in prepared.items() if not k.startswith("_")})
    emit(stage="ranks", t=time.time())  # what came before (Python, torch, SGLang) is the setup
    return sglang_groups.start_ranks(
        world,
        _rank,
        (world, device, sglang_groups.free_port(), timeout_s, prepared),
        method=sglang_groups.start_method(device),
        timeout_s=timeout_s,
        on_exit=lambda rank, code: emit(stage="exit", rank=rank, code=code),
        on_timeout=lambda ranks, after: emit(stage="timeout", ranks=ranks, after_s=after),
    )


def all_reduce(backend: str, world: int, timeout_s: float, probe: str | None) -> dict:
    """Sum of (rank + 1) over `world` ranks, one process each; every rank must see the same sum."""
    info: dict = {
        "backend": backend,
        "device": "cuda" if backend == "nccl" else "cpu",
        "world": world,
        "elements": ALL_REDUCE_ELEMENTS,
        "timeout_s": timeout_s,
        "ran": False,
    }
    if world < 1:
        info["why"] = "CUDA sees no GPU" if backend == "nccl" else "no ranks"
        return info
    if not probe:
        info["why"] = "the probe was not started from a file"
        return info
    env, sources = collective_env(info["device"])
    command = [sys.executable, probe, "--child-collective", "--world", str(world), "--backend", backend,
               "--collective-timeout", str(timeout_s), "--env-sources", json.dumps(sources)]  # fmt: skip
    (result,), seconds = run_children([command], SETUP_S + timeout_s + 10, env)
    ended_at = time.time()
    events = result["events"]
    launcher = next((e for e in events if e.get("stage") in ("launcher", "setup")), None)
    setup = next((e for e in events if e.get("stage") == "setup"), {})
    info.update(
        sglang=setup.get("sglang"),
        recipe=setup.get("recipe"),
        setup_error=setup.get("error"),
        settings=setup.get("settings") or {},
    )
    ranks = [_rank_entry(rank, events, result, launcher, timeout_s) for rank in range(world)]
    # The ranks' own part, from the moment they start (the collective timeout counts from there);
    # setup_s is what came before in the child: Python, `import torch`, `import sglang`, its set-up.
    begun = next((e["t"] for e in events if e.get("stage") == "ranks" and "t" in e), None)
    ranks_s = round(max(0.0, ended_at - begun), 2) if begun is not None else seconds
    info.update(
        ran=True,
        ok=all(r["ok"] for r in ranks),
        setup_s=round(max(0.0, seconds - ranks_s), 2),
        seconds=ranks_s,
        timed_out=result["killed"] or any(e.get("stage") == "timeout" for e in events),
        ranks=ranks,
    )
    return info


def _rank_entry(rank: int, events: list[dict], result: dict, launcher: dict | None, timeout_s: float) -> dict:
    own = [e for e in events if e.get("rank") == rank and e.get("stage") != "exit"]
    killed = any(rank in (e.get("ranks") or ()) for e in events if e.get("stage") == "timeout")
    code = next((e.get("code") for e in events if e.get("rank") == rank and e.get("stage") == "exit"), None)
    if not own:  # the launcher never started it: its own failure is every rank's
        stage = "error" if launcher and launcher.get("stage") == "launcher" else "setup"
        last = {"stage": stage}
        error = launcher.get("error") if stage == "error" and launcher else None
        entry = {"rank": rank, "stage": stage, "ok": False, "rc": result["rc"]}
        entry["error"] = error or f"stuck in {stage}: {ended(result, SETUP_S + timeout_s)}"
        entry["stderr_tail"] = result["stderr_tail"]
        return entry
    last = own[-1]
    entry = {"rank": rank, "stage": last.get("stage"), "ok": bool(last.get("ok")), "rc": code}
    entry.update({k: last[k] for k in ("low", "high", "want", "all_reduce_s") if k in last})
    for event in own:
        if "init_s" in event:
            entry["init_s"] = event["init_s"]
            entry["groups"] = (event.get("groups") or {}).get("groups")
    if last.get("stage") == "error":
        entry["error"] = last.get("error")
    elif last.get("stage") != "done":
        how = f"did not finish in {timeout_s:g} s (killed)" if killed else ended(result, SETUP_S + timeout_s)
        entry["error"] = f"stuck in {last.get('stage')}: {how}"
    if not entry["ok"]:
        entry["stderr_tail"] = result["stderr_tail"]
    return entry
