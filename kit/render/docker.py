"""LaunchSpec -> a docker container: SDK keyword arguments and the equivalent `docker run` line.

The runtime and the renderers share this one mapping, so what `kit up` starts is what
`kit render docker` prints.
"""

from __future__ import annotations

import shlex

from docker.types import DeviceRequest, Ulimit

from kit.runtime.engine import LABEL_IMAGE, LABEL_MANAGED, LABEL_TARGET
from kit.spec import CONTAINER_HF_CACHE, LaunchSpec


def container_labels(spec: LaunchSpec, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {
        LABEL_MANAGED: "server",
        LABEL_TARGET: spec.target,
        LABEL_IMAGE: spec.image,
        **spec.labels,
        **(extra or {}),
    }


def run_kwargs(
    spec: LaunchSpec,
    *,
    name: str | None = None,
    host_port: int | None = None,
    environment: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    diagnose: bool = False,
) -> dict:
    """Keyword arguments for `docker.DockerClient.containers.run` / `.create`.

    host_port None publishes the server port on a free port of 127.0.0.1 (never on all interfaces).
    environment: the runtime-only variables (spec.env plus pass_env values read by the caller).
    diagnose: add SYS_PTRACE so py-spy can read the ranks' stacks.
    """
    kwargs: dict = {
        "image": spec.image_ref,
        "command": list(spec.argv),
        "environment": {**spec.env, **(environment or {})},
        "labels": container_labels(spec, labels),
        "ports": {f"{spec.port}/tcp": ("127.0.0.1", host_port)},
        "detach": True,
    }
    if name:
        kwargs["name"] = name
    if spec.gpus:
        kwargs["device_requests"] = [DeviceRequest(count=spec.gpus, capabilities=[["gpu"]])]
    if spec.ipc_host:
        kwargs["ipc_mode"] = "host"
    elif spec.shm_size:
        kwargs["shm_size"] = spec.shm_size
    if spec.ulimits:
        kwargs["ulimits"] = [Ulimit(name=k, soft=v, hard=v) for k, v in sorted(spec.ulimits.items())]
    cap_add = list(spec.cap_add) + (["SYS_PTRACE"] if diagnose and "SYS_PTRACE" not in spec.cap_add else [])
    if cap_add:
        kwargs["cap_add"] = cap_add
    if spec.hf_cache:
        kwargs["volumes"] = {spec.hf_cache: {"bind": CONTAINER_HF_CACHE, "mode": "rw"}}
    return kwargs


def docker_run_argv(spec: LaunchSpec, *, name: str | None = None, host_port: int | None = None) -> list[str]:
    """The same container as a `docker run` command line (secrets passed by name, never by value)."""
    argv = ["docker", "run", "--rm", "-d"]
    if name:
        argv += ["--name", name]
    for key, value in container_labels(spec).items():
        argv += ["--label", f"{key}={value}"]
    argv += ["-p", f"127.0.0.1:{host_port or spec.port}:{spec.port}"]
    if spec.gpus:
        argv += ["--gpus", str(spec.gpus) if spec.gpus else "all"]
    if spec.ipc_host:
        argv += ["--ipc", "host"]
    elif spec.shm_size:
        argv += ["--shm-size", spec.shm_size]
    for key, value in sorted(spec.ulimits.items()):
        argv += ["--ulimit", f"{key}={value}"]
    for cap in spec.cap_add:
        argv += ["--cap-add", cap]
    if spec.hf_cache:
        argv += ["-v", f"{spec.hf_cache}:{CONTAINER_HF_CACHE}"]
    for key, value in sorted(spec.env.items()):
        argv += ["-e", f"{key}={value}"]
    for key in spec.pass_env:
        argv += ["-e", key]
    return [*argv, spec.image_ref, *spec.argv]


def docker_run_line(spec: LaunchSpec, **kwargs) -> str:
    return shlex.join(docker_run_argv(spec, **kwargs))
