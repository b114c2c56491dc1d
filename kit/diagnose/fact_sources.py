"""What ran a server, as one kind of source of facts: each answers the questions of
kit.diagnose.fingerprint.FactSource, and fingerprint.build makes every fingerprint from the answers.

    ContainerFacts     a server container (kit up, kit watch CONTAINER, kit bundle create CONTAINER)
    ReplayFacts        a replayed scenario: the catalog's launch and its fake GPUs, no host ran it
    HostProcessFacts   a server running as host processes (kit watch --pid/--unit, kit bundle --pid)
    PastedLogFacts     a pasted log (kit bundle create --from-log): the target's launch, nothing ran
    HereFacts          this machine and a launch about to start on a local image (kit repro's diff)
    HostReplayFacts    a host process's bundle replayed in the nearest kit image (kit repro)
    Unrecorded         a run folder written by a kit that recorded no fingerprint: nothing to read

    facts_of_run(source, spec, host=)   the adapter for what kit up / kit watch followed

The readers are kit/diagnose/facts.py (Docker, NVML, the host's tools) and kit/diagnose/hostenv.py
(a process's /proc and its Python environment); an adapter only says which of them answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from kit.diagnose import facts, hostenv
from kit.diagnose import fingerprint as fp
from kit.diagnose.redact import split_env
from kit.runtime import processes as procs
from kit.runtime.host import read_machine
from kit.spec import LaunchSpec


@dataclass(frozen=True)
class HostServer:
    """A server that runs as host processes (kit watch --pid/--unit): its main pid (None once it is
    gone) and its systemd unit."""

    pid: int | None
    unit: str | None = None


def facts_of_run(source: Any, spec: LaunchSpec | None, *, host: HostServer | None = None) -> fp.FactSource:
    """The facts of what kit up / kit watch followed: a host server, a container (DockerSource) or a
    replay (a source with no container); the GPUs are the source's NVML adapter (fake in replays)."""
    gpus = getattr(source, "gpus", None)
    if host is not None:
        return HostProcessFacts(host.pid, spec, unit=host.unit, gpus=gpus, by="kit watch (host)")
    assert spec is not None, "a container or a replay is always started from a spec"
    container = getattr(source, "container", None)
    if container is None:
        return ReplayFacts(spec, gpus=gpus, scenario=source.name)
    labels = container.attrs.get("Config", {}).get("Labels") or {}
    by = "kit up" if "io.kit.session" in labels else "kit watch"
    return ContainerFacts(container, spec, gpus=gpus, by=by)


def _command(container: Any) -> list[str]:
    config = container.attrs.get("Config") or {}
    return list(config.get("Entrypoint") or []) + list(config.get("Cmd") or [])


class ContainerFacts:
    """A server container and the host it runs on: the launch as the container really ran it (its
    command and environment, not the catalog's), its image by id, the lock read from inside it."""

    absent = None

    def __init__(self, container: Any, spec: LaunchSpec, *, gpus: Any | None, by: str):
        self.container, self.spec, self.gpus, self.by = container, spec, gpus, by

    def image(self) -> tuple[dict, dict, str | None]:
        return facts.image_facts_of_container(self.container, self.spec.image)

    def host(self) -> dict:
        return facts.host_facts()

    def nvidia(self) -> dict:
        return facts.nvidia_facts(self.gpus)

    def launch(self) -> fp.Launch:
        image_env, image_labels = facts.image_defaults(self.container)
        config = self.container.attrs.get("Config") or {}
        command = _command(self.container)
        defaults = facts.env_list(image_env)
        env = {k: v for k, v in facts.env_list(config.get("Env")).items() if defaults.get(k) != v}
        ours, name, target = list(self.spec.argv), self.container.name, self.spec.target
        if command[-len(ours) :] == ours:
            argv, argv_from = ours, f"container {name}'s command (the catalog's launch of {target})"
        else:
            argv, argv_from = command, f"container {name}'s command (not the catalog's launch of {target})"
        return fp.Launch(
            facts.catalog_fields(self.spec),
            argv=argv,
            env=env,
            settings=facts.container_settings(self.container.attrs, image_labels),
            argv_from=argv_from,
            catalog_argv=None if argv == ours else ours,
        )

    def process(self) -> None:
        return None

    def raw_launch(self) -> tuple[dict[str, str], list[str]]:
        config = self.container.attrs.get("Config") or {}
        return facts.env_list(config.get("Env")), _command(self.container)


class ReplayFacts:
    """A replayed scenario: the launch and its (fake) GPUs are known; no image or host ran it."""

    absent = None

    def __init__(self, spec: LaunchSpec, *, gpus: Any | None, scenario: str):
        self.spec, self.gpus, self.scenario = spec, gpus, scenario
        self.by = f"scenario replay {scenario}"
        self._no_host = f"a replayed scenario ({scenario}): no host ran it"

    def image(self) -> tuple[dict, dict, None]:
        why = f"a replayed scenario ({self.scenario}): no container ran"
        return (*facts.image_facts_of_manifest(self.spec.image, why), None)

    def host(self) -> dict:
        return fp.host_unknown(self._no_host)

    def nvidia(self) -> dict:
        gpus, why = self.gpus, self._no_host
        inventory = gpus.inventory() if gpus is not None else None
        section = fp.nvidia_section(
            inventory,
            p2p=gpus.p2p_matrix() if gpus is not None else None,
            topology=gpus.topology() if gpus is not None else None,
            toolkit=fp.unknown(why),
            runtimes=fp.unknown(why),
            cdi=fp.unknown(why),
            smi_topo=fp.unknown(why),
            why_no_nvml=None if gpus is not None else f"{why}; it has no GPUs",
        )
        return section | {"lost_gpus": facts.lost_section(inventory)}

    def launch(self) -> fp.Launch:
        return facts.spec_launch(self.spec, {}, f"the catalog's launch of {self.spec.target} (replayed)")

    def process(self) -> None:
        return None

    def raw_launch(self) -> tuple[dict[str, str], list[str]]:
        return dict(self.spec.env), list(self.spec.argv)


@dataclass(frozen=True)
class _Read:
    """What /proc says of the SGLang launcher (under the PID asked for: docker-init, tini, a shell...)."""

    given: int
    pid: int
    argv: list[str]
    env: dict[str, str] | None
    python: hostenv.PythonEnv
    unit: str | None


class HostProcessFacts:
    """A server running as host processes: the Python environment that actually ran it (its packages
    are the lock), its argv and environment, its unit, the machine and the GPUs. A PID that wraps the
    server is followed down to the SGLang launcher under it."""

    def __init__(
        self, pid: int | None, spec: LaunchSpec | None, *, unit: str | None, gpus: Any | None, by: str
    ):
        self.given, self.spec, self.unit, self.gpus, self.by = pid, spec, unit, gpus, by

    @property
    def absent(self) -> str | None:
        if self.given is not None:
            return None
        return f"the server's main process was gone when the bundle was made ({self.unit or 'no unit'})"

    @cached_property
    def _read(self) -> _Read:
        assert self.given is not None
        pid = procs.find_launcher(self.given) or self.given
        return _Read(
            given=self.given,
            pid=pid,
            argv=procs.read_cmdline(pid) or [],
            env=procs.read_environ(pid),
            python=hostenv.read_python_env(pid),
            unit=self.unit or procs.unit_of(pid),
        )

    @cached_property
    def _unit(self) -> dict:
        return hostenv.unit_facts(self._read.unit)

    def image(self) -> tuple[dict, dict, str | None]:
        python = self._read.python
        if python.packages:
            packages = {k: p.version for k, p in sorted(python.packages.items())}
            lock: Any = {"from": python.source, "count": len(packages), "packages": packages}
            lock_text: str | None = "".join(f"{name}=={version}\n" for name, version in packages.items())
        else:
            lock, lock_text = fp.unknown(python.why_none or "no metadata"), None
        no_image = fp.unknown(f"a host process (pid {self._read.pid}): no kit image ran it")
        image = {
            "name": no_image,
            "tag": no_image,
            "id": no_image,
            "digest": no_image,
            "base": no_image,
            "labels": {},
            "manifest": no_image,
            "lock": lock,
        }
        return image, hostenv.versions_of(python), lock_text

    def host(self) -> dict:
        return hostenv.machine_section(read_machine())

    def nvidia(self) -> dict:
        return facts.nvidia_facts(self.gpus)

    def launch(self) -> fp.Launch:
        read = self._read
        why_env = self._why_env()
        return fp.Launch(
            {**self._catalog(), "dialect": hostenv.dialect_of(read.python, read.pid)},
            argv=read.argv or fp.unknown(f"/proc/{read.pid}/cmdline is not readable"),
            env=hostenv.launch_env(read.env) if read.env is not None else fp.unknown(why_env),
            settings={
                "kind": "host process",
                "pid": read.pid,
                "unit": read.unit,
                "restart_policy": self._unit["restart"],
            },
            argv_from=f"/proc/{read.pid}/cmdline (a host process)",
            catalog_argv=list(self.spec.argv) if self.spec is not None else None,
        )

    def process(self) -> dict:
        read = self._read
        masked = split_env(read.env)[0] if read.env is not None else fp.unknown(self._why_env())
        return {
            "pid": read.pid,
            "given_pid": read.given,  # the PID asked for; `pid` is the SGLang launcher under it (or the same)
            "exe": read.python.exe or fp.unknown("/proc/PID/exe is not readable"),
            "python": read.python.python or fp.unknown("not readable"),
            "site_packages": list(read.python.site_packages),
            "started": hostenv.started_iso(read.pid) or fp.unknown("not readable"),
            "stdout": procs.stdout_target(read.pid) or fp.unknown("not readable"),
            "env": dict(sorted(masked.items())) if isinstance(masked, dict) else masked,
            **self._unit,
        }

    def raw_launch(self) -> tuple[dict[str, str], list[str]]:
        if self.given is None:
            return {}, []
        return self._read.env or {}, self._read.argv

    def _why_env(self) -> str:
        return f"the environment of pid {self._read.pid} cannot be read (another user's process: run as root)"

    def _catalog(self) -> dict:
        if self.spec is not None:
            return facts.catalog_fields(self.spec)  # the same section as a container's bundle
        argv_facts = hostenv.launch_facts(self._read.argv)
        why = "no --target was given for this host process"
        return {
            "target": fp.unknown(why),
            "profile": fp.unknown(why),
            "model": argv_facts.model or fp.unknown(why),
            "dialect": fp.unknown(why),
            "device": argv_facts.device,
            "ranks": fp.unknown(why),
            "overrides": [],
            "port": argv_facts.port,
        }


class PastedLogFacts:
    """A pasted log: the target's catalog launch is known, what ran it is not."""

    absent = None
    by = "kit bundle create --from-log"

    def __init__(self, spec: LaunchSpec, image: str | None, nccl_from_log: str | None):
        """SPEC: the target resolved with IMAGE (the target's own image when IMAGE is None)."""
        self.spec, self.image_name, self.nccl = spec, image, nccl_from_log
        self._why = "made from a pasted log: the machine and container that wrote it were not inspected"

    def image(self) -> tuple[dict, dict, None]:
        name, target = self.image_name, self.spec.target
        why = self._why if name else "made from a pasted log without --image: the image is not known"
        section, versions = facts.image_facts_of_manifest(name, why)
        if self.nccl:
            versions["nccl"] = f"{self.nccl} (from the log)"
        if name is None:
            section["name"] = fp.unknown(f"not given; {target}'s own image is {self.spec.image}")
        return section, versions, None

    def host(self) -> dict:
        return fp.host_unknown(self._why)

    def nvidia(self) -> dict:
        unknown = fp.unknown(self._why)
        section = fp.nvidia_section(
            None,
            p2p=None,
            topology=None,
            toolkit=unknown,
            runtimes=unknown,
            cdi=unknown,
            smi_topo=unknown,
            why_no_nvml=self._why,
        )
        return section | {"lost_gpus": unknown}

    def launch(self) -> fp.Launch:
        unknown = fp.unknown(self._why)
        return fp.Launch(
            {**facts.catalog_fields(self.spec), "overrides": unknown},
            argv=unknown,
            env=unknown,
            settings=unknown,
            argv_from=self._why,
            catalog_argv=list(self.spec.argv),
        )

    def process(self) -> None:
        return None

    def raw_launch(self) -> tuple[dict[str, str], list[str]]:
        return {}, []


class HereFacts:
    """This machine and a launch about to start on a local image (kit repro's side of the diff): the
    image by tag or id, its lock read without starting it, the catalog's launch with the variables
    set here named (their values never read)."""

    absent = None
    by = "kit repro"

    def __init__(self, spec: LaunchSpec, image_ref: str, *, tag: str | None, present: dict[str, str]):
        self.spec, self.image_ref, self.tag, self.present = spec, image_ref, tag, present

    def image(self) -> tuple[dict, dict, str | None]:
        return facts.image_facts_of_ref(self.image_ref, self.spec.image, tag=self.tag)

    def host(self) -> dict:
        return facts.host_facts()

    def nvidia(self) -> dict:
        return facts.nvidia_facts()

    def launch(self) -> fp.Launch:
        return facts.spec_launch(self.spec, self.present, "kit repro")

    def process(self) -> None:
        return None

    def raw_launch(self) -> tuple[dict[str, str], list[str]]:
        return dict(self.spec.env), list(self.spec.argv)


class HostReplayFacts:
    """A host process's bundle replayed in the nearest kit image: the image is that manifest's (its
    pins; the image that will run is read by kit repro's own side), the versions, host and GPUs are
    the bundle's (what ran it: the differences the plan shows first), the launch is the bundle's with
    the image's launcher in front of SGLang's flags and the catalog's container settings."""

    absent = None

    def __init__(self, fingerprint: dict, image: str, target: str, argv: Any, argv_from: str):
        self.finger, self.image_name, self.target = fingerprint, image, target
        self.argv, self.argv_from = argv, argv_from
        made = fingerprint.get("made")
        self.by = f"kit repro (nearest image; bundle made by {fp.known((made or {}).get('by')) or 'kit'})"

    def image(self) -> tuple[dict, Any, str | None]:
        why = f"a host process's bundle, replayed in {self.image_name}: its image is the manifest's"
        section, _ = facts.image_facts_of_manifest(self.image_name, why)
        return (
            section,
            self.finger.get("versions") or fp.versions_unknown("the bundle records no versions"),
            None,
        )

    def host(self) -> dict:
        return self.finger.get("host") or fp.host_unknown("the bundle records no host")

    def nvidia(self) -> Any:
        return self.finger.get("nvidia") or fp.unknown("the bundle records no GPUs")

    def launch(self) -> fp.Launch:
        launch = self.finger["launch"]
        keys = ("profile", "model", "dialect", "device", "ranks", "overrides", "port")
        return fp.Launch(
            {"target": self.target, **{key: launch.get(key) for key in keys}},
            argv=self.argv,
            env=launch.get("env", fp.unknown("the bundle names no environment")),
            settings={},  # the catalog's container settings (shm, ipc, ulimits) for the replay
            argv_from=self.argv_from,
        )

    def process(self) -> None:
        return None  # the replay is a container

    def raw_launch(self) -> tuple[dict[str, str], list[str]]:
        env = fp.known(self.finger["launch"].get("env"))
        return (dict(env) if isinstance(env, dict) else {}), (
            list(self.argv) if isinstance(self.argv, list) else []
        )


class Unrecorded:
    """A run recorded by a kit that wrote no fingerprint (kit bundle create RUN): nothing to read,
    and the fingerprint says why (fingerprint.failed's shape, as for a process that is gone)."""

    def __init__(self, by: str, why: str):
        self.by, self.absent = by, why

    def raw_launch(self) -> tuple[dict[str, str], list[str]]:
        return {}, []
