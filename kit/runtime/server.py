"""A server container started from a LaunchSpec: start, follow its log, sample activity, exec, remove.

The only module that drives a running server through the docker SDK; callers get plain data
(lines, ActivitySample, pids, stack text) and kit errors.
"""

from __future__ import annotations

import os
import queue
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import requests
from docker.errors import DockerException, NotFound
from docker.models.containers import Container

from kit.errors import EnvironmentProblem, InputError, KitError
from kit.logs import ActivitySample
from kit.render.docker import run_kwargs
from kit.runtime.engine import LABEL_MANAGED, LABEL_SESSION, client, image_exists, translated
from kit.spec import LaunchSpec, client_host


@dataclass
class RunningServer:
    container: Container
    spec: LaunchSpec
    name: str
    session: str
    host_port: int | None

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


def start_server(
    spec: LaunchSpec, *, fault: str | None = None, diagnose: bool = True, session: str | None = None
) -> RunningServer:
    if not image_exists(spec.image_ref):
        raise EnvironmentProblem(
            f"image {spec.image_ref} not built", hint=f"run 'kit image build {spec.image}'"
        )
    session = session or new_session_id()
    name = f"kit-{spec.target}-{session}"
    kwargs = run_kwargs(
        spec,
        name=name,
        environment=server_environment(spec, fault),
        labels={LABEL_SESSION: session},
        diagnose=diagnose,
    )
    with translated(f"starting {spec.image_ref}"):
        container = client().containers.run(**kwargs)
    server = RunningServer(container, spec, name, session, None)
    server.host_port = published_port(container, spec.port)
    return server


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
            raise InputError("CONTAINER", f"no container '{name_or_id}'", "see 'kit ps'") from exc


class LogFollower:
    """Follows a container's output in a thread; lines arrive in a queue with their arrival time."""

    def __init__(self, container: Container, *, since_start: bool = True):
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        self.done = threading.Event()
        self._container = container
        self._since_start = since_start
        self._thread = threading.Thread(target=self._run, name="kit-log-follower", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        pending = b""
        try:
            stream = self._container.logs(
                stream=True, follow=True, stdout=True, stderr=True, tail="all" if self._since_start else 0
            )
            for chunk in stream:
                pending += chunk
                *complete, pending = pending.split(b"\n")
                now = time.monotonic()
                for raw in complete:
                    self.lines.put((now, raw.decode("utf-8", "replace").rstrip("\r")))
        except (DockerException, requests.RequestException, OSError):
            pass  # the container or the engine went away; the watcher notices through its state
        finally:
            if pending:
                self.lines.put((time.monotonic(), pending.decode("utf-8", "replace")))
            self.done.set()

    def drain(self) -> Iterator[tuple[float, str]]:
        while True:
            try:
                yield self.lines.get_nowait()
            except queue.Empty:
                return


def _blkio_read_bytes(stats: dict) -> int | None:
    entries = (stats.get("blkio_stats") or {}).get("io_service_bytes_recursive") or []
    reads = [e.get("value", 0) for e in entries if str(e.get("op", "")).lower() == "read"]
    return sum(reads) if entries else None


def sample_activity(
    container: Container, t: float, gpu_mem_bytes: int | None = None
) -> ActivitySample | None:
    """Container-wide CPU seconds and bytes read, from one stats snapshot (None if it is gone)."""
    try:
        stats = container.stats(stream=False, one_shot=True)
    except (DockerException, requests.RequestException, ValueError):
        return None
    usage = ((stats.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage")
    return ActivitySample(
        t=t,
        cpu_seconds=None if usage is None else usage / 1e9,
        read_bytes=_blkio_read_bytes(stats),
        gpu_mem_bytes=gpu_mem_bytes,
    )


@dataclass(frozen=True)
class ContainerState:
    running: bool
    exit_code: int | None
    oom_killed: bool = False
    gone: bool = False


def container_state(container: Container) -> ContainerState:
    """Running or not; raises EnvironmentProblem when the engine itself stopped answering."""
    try:
        container.reload()
    except NotFound:
        return ContainerState(False, None, gone=True)
    except (DockerException, requests.RequestException) as exc:
        raise EnvironmentProblem(
            "the Docker engine stopped answering while watching the server",
            hint=f"container {container.name} may still exist: 'kit down --all' once the engine is back",
        ) from exc
    state = container.attrs.get("State", {})
    running = bool(state.get("Running"))
    return ContainerState(running, None if running else state.get("ExitCode"), bool(state.get("OOMKilled")))


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


def dump_stack(container: Container, pid: int, timeout_s: int = 20) -> str:
    code, out = exec_text(container, ["py-spy", "dump", "--pid", str(pid)], timeout_s=timeout_s)
    return out if code == 0 else f"(py-spy dump failed with exit code {code}: {out.strip()[-300:]})"


def logs_text(container: Container, tail: int | str = "all") -> str:
    try:
        return container.logs(stdout=True, stderr=True, tail=tail).decode("utf-8", "replace")
    except DockerException:
        return ""


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
