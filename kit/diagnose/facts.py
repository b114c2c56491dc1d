"""Reads the facts a fingerprint holds: from the Docker engine, the container, its image, NVML and
the host's NVIDIA tools. The only impure part of fingerprints; kit/diagnose/fingerprint.py shapes them.

Every reader returns data and never raises for a missing fact: what cannot be read becomes
`{"unknown": "why"}`. Host tools (nvidia-smi, nvidia-ctk) are asked with a timeout.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import kit
from kit.diagnose import fingerprint as fp
from kit.errors import KitError
from kit.images.lock import LOCK_PATH, parse_lock
from kit.runtime.nvml import NvmlGpus, nvml_missing, open_nvml, read_inventory
from kit.spec import LaunchSpec

_TOOL_TIMEOUT_S = 15
_CDI_DIRS = ("/etc/cdi", "/var/run/cdi")


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def made(by: str) -> dict:
    return {"by": by, "at": now_iso()}


def kit_section() -> dict:
    """The kit that made the fingerprint: its version decides argv translation and verdict rules."""
    return {"version": kit.__version__}


def _run_tool(argv: list[str]) -> tuple[str | None, str | None]:
    """(stdout, None) or (None, why) for a host tool, bounded by a timeout."""
    if shutil.which(argv[0]) is None:
        return None, f"{argv[0]} is not installed on this host"
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{' '.join(argv)} failed: {type(exc).__name__}"
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        return None, f"{' '.join(argv)} exited {done.returncode}: {why[-1] if why else 'no output'}"
    return done.stdout, None


def engine_is_local() -> bool:
    """Whether host tools and NVML here describe the engine's host (DOCKER_HOST unset or local)."""
    host = os.environ.get("DOCKER_HOST", "")
    if not host or host.startswith(("unix://", "npipe://")):
        return True
    return urlparse(host).hostname in ("127.0.0.1", "localhost", "::1")


# -- host ----------------------------------------------------------------------------------------


def host_facts() -> dict:
    """Kernel, OS, engine and Compose versions, CPUs and memory, as the engine reports them."""
    from kit.runtime.engine import client

    try:
        engine = client()
        version = engine.version()
        info = engine.info()
    except Exception as exc:  # any failure is an unknown, with its name
        why = f"the Docker engine did not answer ({type(exc).__name__})"
        return {
            k: fp.unknown(why)
            for k in ("kernel", "os", "arch", "cpus", "memory_gib", "docker_engine", "docker_api")
        } | {"compose": compose_version()}
    return {
        "kernel": version.get("KernelVersion") or info.get("KernelVersion") or fp.unknown("not reported"),
        "os": info.get("OperatingSystem") or fp.unknown("not reported"),
        "arch": version.get("Arch") or fp.unknown("not reported"),
        "cpus": info.get("NCPU") or fp.unknown("not reported"),
        "memory_gib": round(int(info.get("MemTotal") or 0) / (1 << 30), 1) or fp.unknown("not reported"),
        "cgroup": info.get("CgroupVersion") or fp.unknown("not reported"),
        "docker_engine": version.get("Version") or fp.unknown("not reported"),
        "docker_api": version.get("ApiVersion") or fp.unknown("not reported"),
        "compose": compose_version(),
    }


def compose_version() -> Any:
    out, why = _run_tool(["docker", "compose", "version", "--short"])
    return out.strip() if out else fp.unknown(why or "no answer")


# -- NVIDIA --------------------------------------------------------------------------------------


def _engine_runtimes() -> Any:
    from kit.runtime.engine import client

    try:
        info = client().info()
    except Exception as exc:
        return fp.unknown(f"the Docker engine did not answer ({type(exc).__name__})")
    return {
        "runtimes": sorted((info.get("Runtimes") or {}).keys()),
        "default": info.get("DefaultRuntime") or fp.unknown("not reported"),
        "cdi_spec_dirs": info.get("CDISpecDirs", fp.unknown("this engine does not report CDI (Engine < 25)")),
    }


def _toolkit() -> Any:
    for argv in (["nvidia-ctk", "--version"], ["nvidia-container-cli", "--version"]):
        out, _ = _run_tool(argv)
        if out:
            return out.strip().splitlines()[0]
    return fp.unknown("neither nvidia-ctk nor nvidia-container-cli is installed on this host")


def _cdi_specs(dirs: tuple[str, ...] = _CDI_DIRS) -> Any:
    found = []
    for folder in dirs:
        path = Path(folder)
        if path.is_dir():
            found += sorted(str(p) for p in path.iterdir() if p.suffix in (".yaml", ".yml", ".json"))
    return found or f"no CDI specs in {', '.join(dirs)}"


def nvidia_facts(gpus: NvmlGpus | None = None, *, lib: Any | None = None) -> dict:
    """Driver, GPUs, P2P and topology through NVML (`gpus`, else opened here), and the host's tools."""
    if not engine_is_local():
        remote = os.environ.get("DOCKER_HOST")
        why = f"the engine is remote (DOCKER_HOST={remote}): the GPUs here are not the engine's"
        return fp.nvidia_section(
            None,
            p2p=None,
            topology=None,
            toolkit=fp.unknown(why),
            runtimes=_engine_runtimes(),
            cdi=fp.unknown(why),
            smi_topo=fp.unknown(why),
            why_no_nvml=why,
        )
    opened = None
    if gpus is None:
        opened = gpus = open_nvml(lib)
    try:
        if gpus is None:
            why = nvml_missing(lib) or "NVML is not available here"
            inventory, p2p, topology = read_inventory(lib), None, None
        else:
            why = None
            inventory, p2p, topology = gpus.inventory(), gpus.p2p_matrix(), gpus.topology()
    finally:
        if opened is not None:
            opened.close()
    smi, smi_why = _run_tool(["nvidia-smi", "topo", "-m"])
    return fp.nvidia_section(
        inventory,
        p2p=p2p,
        topology=topology,
        toolkit=_toolkit(),
        runtimes=_engine_runtimes(),
        cdi=_cdi_specs(),
        smi_topo=smi if smi else fp.unknown(smi_why or "no output"),
        why_no_nvml=why,
    )


# -- the image -----------------------------------------------------------------------------------


def _manifest_data(name: str) -> Any:
    from kit.images.manifest import load_manifest

    try:
        return load_manifest(name).model_dump(mode="json")
    except KitError as exc:
        return fp.unknown(f"images/{name}.toml is not in this kit ({exc.one_line()})")


def lock_section(lock_text: str | None, why: str, source: str) -> Any:
    import hashlib

    if lock_text is None:
        return fp.unknown(why)
    packages = parse_lock(lock_text)
    return {
        "from": source,
        "sha256": hashlib.sha256(lock_text.encode()).hexdigest(),
        "count": len(packages),
        "packages": {key: p.version for key, p in sorted(packages.items())},
    }


def _read_from_container(container: Any, path: str) -> str | None:
    try:
        chunks, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            member = next((m for m in tar.getmembers() if m.isfile()), None)
            handle = tar.extractfile(member) if member is not None else None
            return handle.read().decode("utf-8", "replace") if handle is not None else None
    except Exception:
        return None


def image_facts(
    *, name: str, tag: str, image: Any | None, lock_text: str | None, lock_why: str, lock_from: str
) -> tuple[dict, dict]:
    """(image section, versions section) from a docker Image (or None) and its lock text."""
    if image is None:
        why = f"image {tag} is not here to inspect"
        image_id: Any = fp.unknown(why)
        digest: Any = fp.unknown(why)
        labels: dict = {}
    else:
        attrs = image.attrs
        image_id = image.id
        digests = attrs.get("RepoDigests") or []
        digest = digests[0] if digests else fp.unknown("built here and never pushed: no registry digest")
        labels = dict((attrs.get("Config") or {}).get("Labels") or {})
    kit_labels = {k: v for k, v in sorted(labels.items()) if k.startswith(("io.kit.", "org.opencontainers."))}
    section = {
        "name": name,
        "tag": tag,
        "id": image_id,
        "digest": digest,
        "labels": kit_labels,
        "manifest": _manifest_data(name),
        "lock": lock_section(lock_text, lock_why, lock_from),
    }
    if lock_text is not None:
        versions = fp.versions_from_lock(parse_lock(lock_text), labels, lock_from)
    elif labels:
        versions = fp.versions_from_pins(
            fp.pins_from_labels(labels), labels.get("io.kit.pin.python"), "the image's io.kit.pin.* labels"
        )
    else:
        versions = fp.versions_unknown(f"neither the image's lock nor its labels could be read ({lock_why})")
    return section, versions


def local_image_id(ref: str) -> str | None:
    """The id of the image REF names here, or None (no such image). No engine: EnvironmentProblem."""
    from docker.errors import ImageNotFound, NotFound

    from kit.runtime.engine import client, translated

    with translated(f"looking up image {ref}"):
        try:
            return client().images.get(ref).id
        except (ImageNotFound, NotFound):
            return None


def _docker_image(ref: str) -> Any | None:
    from docker.errors import ImageNotFound

    from kit.runtime.engine import client

    try:
        return client().images.get(ref)
    except ImageNotFound:
        return None
    except Exception:
        return None


def image_facts_of_container(container: Any, name: str) -> tuple[dict, dict, str | None]:
    """The container's own image (by id), and the lock read from the container's filesystem."""
    image_id = container.attrs.get("Image") or ""
    tag = (container.attrs.get("Config") or {}).get("Image") or image_id
    image = _docker_image(image_id) if image_id else None
    lock = _read_from_container(container, LOCK_PATH)
    section, versions = image_facts(
        name=name,
        tag=tag,
        image=image,
        lock_text=lock,
        lock_why=f"{LOCK_PATH} could not be read from container {container.name}",
        lock_from=f"{LOCK_PATH} in container {container.name}",
    )
    if image is None and image_id:
        section["id"] = image_id  # the container names it even when the image was removed since
    return section, versions, lock


def image_facts_of_ref(ref: str, name: str, *, tag: str | None = None) -> tuple[dict, dict, str | None]:
    """A local image by tag or id, its lock read without starting it (kit repro's side of a diff)."""
    from kit.images.inspect import read_file

    image = _docker_image(ref)
    lock = None
    why = f"image {ref} is not here"
    if image is not None:
        try:
            lock = read_file(image.id, LOCK_PATH).decode("utf-8", "replace")
        except KitError as exc:
            why = exc.one_line()
    section, versions = image_facts(
        name=name,
        tag=tag or ref,
        image=image,
        lock_text=lock,
        lock_why=why,
        lock_from=f"{LOCK_PATH} in image {ref}",
    )
    return section, versions, lock


def image_facts_of_manifest(name: str | None, why: str) -> tuple[dict, dict]:
    """From a manifest alone (a pasted log): pins, never the image that ran."""
    from kit.images.manifest import load_manifest

    if name is None:
        unknown = fp.unknown(why)
        image = {"name": unknown, "tag": unknown, "id": unknown, "digest": unknown, "labels": {}}
        return image | {"manifest": unknown, "lock": unknown}, fp.versions_unknown(why)
    try:
        manifest = load_manifest(name)
    except KitError as exc:
        unknown = fp.unknown(exc.one_line())
        return {
            "name": name,
            "tag": unknown,
            "id": unknown,
            "digest": unknown,
            "labels": {},
        }, fp.versions_unknown(exc.one_line())
    image = {
        "name": name,
        "tag": manifest.tag,
        "id": fp.unknown(why),
        "digest": fp.unknown(why),
        "labels": {},
        "manifest": manifest.model_dump(mode="json"),
        "lock": fp.unknown(why),
    }
    source = f"images/{name}.toml pins (the image that ran was not inspected)"
    versions = fp.versions_from_pins(manifest.pins.model_dump(), manifest.base.python, source)
    return image, versions


# -- the launch ----------------------------------------------------------------------------------


def env_list(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, _, value = item.partition("=")
        out[key] = value
    return out


def container_settings(attrs: Mapping[str, Any], image_labels: Mapping[str, str] | None = None) -> dict:
    """The container's own settings; labels it inherited unchanged from its image are left out."""
    inherited = dict(image_labels or {})
    host = attrs.get("HostConfig") or {}
    config = attrs.get("Config") or {}
    gpus = 0  # -1: all of the host's GPUs
    for request in host.get("DeviceRequests") or []:
        if not any("gpu" in caps for caps in (request.get("Capabilities") or [])):
            continue
        count = int(request.get("Count") or 0) or len(request.get("DeviceIDs") or [])
        if count == -1:
            gpus = -1
            break
        gpus += count
    return {
        "name": (attrs.get("Name") or "").lstrip("/"),
        "image_ref": config.get("Image"),
        "shm_size": host.get("ShmSize"),
        "ipc_mode": host.get("IpcMode"),
        "ulimits": {u.get("Name"): u.get("Hard") for u in host.get("Ulimits") or []},
        "cap_add": sorted(host.get("CapAdd") or []),
        "gpus": gpus,
        "restart_policy": (host.get("RestartPolicy") or {}).get("Name") or "no",
        "labels": {
            k: v
            for k, v in sorted((config.get("Labels") or {}).items())
            if k.startswith("io.kit.") and inherited.get(k) != v
        },
    }


def spec_settings(spec: LaunchSpec) -> dict:
    """What kit up would give the container, for launches with no container to inspect."""
    return {
        "name": None,
        "image_ref": spec.image_ref,
        "shm_size": spec.shm_size,
        "ipc_mode": "host" if spec.ipc_host else None,
        "ulimits": dict(spec.ulimits),
        "cap_add": sorted(spec.cap_add),
        "gpus": spec.gpus,
        "restart_policy": "no",
        "labels": {},
    }


def _catalog_fields(spec: LaunchSpec) -> dict:
    """What a launch section takes from the catalog, whether the argv came from a container or not."""
    return {
        "target": spec.target,
        "profile": spec.profile,
        "model": spec.model,
        "dialect": spec.dialect,
        "device": spec.device,
        "ranks": spec.ranks,
        "overrides": fp.overrides_of(spec.notes),
        "port": spec.port,
    }


def launch_of_container(
    container: Any,
    spec: LaunchSpec,
    limits: Any,
    image_env: list[str] | None,
    image_labels: Mapping[str, str] | None = None,
) -> dict:
    """The launch as the container really ran it: its command and environment, not the catalog's."""
    attrs = container.attrs
    config = attrs.get("Config") or {}
    command = list(config.get("Entrypoint") or []) + list(config.get("Cmd") or [])
    defaults = env_list(image_env)
    env = {k: v for k, v in env_list(config.get("Env")).items() if defaults.get(k) != v}
    ours = list(spec.argv)
    if command[-len(ours) :] == ours:
        argv, argv_from = (
            ours,
            f"container {container.name}'s command (the catalog's launch of {spec.target})",
        )
    else:
        argv = command
        argv_from = f"container {container.name}'s command (not the catalog's launch of {spec.target})"
    return fp.launch_section(
        **_catalog_fields(spec),
        argv=argv,
        env=env,
        container=container_settings(attrs, image_labels),
        limits=fp.limits_data(limits),
        argv_from=argv_from,
        catalog_argv=None if argv == ours else ours,
    )


def launch_of_spec(spec: LaunchSpec, limits: Any, runtime_env: Mapping[str, str], argv_from: str) -> dict:
    return fp.launch_section(
        **_catalog_fields(spec),
        argv=list(spec.argv),
        env={**spec.env, **runtime_env},
        container=spec_settings(spec),
        limits=fp.limits_data(limits) if limits is not None else fp.unknown("no limits were applied"),
        argv_from=argv_from,
    )


# -- whole fingerprints --------------------------------------------------------------------------


def fingerprint_of_container(
    container: Any, spec: LaunchSpec, limits: Any, *, gpus: NvmlGpus | None, by: str
) -> tuple[dict, str | None]:
    """(fingerprint, lock text) of a server container and the host it runs on."""
    image, versions, lock = image_facts_of_container(container, spec.image)
    image_env, image_labels = None, None
    docker_image = _docker_image(container.attrs.get("Image") or "")
    if docker_image is not None:
        image_env = (docker_image.attrs.get("Config") or {}).get("Env")
        image_labels = (docker_image.attrs.get("Config") or {}).get("Labels")
    return (
        {
            "format": fp.FORMAT,
            "kit": kit_section(),
            "made": made(by),
            "image": image,
            "versions": versions,
            "host": host_facts(),
            "nvidia": nvidia_facts(gpus),
            "launch": launch_of_container(container, spec, limits, image_env, image_labels),
        },
        lock,
    )


def fingerprint_of_replay(spec: LaunchSpec, limits: Any, *, gpus: NvmlGpus | None, scenario: str) -> dict:
    """A replayed scenario: the launch and its (fake) GPUs are known; no image or host ran it."""
    why = f"a replayed scenario ({scenario}): no container ran"
    image, versions = image_facts_of_manifest(spec.image, why)
    host_why = f"a replayed scenario ({scenario}): no host ran it"
    return {
        "format": fp.FORMAT,
        "kit": kit_section(),
        "made": made(f"scenario replay {scenario}"),
        "image": image,
        "versions": versions,
        "host": {k: fp.unknown(host_why) for k in ("kernel", "os", "docker_engine", "compose")},
        "nvidia": fp.nvidia_section(
            gpus.inventory() if gpus is not None else None,
            p2p=gpus.p2p_matrix() if gpus is not None else None,
            topology=gpus.topology() if gpus is not None else None,
            toolkit=fp.unknown(host_why),
            runtimes=fp.unknown(host_why),
            cdi=fp.unknown(host_why),
            smi_topo=fp.unknown(host_why),
            why_no_nvml=None if gpus is not None else f"{host_why}; it has no GPUs",
        ),
        "launch": launch_of_spec(spec, limits, {}, f"the catalog's launch of {spec.target} (replayed)"),
    }


def fingerprint_of_log(target: str, image: str | None, nccl_from_log: str | None) -> dict:
    """A pasted log: the target's catalog launch is known, what ran it is not."""
    from kit.launch import resolve

    why = "made from a pasted log: the machine and container that wrote it were not inspected"
    image_section, versions = image_facts_of_manifest(
        image, why if image else "made from a pasted log without --image: the image is not known"
    )
    if nccl_from_log:
        versions["nccl"] = f"{nccl_from_log} (from the log)"
    spec = resolve(target, image=image)
    if image is None:
        image_section["name"] = fp.unknown(f"not given; {target}'s own image is {spec.image}")
    unknown = fp.unknown(why)
    launch = fp.launch_section(
        target=target,
        profile=spec.profile,
        model=spec.model,
        dialect=spec.dialect,
        device=spec.device,
        ranks=spec.ranks,
        overrides=unknown,
        argv=unknown,
        env=unknown,
        container=unknown,
        limits=fp.limits_data(_limits(spec)),
        argv_from=why,
        port=spec.port,
        catalog_argv=list(spec.argv),
    )
    return {
        "format": fp.FORMAT,
        "kit": kit_section(),
        "made": made("kit bundle create --from-log"),
        "image": image_section,
        "versions": versions,
        "host": {k: unknown for k in ("kernel", "os", "docker_engine", "compose")},
        "nvidia": fp.nvidia_section(
            None,
            p2p=None,
            topology=None,
            toolkit=unknown,
            runtimes=unknown,
            cdi=unknown,
            smi_topo=unknown,
            why_no_nvml=why,
        ),
        "launch": launch,
    }


def _limits(spec: LaunchSpec) -> Any:
    from kit.startup.limits import limits_from_spec

    return limits_from_spec(spec)
