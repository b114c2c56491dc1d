"""The GPU host check: one short run on a real NVIDIA host, no Docker, no network (docs/gpu-host-check.md).

`scripts/gpu-host-check` (bash) runs each step of steps.toml as `python -m kit.hostcheck STEP` under
`timeout`; a step records `ok|finding|error` lines, `summary` turns them into summary.txt.

    record.py       a step's verdict lines (Status), JSON and process helpers
    plan.py         the step table (steps.toml) as data, filtered by KIT_CHECK_STEPS (pure)
    report.py       summary.txt from the recorded lines, the commit that ran, the watch's result line
    smi.py          nvidia-smi's text read, NVML's inventory set against it (pure)
    judge.py        what a watch's JSON lines say against what ran (pure)
    wheels.py       which carried wheels go in (pure), and the wheels step (no kit import)
    host_steps.py   import, env, doctor
    nvml_step.py    NVML against nvidia-smi, usage by host PID of a child holding GPU memory
    watch.py        `kit watch --pid` on the hang rehearsal (watch-hang, watch-crash)
    preflight.py    the rank script on this host (preflight), the gpu tests under pytest (pytest)
    shape_steps.py  watch-spin, watch-compile, watch-quiet, ties
    evidence_steps.py  xid-events, load-progress, acceptance (issue 38: what the kit reads, on a GPU)
    runner.py       the step registry and the command line (`python -m kit.hostcheck`)
    rehearsal/      the processes the watch steps watch: run by path, they import nothing of the kit

Every module here imports only the standard library at module level: the `wheels` step runs before
the kit's own dependencies are on the path. What a step needs of the kit it imports inside itself.
"""
