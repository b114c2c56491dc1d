"""The compile-cache volume (kit/runtime/compile_cache.py) as data: what it holds, who uses it, and
removing it when nothing does.

    ensure_volume()                # created with Compose's labels before a server mounts it
    state = cache_state()          # CacheState: exists, bytes per cache, containers using it
    cleared = clear_cache()        # CacheCleared; CheckFailed (exit 1) while a container uses it

Sizes come from the volume's folder on this host when it can be read (a local engine, as root),
else from the engine's `docker system df` figure for the whole volume.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from docker.errors import NotFound

from kit.errors import CheckFailed, KitError
from kit.runtime.compile_cache import COMPOSE_LABELS, COMPOSE_PROJECT, ENV, MOUNT, volume_name
from kit.runtime.engine import LABEL_MANAGED, client, translated


@dataclass(frozen=True)
class CacheUser:
    name: str
    status: str
    """The container's state: running, exited, created, ..."""
    kit: bool
    """Started by the kit (io.kit.managed label)."""


@dataclass(frozen=True)
class CacheState:
    volume: str
    exists: bool
    mount: str = MOUNT
    """Where every server and preflight container sees it."""
    env: dict[str, str] = field(default_factory=lambda: dict(ENV))
    """The variables pointing each library into it."""
    created: str | None = None
    size_bytes: int | None = None
    caches: dict[str, int] = field(default_factory=dict)
    """Bytes per folder of the volume (triton, inductor, flashinfer, ...), when the host can read it."""
    size_from: str | None = None
    used_by: tuple[CacheUser, ...] = ()


@dataclass(frozen=True)
class CacheCleared:
    volume: str
    removed: bool
    """False when there was no volume to remove."""
    freed_bytes: int | None = None


def folder_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += (Path(root) / name).lstat().st_size
            except OSError:
                continue
    return total


def _sizes(mountpoint: str | None) -> tuple[dict[str, int], int | None]:
    if not mountpoint:
        return {}, None
    root = Path(mountpoint)
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return {}, None
    caches = {
        entry.name: folder_bytes(entry) if entry.is_dir() else entry.lstat().st_size for entry in entries
    }
    return caches, sum(caches.values())


def _df_size(name: str) -> int | None:
    try:
        volumes = client().df().get("Volumes") or []
    except Exception:  # df is slow or refused on some engines: the size stays unknown
        return None
    for volume in volumes:
        if volume.get("Name") == name:
            size = (volume.get("UsageData") or {}).get("Size")
            return int(size) if isinstance(size, int) and size >= 0 else None
    return None


def ensure_volume() -> str:
    """The compile-cache volume, created now if missing, labelled as compose.yaml's project would
    label it: `kit up` then `docker compose up` share it without Compose's warning (an engine that
    creates it on first mount labels nothing). A volume that is there is left as it is."""
    name = volume_name()
    with translated(f"creating volume {name}"):
        try:
            client().volumes.get(name)
        except NotFound:
            project, volume = COMPOSE_LABELS
            client().volumes.create(name=name, labels={project: COMPOSE_PROJECT, volume: name})
    return name


def users(name: str) -> tuple[CacheUser, ...]:
    """Every container (running or not) that mounts the volume."""
    with translated(f"listing the containers that use volume {name}"):
        found = client().containers.list(all=True, filters={"volume": name})
    return tuple(CacheUser(c.name, c.status, LABEL_MANAGED in (c.labels or {})) for c in found)


def cache_state() -> CacheState:
    name = volume_name()
    with translated(f"looking up volume {name}"):
        try:
            volume = client().volumes.get(name)
        except NotFound:
            return CacheState(name, False)
    attrs = volume.attrs or {}
    caches, size = _sizes(attrs.get("Mountpoint"))
    size_from = "the volume's folder on this host" if size is not None else None
    if size is None:
        size = _df_size(name)
        size_from = "docker system df" if size is not None else None
    return CacheState(
        name,
        True,
        created=attrs.get("CreatedAt"),
        size_bytes=size,
        caches=caches,
        size_from=size_from,
        used_by=users(name),
    )


def clear_cache() -> CacheCleared:
    """Remove the volume (the next start compiles again and fills a new one). Refused while any
    container mounts it: a running server reads and writes it, and the engine keeps a volume that a
    stopped container still names."""
    state = cache_state()
    if not state.exists:
        return CacheCleared(state.volume, False, 0)
    if state.used_by:
        running = [u for u in state.used_by if u.status == "running"]
        shown = ", ".join(f"{u.name} ({u.status})" for u in (running or state.used_by)[:4])
        raise CheckFailed(
            f"volume {state.volume} is in use by {shown}: not clearing it",
            hint="stop them first (kit down NAME, or kit down --all for the kit's own); "
            "a running server writes its compiled kernels there",
        )
    try:
        with translated(f"removing volume {state.volume}"):
            client().volumes.get(state.volume).remove()
    except KitError as exc:
        raise CheckFailed(exc.message, hint="see 'kit cache show' for who uses it") from exc
    return CacheCleared(state.volume, True, state.size_bytes)
