"""Start a target's server container: the renderer's shape (kit/render/docker.py) for each way this
host gives GPUs (kit.runtime.host), started by the runtime adapter (kit/runtime/server.py), which
takes the first way the engine accepts.

    check_start(spec, fault=None)                            # what it would refuse, nothing started
    server = start_server(spec, fault=None, session=None)   # RunningServer; `kit up` and the smoke
                                                             # tests start servers through here
"""

from __future__ import annotations

from kit.render.docker import server_runs
from kit.runtime import server as runtime
from kit.runtime.engine import LABEL_SESSION
from kit.spec import LaunchSpec


def check_start(spec: LaunchSpec, *, fault: str | None = None, image: bool = True) -> None:
    """Everything start_server would refuse, asked before anything is started or printed: the fault
    switch, KIT_RUN_LABELS, the engine and the image, the GPUs to give (`kit up` calls it before its
    header, so bad input or a missing engine is one line and nothing else; with image=False, before
    it builds a missing image)."""
    runtime.server_environment(spec, fault)
    runtime.run_labels()
    if image:
        runtime.require_image(spec)
    _gpu_plan(spec)


def _gpu_plan(spec: LaunchSpec):
    """The GPUs the container gets (spec.gpu_devices, --gpus / KIT_GPUS), None on CPU."""
    from kit.runtime.host import choose_gpus, read_gpu_plan

    if not spec.gpus:
        return None
    devices = spec.gpu_devices or choose_gpus(None, spec.gpus, target=spec.target)
    return read_gpu_plan(count=spec.gpus, devices=devices)


def start_server(
    spec: LaunchSpec, *, fault: str | None = None, diagnose: bool = True, session: str | None = None
) -> runtime.RunningServer:
    """The target's container, started. Its GPUs: spec.gpu_devices (--gpus / KIT_GPUS) the first way
    the engine accepts (GPU request, CDI devices, nvidia runtime); SYS_PTRACE unless diagnose=False."""
    session = session or runtime.new_session_id()
    name = f"kit-{spec.target}-{session}"
    plan = _gpu_plan(spec)  # asked first, as check_start asks it
    runs = server_runs(
        spec,
        plan,
        name=name,
        environment=runtime.server_environment(spec, fault),
        labels={**runtime.run_labels(), LABEL_SESSION: session},
        diagnose=diagnose,
    )
    return runtime.start_container(spec, runs, name=name, session=session)
