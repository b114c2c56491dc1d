"""Start a target's server container: the renderer's shape (kit/render/docker.py) for each way this
host gives GPUs (kit.runtime.host), started by the runtime adapter (kit/runtime/server.py), which
takes the first way the engine accepts.

    server = start_server(spec, fault=None, session=None)   # RunningServer; `kit up` and the smoke
                                                             # tests start servers through here
"""

from __future__ import annotations

from kit.render.docker import server_runs
from kit.runtime import server as runtime
from kit.runtime.engine import LABEL_SESSION
from kit.spec import LaunchSpec


def start_server(
    spec: LaunchSpec, *, fault: str | None = None, diagnose: bool = True, session: str | None = None
) -> runtime.RunningServer:
    """The target's container, started. Its GPUs: spec.gpu_devices (--gpus / KIT_GPUS) the first way
    the engine accepts (GPU request, CDI devices, nvidia runtime); SYS_PTRACE unless diagnose=False."""
    from kit.runtime.host import choose_gpus, read_gpu_plan

    session = session or runtime.new_session_id()
    name = f"kit-{spec.target}-{session}"
    plan = None
    if spec.gpus:
        devices = spec.gpu_devices or choose_gpus(None, spec.gpus, target=spec.target)
        plan = read_gpu_plan(count=spec.gpus, devices=devices)
    runs = server_runs(
        spec,
        plan,
        name=name,
        environment=runtime.server_environment(spec, fault),
        labels={**runtime.run_labels(), LABEL_SESSION: session},
        diagnose=diagnose,
    )
    return runtime.start_container(spec, runs, name=name, session=session)
