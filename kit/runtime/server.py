"""A server container: start (from the renderer's keyword arguments), attach, exec, read its log, remove.

With kit/runtime/docker_source.py (what the watcher reads from a container), the only code that
drives a running server through the docker SDK; callers get plain data and kit errors. The shape of
the container is kit/render/docker.py's (`server_runs`); this adapter takes it as data and never
imports the renderer (kit.startup.server puts the two together).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import requests
from docker.errors import APIError, DockerException, NotFound
from docker.models.containers import Container

from kit.errors import EnvironmentProblem, InputError, KitError
from kit.runtime.cache import ensure_volume
from kit.runtime.engine import LABEL_MANAGED, LABEL_SESSION, client, image_exists, translated
from kit.spec import LaunchSpec, client_host


@dataclass
class RunningServer:
    container: Container
    spec: LaunchSpec
    name: str
    session: str
    host_port: int | None
    gpu_access: str | None = None
    """How the container got its GPUs (kit.runtime.host.gpus.GpuWay.describe); None without GPUs."""
    refused: tuple[str, ...] = field(default_factory=tuple)
    """GPU ways the engine refused before this one started ('<way>: <what the engine said>')."""

    @property
    def url(self) -> str:
        return f"http://{client_host(self.spec.publish_address)}:{self.host_port}"

    @property
    def short_id(self) -> str:
        return self.container.id[:12]


def new_session_id() -> str:
    return secrets.token_hex(4)


def server_environment(spec: LaunchSpec, fault: str | None) -> dict[str, str]:
    """Run-time variables: secrets by name from the caller's environment, the test-only fault switch."""
    env = {key: os.environ[key] for key in spec.pass_env if os.environ.get(key)}
    if fault:
        if spec.device != "cpu":
            raise InputError("--fault", "faults exist only in the CPU rehearsal image", "use the tiny target")
        env["KIT_FAULT"] = fault
    return env


RUN_LABELS = "KIT_RUN_LABELS"


def run_labels() -> dict[str, str]:
    """Labels a caller asks for on every container this process starts: KIT_RUN_LABELS='k=v,k2=v2'.

    CI jobs and tests mark their own containers this way, so their cleanup can find exactly those
    on an engine that other people's servers share."""
    labels: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in os.environ.get(RUN_LABELS, "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(RUN_LABELS, f"'{item}' is not KEY=VALUE", "e.g. KIT_RUN_LABELS=ci.job=1234")
        labels[key.strip()] = value.strip()
    return labels


def require_image(spec: LaunchSpec) -> None:
    """The engine answers and holds the target's image (EnvironmentProblem with the fix if not)."""
    if not image_exists(spec.image_ref):
        raise EnvironmentProblem(
            f"image {spec.image_ref} not built", hint=f"run 'kit image build {spec.image}'"
        )


def start_container(
    spec: LaunchSpec, runs: Sequence[tuple[Any, dict]], *, name: str, session: str
) -> RunningServer:
    """Start the first of RUNS the engine accepts: (GPU way or None, containers.run keyword arguments),
    best first. A way the engine refuses (no such runtime, device driver or CDI device) is removed
    and the next tried; when none starts, EnvironmentProblem lists what the engine said to each."""
    require_image(spec)
    ensure_volume()  # before the engine makes it on first mount, unlabelled (Compose would warn)
    refused: list[str] = []
    for way, kwargs in runs:
        described = getattr(way, "describe", None)
        try:
            with translated(f"starting {spec.image_ref}"):
                container = _run(kwargs, gpus=way is not None)
            server = RunningServer(container, spec, name, session, None, described, tuple(refused))
            server.host_port = published_port(container, spec.port)
        except _Refused as exc:
            refused.append(f"{described}: {exc}")
            continue
        except BaseException:
            # Ctrl-C/SIGTERM (or an engine error) between create and return: nobody holds the
            # container yet, so nobody else would remove it.
            _remove_named(name)
            raise
        return server
    raise EnvironmentProblem(
        f"no way to give {spec.target}'s container {spec.gpus} GPU(s) worked on this engine",
        hint="; ".join(refused) + " (kit doctor checks the toolkit and CDI)",
    )


# What an engine says when it cannot give GPUs one way: 'could not select device driver "" with
# capabilities: [[gpu]]', 'unknown or invalid runtime name: nvidia', 'unresolvable CDI devices ...'.
_GPU_REFUSAL = re.compile(r"device|driver|runtime|cdi|nvidia|gpu", re.IGNORECASE)


class _Refused(Exception):
    """The engine would not create or start the container this GPU way."""


def _run(kwargs: dict, *, gpus: bool) -> Container:
    """containers.run; with GPUs, an engine refusal removes the half-made container and raises _Refused."""
    if not gpus:
        return client().containers.run(**kwargs)
    try:
        return client().containers.run(**kwargs)
    except APIError as exc:
        name = kwargs.get("name")
        if name:
            with contextlib.suppress(DockerException):
                client().containers.get(name).remove(force=True, v=True)
        said = " ".join(str(exc.explanation or exc).split())
        if not _GPU_REFUSAL.search(said):
            raise  # not about GPUs (a port taken, a bad mount): the next way would fail the same
        raise _Refused(said[:300]) from exc


def published_port(container: Container, port: int) -> int | None:
    try:
        container.reload()
        bindings = (container.attrs.get("NetworkSettings", {}).get("Ports") or {}).get(f"{port}/tcp")
    except DockerException:
        return None
    return int(bindings[0]["HostPort"]) if bindings else None


def attach(name_or_id: str) -> Container:
    with translated(f"finding container {name_or_id}"):
        try:
            return client().containers.get(name_or_id)
        except NotFound as exc:
            # A Compose service's name (its container is PROJECT-SERVICE-1): the running one.
            found = client().containers.list(filters={"label": f"com.docker.compose.service={name_or_id}"})
            if len(found) == 1:
                return found[0]
            raise InputError("CONTAINER", f"no container '{name_or_id}'", "see 'kit ps'") from exc


def exec_text(container: Container, cmd: list[str], timeout_s: int = 30) -> tuple[int, str]:
    """Run a command inside the container (bounded by coreutils timeout) and return (code, output)."""
    try:
        result = container.exec_run(["timeout", str(timeout_s), *cmd], demux=False)
    except DockerException as exc:
        return 125, str(exc)
    return result.exit_code, (result.output or b"").decode("utf-8", "replace")


# Lists processes from /proc (minimal images have no ps): "PID<TAB>cmdline" per line.
_LIST_PROCESSES = (
    'for p in /proc/[0-9]*; do c=$(tr "\\0" " " < "$p/cmdline" 2>/dev/null); '
    '[ -n "$c" ] && printf "%s\\t%s\\n" "${p#/proc/}" "$c"; done'
)


def list_processes(container: Container) -> dict[int, str]:
    _, out = exec_text(container, ["sh", "-c", _LIST_PROCESSES], timeout_s=10)
    processes: dict[int, str] = {}
    for line in out.splitlines():
        pid, _, cmdline = line.partition("\t")
        if pid.isdigit():
            processes[int(pid)] = cmdline.strip()
    return processes


def dump_stack(container: Container, pid: int, timeout_s: int = 20, *, nonblocking: bool = False) -> str:
    flags = ["--nonblocking"] if nonblocking else []
    code, out = exec_text(container, ["py-spy", "dump", *flags, "--pid", str(pid)], timeout_s=timeout_s)
    if code != 0 and not nonblocking and "Failed to suspend" in out:
        # A stopped process (SIGSTOP, a debugger) cannot be suspended by py-spy's ptrace; read it
        # without suspending: it is not running, so the stack is consistent.
        code, out = exec_text(
            container, ["py-spy", "dump", "--nonblocking", "--pid", str(pid)], timeout_s=timeout_s
        )
    return out if code == 0 else f"(py-spy dump failed with exit code {code}: {out.strip()[-300:]})"


def logs_text(container: Container, tail: int | str = "all") -> str:
    try:
        return container.logs(stdout=True, stderr=True, tail=tail).decode("utf-8", "replace")
    except DockerException:
        return ""


def _remove_named(name: str) -> None:
    """Best effort, on the way out of a failed start: the container called NAME, if it was made."""
    with contextlib.suppress(DockerException, requests.RequestException):
        client().containers.get(name).remove(force=True, v=True)


def remove(container: Container) -> bool:
    """Stop and remove; True if it is gone afterwards."""
    try:
        container.remove(force=True, v=True)
    except NotFound:
        return True
    except (DockerException, requests.RequestException) as exc:
        raise KitError(
            f"could not remove container {container.name}: {type(exc).__name__}",
            hint="remove it with 'kit down --all' once the engine answers",
        ) from exc
    return True


def kit_containers(*, session: str | None = None, include_stopped: bool = True) -> list[Container]:
    filters = {"label": [LABEL_MANAGED] + ([f"{LABEL_SESSION}={session}"] if session else [])}
    with translated("listing the kit's containers"):
        return client().containers.list(all=include_stopped, filters=filters)
