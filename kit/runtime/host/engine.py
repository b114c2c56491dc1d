"""The Docker engine as `docker info` and `docker version` describe it: one record, read once.

`engine_facts(info, version)` is pure (recorded `docker info` shapes in, `EngineFacts` out);
`read_engine()` asks the engine once per process. An engine that does not answer, or answers ping
but fails `info`, is recorded as that (`error`), never as an empty engine or a missing image.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse


@dataclass(frozen=True)
class EngineFacts:
    error: str | None = None
    """Why the engine could not be read (no engine, `info` failed); None when it answered."""
    version: str | None = None
    """ServerVersion, e.g. '28.3.2' or '20.10.24+dfsg1'."""
    api_version: str | None = None
    kernel: str | None = None
    os: str | None = None
    arch: str | None = None
    cpus: int | None = None
    memory_bytes: int | None = None
    cgroup: str | None = None
    runtimes: tuple[str, ...] = ()
    """Registered runtimes, sorted ('nvidia' after `nvidia-ctk runtime configure`)."""
    default_runtime: str | None = None
    cdi_spec_dirs: tuple[str, ...] | None = None
    """Where the engine reads CDI specs. None: the engine does not report CDI (Engine < 25);
    (): CDI is off (Engine API: 'an empty list indicates that CDI device injection is disabled')."""
    discovered_devices: tuple[str, ...] | None = None
    """CDI device names the engine found (DiscoveredDevices, Engine 28.2+); None: not listed."""

    @property
    def answered(self) -> bool:
        return self.error is None

    @property
    def nvidia_runtime(self) -> bool:
        return "nvidia" in self.runtimes or self.default_runtime == "nvidia"


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def engine_facts(info: Mapping[str, Any], version: Mapping[str, Any] | None = None) -> EngineFacts:
    """`docker info` (and `docker version`) as the kit reads them. Pure."""
    version = version or {}
    dirs = info.get("CDISpecDirs")
    devices = info.get("DiscoveredDevices")
    memory = info.get("MemTotal")
    return EngineFacts(
        version=_text(info.get("ServerVersion")) or _text(version.get("Version")),
        api_version=_text(version.get("ApiVersion")),
        kernel=_text(version.get("KernelVersion")) or _text(info.get("KernelVersion")),
        os=_text(info.get("OperatingSystem")),
        arch=_text(version.get("Arch")) or _text(info.get("Architecture")),
        cpus=int(info["NCPU"]) if info.get("NCPU") else None,
        memory_bytes=int(memory) if memory else None,
        cgroup=_text(info.get("CgroupVersion")),
        runtimes=tuple(sorted(info.get("Runtimes") or {})),
        default_runtime=_text(info.get("DefaultRuntime")),
        cdi_spec_dirs=None if dirs is None else tuple(str(d) for d in dirs),
        discovered_devices=None
        if devices is None
        else tuple(
            str(d.get("ID") or "") for d in devices if (d.get("Source") or "cdi") == "cdi" and d.get("ID")
        ),
    )


def engine_failed(why: str) -> EngineFacts:
    return EngineFacts(error=why)


@functools.cache
def read_engine() -> EngineFacts:
    """This process's engine, asked once (`read_engine.cache_clear()` to ask again)."""
    from kit.errors import KitError
    from kit.runtime.engine import client

    try:
        engine = client()
        info = engine.info()
    except KitError as exc:
        return engine_failed(exc.one_line())
    except Exception as exc:  # the engine answered ping but not info: say so, do not crash
        return engine_failed(f"the Docker engine did not answer 'docker info' ({type(exc).__name__}: {exc})")
    try:
        version = engine.version()
    except Exception:  # info is what matters; version only adds API version and arch
        version = {}
    return engine_facts(info, version)


def engine_is_local() -> bool:
    """Whether this host's files, tools and NVML describe the engine's host (DOCKER_HOST unset or local)."""
    host = os.environ.get("DOCKER_HOST", "")
    if not host or host.startswith(("unix://", "npipe://")):
        return True
    return urlparse(host).hostname in ("127.0.0.1", "localhost", "::1")
