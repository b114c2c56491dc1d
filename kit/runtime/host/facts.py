"""Everything the kit knows about this host, as one record read once: `read_host(...) -> HostFacts`.

Each part records why it could not be read (no driver, no engine, lspci missing, not root) instead
of raising: doctor, fingerprints and a launch must run anywhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.proxyenv import PROXY_VARIABLES, redact
from kit.runtime.client_config import read_client_proxy_env
from kit.runtime.host.cdi import CdiAnswer, cdi_answer, read_cdi_specs
from kit.runtime.host.engine import EngineFacts, engine_is_local, read_engine
from kit.runtime.host.gpus import GpuPlan, gpu_plan
from kit.runtime.host.model_cache import ModelCache, scan_model_cache
from kit.runtime.host.pci import IommuState, PciDevice, nvml_bdf, read_gpu_paths, read_iommu, read_lspci
from kit.runtime.host.system import (
    ToolFacts,
    read_disk,
    read_memlock,
    read_port,
    read_shm,
    read_tools,
)
from kit.runtime.nvml import GpuInventory, open_nvml, read_inventory


@dataclass(frozen=True)
class NvmlFacts:
    inventory: GpuInventory
    usage: tuple[tuple[int, int, int | None, int], ...] = ()
    """(index, memory used, utilisation %, processes) per answering device."""
    p2p: dict[str, dict[str, str]] | None = None
    topology: dict[str, dict[str, str]] | None = None


@dataclass(frozen=True)
class HostFacts:
    nvml: NvmlFacts
    engine: EngineFacts
    cdi: CdiAnswer | None = None
    """The engine's CDI answer (None: not read; cdi_of() derives it from `engine` alone)."""
    tools: ToolFacts = field(default_factory=ToolFacts)
    image_present: bool | None = None
    """The named image is in the engine; None: no image named, or the engine did not answer."""
    lspci: dict[str, PciDevice] | None = None
    lspci_error: str | None = None
    gpu_paths: dict[str, list[str]] = field(default_factory=dict)
    """GPU BDF -> the bridges above it (from sysfs)."""
    iommu: IommuState | None = None
    shm_total: int | None = None
    shm_free: int | None = None
    memlock: int | None = None
    """Soft RLIMIT_MEMLOCK in bytes; -1 unlimited."""
    disk_path: str | None = None
    disk_free: int | None = None
    model_cache: ModelCache | None = None
    port: int | None = None
    port_free: bool | None = None
    port_error: str | None = None
    client_proxy_env: dict[str, str] = field(default_factory=dict)
    """What the Docker client adds to every container (~/.docker/config.json proxies), redacted."""
    shell_proxy_env: dict[str, str] = field(default_factory=dict)
    """This shell's proxy variables (a server started from it inherits them), redacted."""

    @property
    def cdi_answer(self) -> CdiAnswer:
        return self.cdi if self.cdi is not None else cdi_answer(self.engine)

    def gpu_plan(self, *, count: int = -1, devices: tuple[str, ...] = ()) -> GpuPlan:
        return gpu_plan(self.engine, self.cdi_answer, count=count, devices=devices)


def read_nvml(lib: Any | None = None) -> NvmlFacts:
    """Inventory, per-device usage, P2P and topology; an empty inventory with the reason without NVML."""
    gpus = open_nvml(lib)
    if gpus is None:
        return NvmlFacts(read_inventory(lib))
    try:
        inventory = gpus.inventory()
        usage, p2p, topology = gpus.device_usage(), gpus.p2p_matrix(), gpus.topology()
        # A GPU lost while the matrices were read is a fact of this reading too.
        if gpus.lost != inventory.lost:
            inventory = GpuInventory(
                inventory.driver_version,
                inventory.cuda_driver_version,
                tuple(d for d in inventory.devices if d.index not in {g.index for g in gpus.lost}),
                inventory.error,
                gpus.lost,
            )
        return NvmlFacts(inventory, usage, p2p, topology)
    finally:
        gpus.close()


def read_cdi(engine: EngineFacts) -> CdiAnswer:
    """The CDI answer, with the spec files of the engine's own CDISpecDirs read from this host (not
    for a remote engine: its folders are on another machine)."""
    texts = read_cdi_specs(engine.cdi_spec_dirs or ()) if engine_is_local() else {}
    return cdi_answer(engine, texts)


def read_gpu_plan(*, count: int = -1, devices: tuple[str, ...] = ()) -> GpuPlan:
    """The GPU-access plan for a container on this engine (docker info asked once per process)."""
    engine = read_engine()
    return gpu_plan(engine, read_cdi(engine), count=count, devices=devices)


def read_image_present(engine: EngineFacts, image_ref: str | None) -> bool | None:
    if image_ref is None or not engine.answered:
        return None
    from kit.runtime.engine import image_exists

    try:
        return image_exists(image_ref)
    except Exception:  # the engine stopped answering between info and this: unknown, not absent
        return None


def read_host(
    *,
    image_ref: str | None = None,
    hf_cache: str | None = None,
    hf_repo: str | None = None,
    hf_revision: str | None = None,
    port: int | None = None,
    nvml_lib: Any | None = None,
    pci: bool = True,
    smi: bool = False,
) -> HostFacts:
    """This host, once. pci=False skips lspci/sysfs (fingerprints); smi=True runs nvidia-smi topo -m."""
    nvml = read_nvml(nvml_lib)
    engine = read_engine()
    gpu_bdfs = [b for d in nvml.inventory.devices if (b := nvml_bdf(d.pci_bus_id))]
    lspci, lspci_error = read_lspci() if pci else (None, "not read")
    disk_path, disk_free = read_disk(hf_cache) if hf_cache else (None, None)
    cache = scan_model_cache(Path(hf_cache) / "hub", hf_repo, hf_revision) if hf_cache and hf_repo else None
    port_free, port_error = read_port(port) if port else (None, None)
    shm_total, shm_free = read_shm()
    return HostFacts(
        nvml=nvml,
        engine=engine,
        cdi=read_cdi(engine),
        tools=read_tools(smi=smi, compose=False),
        image_present=read_image_present(engine, image_ref),
        lspci=lspci,
        lspci_error=lspci_error,
        gpu_paths=read_gpu_paths(gpu_bdfs) if pci else {},
        iommu=read_iommu(gpu_bdfs) if pci else None,
        shm_total=shm_total,
        shm_free=shm_free,
        memlock=read_memlock(),
        disk_path=disk_path,
        disk_free=disk_free,
        model_cache=cache,
        port=port,
        port_free=port_free,
        port_error=port_error,
        client_proxy_env=_redacted(read_client_proxy_env()),
        shell_proxy_env=_redacted({k: v for k in PROXY_ENV_NAMES if (v := os.environ.get(k))}),
    )


def _redacted(env: dict[str, str]) -> dict[str, str]:
    """Proxy variables without the user:password a proxy URL may carry (host facts are recorded)."""
    return {name: redact(value) for name, value in env.items()}


PROXY_ENV_NAMES = (*PROXY_VARIABLES, "no_proxy", "NO_PROXY")
