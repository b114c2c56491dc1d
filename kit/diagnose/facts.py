"""Reads the facts a fingerprint holds: from the Docker engine, the container, its image, NVML and
the host's NVIDIA tools. The only impure part of fingerprints; kit/diagnose/fingerprint.py shapes them.

The host's side (engine, CDI, NVML, tools) comes from the one host-facts module, kit.runtime.host,
so a bundle says what `kit doctor` says. Every reader returns data and never raises for a missing
fact: what cannot be read becomes `{"unknown": "why"}`.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Mapping
from typing import Any

from kit.diagnose import fingerprint as fp
from kit.errors import KitError
from kit.images.lock import LOCK_PATH, parse_lock
from kit.images.manifest import LOCAL_BASE
from kit.runtime.host import (
    CdiAnswer,
    EngineFacts,
    ToolFacts,
    engine_is_local,
    read_cdi,
    read_engine,
    read_tools,
    way_of_container,
)
from kit.runtime.nvml import GpuInventory, NvmlGpus, nvml_missing, open_nvml, read_inventory
from kit.spec import LaunchSpec

# -- host ----------------------------------------------------------------------------------------


def host_section(engine: EngineFacts, tools: ToolFacts) -> dict:
    """Kernel, OS, engine and Compose versions, CPUs and memory, as the engine reports them. Pure."""
    compose = tools.compose_version or fp.unknown(tools.compose_why or "no answer")
    if not engine.answered:
        why = f"the Docker engine did not answer ({engine.error})"
        return fp.host_unknown(why) | {"compose": compose}
    memory = round((engine.memory_bytes or 0) / (1 << 30), 1)
    return {
        "kernel": engine.kernel or fp.unknown("not reported"),
        "os": engine.os or fp.unknown("not reported"),
        "arch": engine.arch or fp.unknown("not reported"),
        "cpus": engine.cpus or fp.unknown("not reported"),
        "memory_gib": memory or fp.unknown("not reported"),
        "cgroup": engine.cgroup or fp.unknown("not reported"),
        "docker_engine": engine.version or fp.unknown("not reported"),
        "docker_api": engine.api_version or fp.unknown("not reported"),
        "compose": compose,
    }


def host_facts() -> dict:
    return host_section(read_engine(), read_tools(toolkit=False, smi=False))


# -- NVIDIA --------------------------------------------------------------------------------------


def runtimes_section(engine: EngineFacts) -> Any:
    """The engine's runtimes and CDI folders (a list, empty when CDI is off). Pure."""
    if not engine.answered:
        return fp.unknown(f"the Docker engine did not answer ({engine.error})")
    return {
        "runtimes": list(engine.runtimes),
        "default": engine.default_runtime or fp.unknown("not reported"),
        "cdi_spec_dirs": list(engine.cdi_spec_dirs)
        if engine.cdi_spec_dirs is not None
        else fp.unknown("this engine does not report CDI (Engine < 25)"),
    }


def cdi_section(cdi: CdiAnswer) -> dict:
    """The one CDI answer (kit.runtime.host.cdi), as `kit doctor` shows it too."""
    return cdi.as_dict()


def lost_section(inventory: GpuInventory | None) -> list[dict]:
    """GPUs NVML lists that stopped answering (lost after a hang, reset required): a fact, not an error."""
    return [
        {"index": g.index, "error": g.error, "lost": g.lost} for g in (inventory.lost if inventory else ())
    ]


def nvidia_of(
    inventory: GpuInventory | None,
    *,
    p2p: Any,
    topology: Any,
    engine: EngineFacts,
    cdi: CdiAnswer,
    tools: ToolFacts,
    why_no_nvml: str | None,
) -> dict:
    """The fingerprint's nvidia section from the host's facts. Pure."""
    section = fp.nvidia_section(
        inventory,
        p2p=p2p,
        topology=topology,
        toolkit=tools.toolkit_version or fp.unknown(tools.toolkit_why or "not read"),
        runtimes=runtimes_section(engine),
        cdi=cdi_section(cdi),
        smi_topo=tools.smi_topo if tools.smi_topo else fp.unknown(tools.smi_topo_why or "no output"),
        why_no_nvml=why_no_nvml,
    )
    section["lost_gpus"] = lost_section(inventory)
    return section


def nvidia_facts(gpus: NvmlGpus | None = None, *, lib: Any | None = None) -> dict:
    """Driver, GPUs, P2P and topology through NVML (`gpus`, else opened here), and the host's tools."""
    engine = read_engine()
    if not engine_is_local():
        remote = os.environ.get("DOCKER_HOST")
        why = f"the engine is remote (DOCKER_HOST={remote}): the GPUs here are not the engine's"
        section = fp.nvidia_section(
            None,
            p2p=None,
            topology=None,
            toolkit=fp.unknown(why),
            runtimes=runtimes_section(engine),
            cdi=cdi_section(read_cdi(engine)),
            smi_topo=fp.unknown(why),
            why_no_nvml=why,
        )
        return section | {"lost_gpus": []}
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
    return nvidia_of(
        inventory,
        p2p=p2p,
        topology=topology,
        engine=engine,
        cdi=read_cdi(engine),
        tools=read_tools(compose=False),
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
    *,
    name: str,
    tag: str,
    image: Any | None,
    lock_text: str | None,
    lock_why: str,
    lock_from: str,
    image_why: str | None = None,
) -> tuple[dict, dict]:
    """(image section, versions section) from a docker Image (or None, with why) and its lock text."""
    if image is None:
        why = image_why or f"image {tag} is not here to inspect"
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
        # What the image was built on (kit.images.base.base_line, the io.kit.base label): with the
        # lock's sha256 below, what `kit repro` holds the local image to.
        "base": labels.get("io.kit.base")
        or fp.unknown("the image records no base (built before the kit did)"),
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


def _docker_image(ref: str) -> tuple[Any | None, str]:
    """(the image, "") or (None, why): not here, or the engine failed (said as an engine failure)."""
    from docker.errors import ImageNotFound, NotFound

    from kit.runtime.engine import client

    try:
        return client().images.get(ref), ""
    except (ImageNotFound, NotFound):
        return None, f"image {ref} is not here"
    except KitError as exc:
        return None, f"the Docker engine failed looking up image {ref}: {exc.one_line()}"
    except Exception as exc:
        return None, f"the Docker engine failed looking up image {ref} ({type(exc).__name__}: {exc})"


def image_facts_of_container(container: Any, name: str) -> tuple[dict, dict, str | None]:
    """The container's own image (by id), and the lock read from the container's filesystem."""
    image_id = container.attrs.get("Image") or ""
    tag = (container.attrs.get("Config") or {}).get("Image") or image_id
    image, image_why = _docker_image(image_id) if image_id else (None, "the container names no image")
    lock = _read_from_container(container, LOCK_PATH)
    section, versions = image_facts(
        name=name,
        tag=tag,
        image=image,
        lock_text=lock,
        lock_why=f"{LOCK_PATH} could not be read from container {container.name}",
        lock_from=f"{LOCK_PATH} in container {container.name}",
        image_why=image_why,
    )
    if image is None and image_id:
        section["id"] = image_id  # the container names it even when the image was removed since
    return section, versions, lock


def image_defaults(container: Any) -> tuple[list[str] | None, dict | None]:
    """(environment, labels) the container's image sets: what the container did not choose itself."""
    image, _ = _docker_image(container.attrs.get("Image") or "")
    if image is None:
        return None, None
    config = image.attrs.get("Config") or {}
    return config.get("Env"), config.get("Labels")


def image_facts_of_ref(ref: str, name: str, *, tag: str | None = None) -> tuple[dict, dict, str | None]:
    """A local image by tag or id, its lock read without starting it (kit repro's side of a diff)."""
    from kit.images.inspect import read_file

    image, why = _docker_image(ref)
    lock = None
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
        image_why=why if image is None else None,
    )
    return section, versions, lock


def image_facts_of_manifest(name: str | None, why: str) -> tuple[dict, dict]:
    """From a manifest alone (a pasted log): pins, never the image that ran."""
    from kit.images.manifest import load_manifest

    if name is None:
        unknown = fp.unknown(why)
        image = {
            "name": unknown,
            "tag": unknown,
            "id": unknown,
            "digest": unknown,
            "base": unknown,
            "labels": {},
        }
        return image | {"manifest": unknown, "lock": unknown}, fp.versions_unknown(why)
    try:
        manifest = load_manifest(name)
    except KitError as exc:
        unknown = fp.unknown(exc.one_line())
        image = {
            "name": name,
            "tag": unknown,
            "id": unknown,
            "digest": unknown,
            "base": unknown,
            "labels": {},
        }
        return image | {"manifest": unknown, "lock": unknown}, fp.versions_unknown(exc.one_line())
    image = {
        "name": name,
        "tag": manifest.tag,
        "id": fp.unknown(why),
        "digest": fp.unknown(why),
        # The base the manifest pins (a digest), never what an image was built on: none was inspected.
        "base": f"{manifest.base.image}@{manifest.base.digest} (the manifest's pin)"
        if manifest.base.digest and manifest.base.digest != LOCAL_BASE
        else fp.unknown(f"{why}; images/{name}.toml pins no base digest"),
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
    gpu = way_of_container(attrs)  # gpus -1: all of the host's GPUs
    return {
        "name": (attrs.get("Name") or "").lstrip("/"),
        "image_ref": config.get("Image"),
        "shm_size": host.get("ShmSize"),
        "ipc_mode": host.get("IpcMode"),
        "ulimits": {u.get("Name"): u.get("Hard") for u in host.get("Ulimits") or []},
        "cap_add": sorted(host.get("CapAdd") or []),
        "gpus": gpu["gpus"],
        "gpu_access": gpu["how"],
        "gpu_devices": gpu["devices"],
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
        "gpu_access": None,
        "gpu_devices": list(spec.gpu_devices),
        "restart_policy": "no",
        "labels": {},
    }


def catalog_fields(spec: LaunchSpec) -> dict:
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


def spec_launch(spec: LaunchSpec, runtime_env: Mapping[str, str], argv_from: str) -> fp.Launch:
    """The catalog's launch of SPEC, for launches with no container to inspect (a replay, kit repro)."""
    return fp.Launch(
        catalog_fields(spec),
        argv=list(spec.argv),
        env={**spec.env, **runtime_env},
        settings=spec_settings(spec),
        argv_from=argv_from,
    )


def launch_of_spec(spec: LaunchSpec, limits: Any, runtime_env: Mapping[str, str], argv_from: str) -> dict:
    return fp.launch_of(spec_launch(spec, runtime_env, argv_from), limits)
