"""Test-only fault switch for the CPU rehearsal image: plants real failures in the real SGLang server.

NEVER shipped in GPU images. Armed by the environment variable KIT_FAULT at interpreter start (a
.pth file imports this module in every Python process of the rehearsal image); without it, this
module does nothing but read one variable.

    KIT_FAULT=hang-init[:rank=N]          rank N (default 1) blocks inside torch.distributed
                                          init_process_group before joining the rendezvous; the
                                          other ranks wait for it there, as in a distributed-init hang
    KIT_FAULT=hang-collective[:rank=N]    rank N blocks in its first all_reduce after init; the
                                          others wait in the collective
    KIT_FAULT=hang-p2p[:rank=N]           the rehearsal of NCCL's peer-to-peer hang on PCIe hosts with ACS
                                          or a translating IOMMU (NVIDIA/nccl#1999, #2079): while
                                          NCCL_P2P_DISABLE is unset or 0, every rank (or only rank N)
                                          blocks in its first all_reduce; with NCCL_P2P_DISABLE=1 it
                                          does nothing, as turning P2P off cures the real one. What
                                          `kit preflight` calls "P2P" and `kit bisect` turns green
    KIT_FAULT=crash-load[:rank=N]         rank N raises while opening the weights (load phase)
    KIT_FAULT=slow-load[:seconds=S]       every rank spends S seconds (default 90) re-reading and
                                          hashing the weights before loading: slow but alive
              [,busy=0]                   ... sleeping instead: no CPU, no reads, no output (a hang
                                          in load, as far as anything outside can tell)
              [,progress=P]               ... redrawing a tqdm-style bar with '\r' every P seconds
                                          and no newline until done: alive only through its output
    KIT_FAULT=traceback:at=launch|load    a harmless traceback of SGLang's real shape, then the start
              [,rank=N][,hold=S]          goes on: at=launch the launcher prints a ModuleNotFoundError
                                          traceback bare, as SGLang's retry() does
                                          (srt/utils/common.py: traceback.print_exc(), then it tries
                                          again); at=load rank N (default 1) logs one through its
                                          logger with exc_info on its first weights file, as
                                          SGLang's optional fused-kernel fallbacks do
                                          (srt/models/hunyuan_v4.py). Either way the process then
                                          works S seconds (default 15, CPU and reads, no line)
                                          before it goes on: longer than the old 10 s crash grace.
                                          at=launch+load plants both in one start

    KIT_FAULT=oom[:rank=N|main]           once the file /tmp/kit-fault-go exists (`docker exec C touch
              [,go=PATH]                  /tmp/kit-fault-go`), rank N (default 1) or the launcher
                                          (main) makes itself the OOM killer's first choice
                                          (oom_score_adj 1000) and allocates until the kernel kills
                                          it: the container needs a memory limit (`docker update
                                          --memory`), or the host's RAM is what it eats

    KIT_FAULT=compile-hold[:rank=N]       rank N (default 1), on its main thread right after loading
              [,seconds=S]                (before the barrier the ranks meet at), builds a
                                          C file through torch inductor's own compile step
                                          (cpp_builder.run_compile_cmd: gcc, then cc1), fed through a
                                          pipe that stays empty S seconds (default 30): a real
                                          compiler child alive and quiet (no CPU, no writes, no
                                          line), as a long JIT compile looks from outside

Patches attach lazily, when SGLang imports torch.distributed or safetensors, so the switch costs
nothing in processes that never do. The blocking functions have telling names
(`kit_fault_hang_init`, ...) so stack dumps show where a planted hang sits.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import time

_SPEC = os.environ.get("KIT_FAULT", "").strip()


def parse_fault(spec: str) -> tuple[str, dict[str, str]]:
    kind, _, rest = spec.partition(":")
    params: dict[str, str] = {}
    for part in filter(None, rest.split(",")):
        key, _, value = part.partition("=")
        params[key.strip()] = value.strip()
    return kind.strip(), params


def _current_rank() -> int | None:
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        return None
    return None


def kit_fault_hang_init(rank: int) -> None:
    while True:  # a real hang: no CPU, no output, until someone kills the process
        time.sleep(3600)


def kit_fault_hang_collective(rank: int) -> None:
    while True:
        time.sleep(3600)


def kit_fault_hang_p2p(rank: int | None) -> None:
    while True:  # as a P2P-hung collective: no progress, no output
        time.sleep(3600)


def p2p_disabled() -> bool:
    return os.environ.get("NCCL_P2P_DISABLE", "").strip() not in ("", "0")


def kit_fault_slow_load(path: str, seconds: float, busy: bool = True, progress: float = 0.0) -> None:
    """Spend `seconds` before loading: hashing the weights file over and over (CPU time grows), or
    sleeping; with `progress`, redraw a bar on stderr with '\\r' the way tqdm does."""
    import hashlib

    started = time.monotonic()
    deadline = started + seconds
    next_draw = started
    while (now := time.monotonic()) < deadline:
        if progress and now >= next_draw:
            done = int(100 * (now - started) / seconds)
            sys.stderr.write(f"\rkit fault slow-load: {done:3d}%|{'#' * (done // 10):10s}| waiting")
            sys.stderr.flush()
            next_draw = now + progress
        if busy:
            with open(path, "rb") as handle:
                hashlib.sha256(handle.read()).hexdigest()
        else:
            time.sleep(min(0.2, max(0.0, deadline - now)))
    if progress:
        sys.stderr.write("\rkit fault slow-load: 100%|##########| done\n")
        sys.stderr.flush()


def kit_fault_traceback(where: str, hold: float, path: str | None = None) -> None:
    """Print a harmless traceback of SGLang's real shape, then keep working `hold` seconds."""
    import logging
    import traceback

    try:
        import kit_fault_optional_kernel  # noqa: F401  (absent on purpose: an optional import)
    except ModuleNotFoundError:
        if where == "launch":
            traceback.print_exc()  # retry()'s shape: a bare traceback on stderr, then it goes on
            sys.stderr.flush()
        else:
            logging.getLogger("sglang.srt.model_loader.weight_utils").warning(
                "kit fault traceback: an optional fused kernel is missing; falling back to the default path",
                exc_info=True,
            )
    deadline = time.monotonic() + hold
    while time.monotonic() < deadline:  # busy, as a server importing or reading shards is
        if path is not None:
            import hashlib

            with open(path, "rb") as handle:
                hashlib.sha256(handle.read()).hexdigest()
        else:
            sum(i * i for i in range(20_000))


def kit_fault_oom(go: str) -> None:
    """Wait for the go file, then allocate (and touch) memory until the OOM killer ends us."""
    while not os.path.exists(go):
        time.sleep(0.2)
    with open("/proc/self/oom_score_adj", "w") as handle:
        handle.write("1000")
    hoard = []
    while True:
        hoard.append(bytearray(32 << 20))  # zero-filled: every page is touched
        time.sleep(0.02)


def kit_fault_compile_hold(seconds: float) -> None:
    """Compile a small C file with gcc through inductor's run_compile_cmd; its source comes through a
    FIFO that a thread fills only after `seconds`, so cc1 waits, alive and idle, until then."""
    import tempfile
    import threading

    from torch._inductor import cpp_builder

    folder = tempfile.mkdtemp(prefix="kit-fault-compile-")
    fifo = os.path.join(folder, "kernel.c")
    os.mkfifo(fifo)

    def feed() -> None:
        time.sleep(seconds)
        with open(fifo, "w") as handle:
            handle.write("int kit_fault_kernel(int x) { return x + 1; }\n")

    threading.Thread(target=feed, name="kit-fault-compile-feed", daemon=True).start()
    cpp_builder.run_compile_cmd(f"gcc -x c -c {fifo} -o {os.path.join(folder, 'kernel.o')}", folder)


def _start_oom(params: dict[str, str], who: str) -> None:
    import threading

    go = params.get("go", "/tmp/kit-fault-go")

    def run() -> None:
        if who != "main":
            while _current_rank() is None:  # the rank is known once torch.distributed is up
                time.sleep(0.2)
            if _current_rank() != int(who):
                return
        kit_fault_oom(go)

    threading.Thread(target=run, name="kit-fault-oom", daemon=True).start()


def _patch_oom(module, kind: str, params: dict[str, str]) -> None:
    import multiprocessing

    who = params.get("rank", "1")
    launcher = multiprocessing.current_process().name == "MainProcess"
    if (who == "main") == launcher:
        _start_oom(params, who)


def _patch_launch(module, kind: str, params: dict[str, str]) -> None:
    import multiprocessing

    if multiprocessing.current_process().name == "MainProcess":  # the launcher, not a scheduler
        kit_fault_traceback("launch", float(params.get("hold", "15")))


def _patch_distributed(module, kind: str, params: dict[str, str]) -> None:
    target = int(params.get("rank", "1"))
    if kind == "hang-init":
        original = module.init_process_group

        def init_process_group(*args, **kwargs):
            rank = kwargs.get("rank", args[3] if len(args) > 3 else -1)
            if int(rank) == target:
                kit_fault_hang_init(target)
            return original(*args, **kwargs)

        module.init_process_group = init_process_group
    elif kind == "hang-collective":
        original_all_reduce = module.all_reduce

        def all_reduce(*args, **kwargs):
            if _current_rank() == target:
                kit_fault_hang_collective(target)
            return original_all_reduce(*args, **kwargs)

        module.all_reduce = all_reduce
    elif kind == "compile-hold":
        seconds = float(params.get("seconds", "30"))
        original_barrier = module.monitored_barrier

        def monitored_barrier(*args, **kwargs):  # SGLang's barrier after loading (load_model_utils.py)
            if _current_rank() == target:
                kit_fault_compile_hold(seconds)
            return original_barrier(*args, **kwargs)

        module.monitored_barrier = monitored_barrier
    elif kind == "hang-p2p":
        if p2p_disabled():
            return  # the path that hangs is not taken
        only = int(params["rank"]) if params.get("rank") else None
        original_p2p_all_reduce = module.all_reduce

        def all_reduce(*args, **kwargs):
            if only is None or _current_rank() == only:
                kit_fault_hang_p2p(_current_rank())
            return original_p2p_all_reduce(*args, **kwargs)

        module.all_reduce = all_reduce


def _patch_safetensors(module, kind: str, params: dict[str, str]) -> None:
    original = module.safe_open

    if kind == "crash-load":
        target = int(params.get("rank", "1"))

        def safe_open(filename, *args, **kwargs):
            if _current_rank() == target:
                raise RuntimeError(
                    f"kit fault crash-load: rank {target} failed while loading weights from {filename}"
                )
            return original(filename, *args, **kwargs)

    elif kind == "traceback":
        target = int(params.get("rank", "1"))
        hold = float(params.get("hold", "15"))
        done: list[bool] = []

        def safe_open(filename, *args, **kwargs):
            if not done and _current_rank() == target:
                done.append(True)
                kit_fault_traceback("load", hold, str(filename))
            return original(filename, *args, **kwargs)

    else:  # slow-load
        seconds = float(params.get("seconds", "90"))
        busy = params.get("busy", "1") not in ("0", "false")
        progress = float(params.get("progress", "0"))
        slowed: set[str] = set()

        def safe_open(filename, *args, **kwargs):
            if str(filename) not in slowed:
                slowed.add(str(filename))
                kit_fault_slow_load(str(filename), seconds, busy, progress)
            return original(filename, *args, **kwargs)

    module.safe_open = safe_open


_PATCHES = {
    "hang-init": ("torch.distributed", _patch_distributed),
    "hang-collective": ("torch.distributed", _patch_distributed),
    "hang-p2p": ("torch.distributed", _patch_distributed),
    "crash-load": ("safetensors", _patch_safetensors),
    "slow-load": ("safetensors", _patch_safetensors),
    "traceback": ("safetensors", _patch_safetensors),
    "oom": ("torch.distributed", _patch_oom),
    "compile-hold": ("torch.distributed", _patch_distributed),
}


def _targets(kind: str, params: dict[str, str]) -> list[tuple[str, object]]:
    """The modules whose import arms the patch: the traceback fault picks them by `at`."""
    if kind != "traceback":
        return [_PATCHES[kind]]
    found = []
    for where in params.get("at", "load").split("+"):
        if where == "launch":  # the launcher imports its HTTP entry point first thing
            found.append(("sglang.srt.entrypoints.http_server", _patch_launch))
        elif where == "load":
            found.append(_PATCHES[kind])
    return found


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Wraps the loader of one module so the patch runs right after that module executes."""

    def __init__(self, module_name: str, patch, kind: str, params: dict[str, str]):
        self.module_name, self.patch, self.kind, self.params = module_name, patch, kind, params

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.module_name:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader, finder = spec.loader, self

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                finder.patch(module, finder.kind, finder.params)
                if finder in sys.meta_path:
                    sys.meta_path.remove(finder)

        spec.loader = _Loader()
        return spec


def arm(spec: str) -> None:
    kind, params = parse_fault(spec)
    if kind not in _PATCHES:
        print(f"kit_faults: unknown KIT_FAULT '{kind}' (known: {', '.join(_PATCHES)})", file=sys.stderr)
        return
    wanted = params.get("at", "load").split("+")
    if kind == "traceback" and not set(wanted) <= {"launch", "load"}:
        print(f"kit_faults: traceback needs at=launch or at=load, not '{params.get('at')}'", file=sys.stderr)
        return
    for module_name, patch in _targets(kind, params):
        if module_name in sys.modules:
            patch(sys.modules[module_name], kind, params)
        else:
            sys.meta_path.insert(0, _PatchOnImport(module_name, patch, kind, params))


if _SPEC:
    arm(_SPEC)
