"""LaunchSpec -> a docker container: SDK keyword arguments and the equivalent `docker run` line.

The runtime and the renderers share this one mapping, so what `kit up` starts is what
`kit render docker` prints. Both refuse a port published beyond loopback without an API key
(kit.spec.check_exposure); with one, the key travels by variable name (`-e NAME`) and a tiny shell
wrapper hands it to SGLang's --api-key inside the container, so no file or command line holds it.
"""

from __future__ import annotations

import shlex

from docker.types import DeviceRequest, Ulimit

from kit.runtime.engine import LABEL_IMAGE, LABEL_MANAGED, LABEL_TARGET
from kit.spec import CONTAINER_HF_CACHE, LaunchSpec, check_exposure

# `sh -c SCRIPT kit-server python -m sglang.launch_server ...`: refuses to start with an empty key
# (an empty --api-key would mean no auth at all), then execs SGLang so it stays PID 1.
_WITH_API_KEY = (
    ': "${{{name}:?{name} is empty: not starting without the API key}}"; exec "$@" --api-key "${name}"'
)


def server_command(spec: LaunchSpec) -> list[str]:
    """The container's command: the server argv, wrapped to read the API key from its variable."""
    if not spec.api_key_env:
        return list(spec.argv)
    return ["sh", "-c", _WITH_API_KEY.format(name=spec.api_key_env), "kit-server", *spec.argv]


def publish_host(address: str) -> str:
    """An address as `docker run -p` and Compose write it (IPv6 in brackets)."""
    return f"[{address}]" if ":" in address else address


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

    host_port None publishes the server port on a free port of spec.publish_address (127.0.0.1
    unless the profile publishes further, which needs an API key).
    environment: the runtime-only variables (spec.env plus pass_env values read by the caller).
    diagnose: add SYS_PTRACE so py-spy can read the ranks' stacks.
    """
    check_exposure(spec)
    kwargs: dict = {
        "image": spec.image_ref,
        "command": server_command(spec),
        "environment": {**spec.env, **(environment or {})},
        "labels": container_labels(spec, labels),
        "ports": {f"{spec.port}/tcp": (spec.publish_address, host_port)},
        "detach": True,
        # An init as PID 1: SGLang ends a failed start by SIGKILLing its own process tree, which
        # PID 1 of a container ignores, so without one the container exits 0 after a crash and
        # no restart policy (Compose on-failure, systemd Restart=on-failure) ever restarts it.
        "init": True,
    }
    if name:
        kwargs["name"] = name
    kwargs.update(host_settings(spec, spec.gpus))
    cap_add = list(spec.cap_add) + (["SYS_PTRACE"] if diagnose and "SYS_PTRACE" not in spec.cap_add else [])
    if cap_add:
        kwargs["cap_add"] = cap_add
    if spec.hf_cache:
        kwargs["volumes"] = {spec.hf_cache: {"bind": CONTAINER_HF_CACHE, "mode": "rw"}}
    return kwargs


def host_settings(spec: LaunchSpec, gpus: int) -> dict:
    """The host resources a server's container gets (GPUs, IPC or shm, ulimits): the server and any
    container that must see the same host (kit preflight's ranks) take them from here."""
    kwargs: dict = {}
    if gpus:
        kwargs["device_requests"] = [DeviceRequest(count=gpus, capabilities=[["gpu"]])]
    if spec.ipc_host:
        kwargs["ipc_mode"] = "host"
    elif spec.shm_size:
        kwargs["shm_size"] = spec.shm_size
    if spec.ulimits:
        kwargs["ulimits"] = [Ulimit(name=k, soft=v, hard=v) for k, v in sorted(spec.ulimits.items())]
    return kwargs


def docker_run_argv(spec: LaunchSpec, *, name: str | None = None, host_port: int | None = None) -> list[str]:
    """The same container as a `docker run` command line (secrets passed by name, never by value)."""
    check_exposure(spec)
    argv = ["docker", "run", "--rm", "-d", "--init"]  # --init: see run_kwargs
    if name:
        argv += ["--name", name]
    for key, value in container_labels(spec).items():
        argv += ["--label", f"{key}={value}"]
    argv += ["-p", f"{publish_host(spec.publish_address)}:{host_port or spec.port}:{spec.port}"]
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
    return [*argv, spec.image_ref, *server_command(spec)]


def docker_run_line(spec: LaunchSpec, **kwargs) -> str:
    return shlex.join(docker_run_argv(spec, **kwargs))
