"""LaunchSpec -> a docker container: SDK keyword arguments and the equivalent `docker run` line.

The runtime and the renderers share this one mapping, so what `kit up` starts is what
`kit render docker` prints. Both refuse a port published beyond loopback without an API key
(check_exposure); with one, the key travels by variable name (`-e NAME`) and a tiny shell
wrapper hands it to SGLang's --api-key inside the container, so no file or command line holds it.

Every server container also gets, from here: SYS_PTRACE (py-spy reads the ranks' stacks; `kit watch`
on a Compose or systemd server needs it), the compile-cache volume with its variables
(kit/runtime/compile_cache.py), PyTorch's flight recorder (kit/runtime/flight_recorder_env.py), and
its GPUs the way the host gives them (kit.runtime.host.gpus:
a GPU request, CDI devices `nvidia.com/gpu=N`, or the nvidia runtime). The SDK side (`run_kwargs`,
`host_settings`) asks this host's plan when no way is given; text renders take the way they are
given and default to the portable GPU request (`docker run --gpus N`).
"""

from __future__ import annotations

import shlex

from docker.types import Ulimit

from kit.errors import InputError
from kit.runtime.compile_cache import ENV as COMPILE_ENV
from kit.runtime.compile_cache import MOUNT as COMPILE_MOUNT
from kit.runtime.compile_cache import volume_name
from kit.runtime.engine import LABEL_IMAGE, LABEL_MANAGED, LABEL_TARGET
from kit.runtime.flight_recorder_env import ENV as FLIGHT_RECORDER_ENV
from kit.runtime.host.gpus import GpuPlan, GpuWay
from kit.spec import CONTAINER_HF_CACHE, LaunchSpec, is_loopback

PTRACE = "SYS_PTRACE"

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


def check_exposure(spec: LaunchSpec) -> None:
    """Refuse a server published beyond this machine without an API key (InputError naming the fix)."""
    if spec.api_key_env or is_loopback(spec.publish_address):
        return
    raise InputError(
        "container.publish_address",
        f"{spec.publish_address} publishes {spec.target} beyond this machine without an API key",
        "name the variable that holds the key: --set container.api_key_env=KIT_API_KEY "
        "(and export KIT_API_KEY), or publish on 127.0.0.1",
    )


def cap_add(spec: LaunchSpec, *, ptrace: bool = True) -> list[str]:
    """The profile's capabilities, plus SYS_PTRACE for py-spy (stacks of a hung rank)."""
    caps = list(spec.cap_add)
    return [*caps, PTRACE] if ptrace and PTRACE not in caps else caps


def portable_way(spec: LaunchSpec, gpus: int | None = None) -> GpuWay:
    """The GPU request `docker run --gpus` makes: what a render says when no host was asked."""
    return GpuWay(
        "gpu-request", "the portable default", False, spec.gpus if gpus is None else gpus, spec.gpu_devices
    )


def host_way(spec: LaunchSpec, gpus: int) -> GpuWay:
    """This host's best way to give GPUS of SPEC's chosen devices (spec.gpu_devices, else KIT_GPUS)."""
    from kit.runtime.host import choose_gpus, read_gpu_plan

    devices = spec.gpu_devices[:gpus] or choose_gpus(None, gpus, target=spec.target, strict=False)
    return read_gpu_plan(count=gpus, devices=devices).first


GPU_ACCESS = ("auto", "request", "cdi", "runtime")
"""`--gpu-access` of the renders: this host's best way, or one named."""


def chosen_way(spec: LaunchSpec, access: str) -> GpuWay | None:
    """The way a render gives SPEC's GPUs: 'auto' asks this host's plan; the others name one."""
    if not spec.gpus:
        return None
    if access == "auto":
        return host_way(spec, spec.gpus)
    how = {"request": "gpu-request", "cdi": "cdi", "runtime": "nvidia-runtime"}[access]
    return GpuWay(how, f"--gpu-access {access}", False, spec.gpus, spec.gpu_devices)  # type: ignore[arg-type]


def host_settings(spec: LaunchSpec, gpus: int, *, way: GpuWay | None = None) -> dict:
    """The host resources a server's container gets: its GPUs (WAY, else this host's plan), IPC or
    shm, ulimits, and the compile-cache volume. The server and any container that must see the same
    host (kit preflight's ranks) take them from here.

    The result's `environment` holds the compile cache's variables (and NVIDIA_VISIBLE_DEVICES for
    the runtime way): a caller with variables of its own merges them over it."""
    kwargs: dict = {"environment": dict(COMPILE_ENV)}
    if gpus:
        chosen = way or host_way(spec, gpus)
        gpu = chosen.sdk_kwargs()
        kwargs["environment"].update(gpu.pop("environment", {}))
        kwargs.update(gpu)
    if spec.ipc_host:
        kwargs["ipc_mode"] = "host"
    elif spec.shm_size:
        kwargs["shm_size"] = spec.shm_size
    if spec.ulimits:
        kwargs["ulimits"] = [Ulimit(name=k, soft=v, hard=v) for k, v in sorted(spec.ulimits.items())]
    kwargs["volumes"] = {volume_name(): {"bind": COMPILE_MOUNT, "mode": "rw"}}
    return kwargs


def run_kwargs(
    spec: LaunchSpec,
    *,
    name: str | None = None,
    host_port: int | None = None,
    environment: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    diagnose: bool = True,
    way: GpuWay | None = None,
) -> dict:
    """Keyword arguments for `docker.DockerClient.containers.run` / `.create`.

    host_port None publishes the server port on a free port of spec.publish_address (127.0.0.1
    unless the profile publishes further, which needs an API key).
    environment: the runtime-only variables (pass_env values read by the caller, the fault switch).
    diagnose: SYS_PTRACE so py-spy can read the ranks' stacks (on unless a caller turns it off).
    way: how the container gets its GPUs; None asks this host's plan (kit.runtime.host).
    """
    check_exposure(spec)
    settings = host_settings(spec, spec.gpus, way=way)
    kwargs: dict = {
        "image": spec.image_ref,
        "command": server_command(spec),
        "environment": {
            **settings.pop("environment"),
            **FLIGHT_RECORDER_ENV,
            **spec.env,
            **(environment or {}),
        },
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
    volumes = settings.pop("volumes")
    kwargs.update(settings)
    caps = cap_add(spec, ptrace=diagnose)
    if caps:
        kwargs["cap_add"] = caps
    if spec.hf_cache:
        volumes = {spec.hf_cache: {"bind": CONTAINER_HF_CACHE, "mode": "rw"}, **volumes}
    kwargs["volumes"] = volumes
    return kwargs


def server_runs(
    spec: LaunchSpec,
    plan: GpuPlan | None,
    *,
    name: str,
    environment: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    diagnose: bool = True,
) -> list[tuple[GpuWay | None, dict]]:
    """The server's container once per way of PLAN, best first (one run, way None, without GPUs):
    `kit up` starts the first the engine accepts."""
    shape = {"name": name, "environment": environment, "labels": labels, "diagnose": diagnose}
    if not spec.gpus or plan is None:
        return [(None, run_kwargs(spec, **shape))]
    return [(way, run_kwargs(spec, **shape, way=way)) for way in plan.ways]


def gpu_argv(way: GpuWay) -> list[str]:
    """The `docker run` options for one GPU way."""
    if way.how == "cdi":
        return [part for name in way.cdi_names for part in ("--device", name)]
    if way.how == "nvidia-runtime":
        return ["--runtime", "nvidia", "-e", f"NVIDIA_VISIBLE_DEVICES={way.visible_devices}"]
    if way.devices:
        return ["--gpus", f'"device={",".join(way.devices)}"']  # docker parses --gpus as CSV: quoted
    return ["--gpus", "all" if way.count < 0 else str(way.count)]


def docker_run_argv(
    spec: LaunchSpec,
    *,
    name: str | None = None,
    host_port: int | None = None,
    way: GpuWay | None = None,
    diagnose: bool = True,
) -> list[str]:
    """The same container as a `docker run` command line (secrets passed by name, never by value).
    WAY: how it gets its GPUs (default: the portable `--gpus N`)."""
    from kit.render._values import require_one_line

    require_one_line(spec, "a docker run line")
    check_exposure(spec)
    argv = ["docker", "run", "--rm", "-d", "--init"]  # --init: see run_kwargs
    if name:
        argv += ["--name", name]
    for key, value in container_labels(spec).items():
        argv += ["--label", f"{key}={value}"]
    argv += ["-p", f"{publish_host(spec.publish_address)}:{host_port or spec.port}:{spec.port}"]
    if spec.gpus:
        argv += gpu_argv(way or portable_way(spec))
    if spec.ipc_host:
        argv += ["--ipc", "host"]
    elif spec.shm_size:
        argv += ["--shm-size", spec.shm_size]
    for key, value in sorted(spec.ulimits.items()):
        argv += ["--ulimit", f"{key}={value}"]
    for cap in cap_add(spec, ptrace=diagnose):
        argv += ["--cap-add", cap]
    if spec.hf_cache:
        argv += ["-v", f"{spec.hf_cache}:{CONTAINER_HF_CACHE}"]
    argv += ["-v", f"{volume_name()}:{COMPILE_MOUNT}"]
    for key, value in sorted({**COMPILE_ENV, **FLIGHT_RECORDER_ENV, **spec.env}.items()):
        argv += ["-e", f"{key}={value}"]
    for key in spec.pass_env:
        argv += ["-e", key]
    return [*argv, spec.image_ref, *server_command(spec)]


def docker_run_line(spec: LaunchSpec, **kwargs) -> str:
    return shlex.join(docker_run_argv(spec, **kwargs))
