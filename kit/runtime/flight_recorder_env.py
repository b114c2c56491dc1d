"""PyTorch's flight recorder, armed in every server the kit starts or renders. Data only.

Each rank keeps its last collectives (op, sequence number, state: scheduled, started, completed,
and the Python stack that issued it) in a ring buffer; a dump of every rank's buffer, read by
`python -m torch.distributed.flight_recorder.fr_trace DIR -p PREFIX`, names the collective that not
all ranks joined and the ranks missing from it. SGLang sets none of these; its ranks inherit the
container's environment. The renderers add them beside the compile cache's variables
(kit/runtime/compile_cache.py), and the dumps land in that volume's root, the one folder every render
mounts (torch creates no folder for them: torch/csrc/distributed/c10d/FlightRecorder.cpp
DebugInfoWriter writes to `<TORCH_FR_DUMP_TEMP_FILE><rank>` as given).

What it sees: c10d collectives (torch.distributed on a ProcessGroupNCCL or ProcessGroupGloo). Not
pynccl's (SGLang's own NCCL calls through ctypes), not CUDA-graph replays, not the custom all-reduce:
the forward pass of a served model runs there, so the recorder speaks for init, load, the memory
pool and the first collectives, and says nothing of a hang inside a captured graph.

Dumps are asked for through the pipe (kit/runtime/upstream.py) and written on NCCL's watchdog
timeout; both are ProcessGroupNCCL's (torch 2.13.0's CPU build holds neither variable name in
libtorch_cpu.so, only TORCH_FR_BUFFER_SIZE and TORCH_FR_DUMP_TEMP_FILE), so on the CPU rehearsal the
buffer fills but nothing outside a rank can dump it.
"""

from __future__ import annotations

from kit.runtime.compile_cache import MOUNT

DUMP_PREFIX = f"{MOUNT}/fr_rank_"
"""Each rank writes its dump to DUMP_PREFIX<rank> (the analyzer's `-p fr_rank_`)."""

PIPE_PREFIX = f"{MOUNT}/fr_pipe_rank_"
"""Each NCCL rank listens on the named pipe PIPE_PREFIX<rank>.pipe; a write there dumps it."""

ENV: dict[str, str] = {
    # Entries each rank keeps (torch >= 2.7 reads TORCH_FR_BUFFER_SIZE; older releases and some
    # readers, ProcessGroupNCCL's DumpPipe among them, only the old name: both, the same value).
    "TORCH_FR_BUFFER_SIZE": "2000",
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
    # Dump every rank's buffer when NCCL's watchdog times a collective out (ProcessGroupNCCL).
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    "TORCH_FR_DUMP_TEMP_FILE": DUMP_PREFIX,
    # A named pipe per rank; writing to it dumps that rank's buffer on demand (on HUNG).
    "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": PIPE_PREFIX,
}
"""The flight recorder's variables, in every render and every `kit up`."""
