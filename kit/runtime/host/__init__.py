"""Host facts: what this machine and its Docker engine offer, read once, and pure functions over them.

Doctor (kit/pivot/doctor*.py), fingerprints (kit/diagnose/facts.py), `kit image verify`'s GPU-access
plan, `kit up`, preflight and the renders all read the host through this package, so they give one
answer (one CDI answer, one GPU plan, one engine error).

Read (each returns data and never raises for a missing fact; the reason is recorded instead):

    read_engine() -> EngineFacts          docker info + version, once per process (engine.py);
                                          an engine failure is EngineFacts.error, nothing else
    read_cdi(engine) -> CdiAnswer         the engine's CDISpecDirs and its nvidia.com/gpu devices
    read_nvml(lib=None) -> NvmlFacts      inventory (with lost GPUs), usage, P2P, topology (NVML)
    read_tools() -> ToolFacts             toolkit binaries/version, nvidia-smi topo -m, compose
    read_machine() -> MachineFacts        kernel, OS, arch, CPUs, memory, cgroup (no engine)
    read_host(image_ref=, hf_cache=, hf_repo=, hf_revision=, port=, nvml_lib=, pci=, smi=) -> HostFacts
                                          all of the above plus lspci/ACS, IOMMU, shm, memlock,
                                          disk, the HF cache, a port
    read_gpu_plan(count=, devices=) -> GpuPlan   how a container gets GPUs here, best way first

Pure (tests feed recorded `docker info` shapes and spec texts):

    engine_facts(info, version) -> EngineFacts
    cdi_answer(engine, {path: text}) -> CdiAnswer        .as_dict() is what doctor and bundles show
    gpu_plan(engine, cdi, count=, devices=) -> GpuPlan   GpuWay.sdk_kwargs() for the docker SDK
    choose_gpus(flag, count, target=) -> devices         --gpus, else KIT_GPUS
    with_gpus(spec, flag) -> LaunchSpec                  the same, recorded in spec.gpu_devices
    way_of_container(attrs) -> {'how', 'gpus', 'devices'}
    parse_lspci, upstream_bridges, nvml_bdf, iommu_mode, scan_model_cache

A bare-metal watcher needs only read_nvml, read_tools and the pci/system readers; none of them
needs the engine.
"""

from kit.runtime.host.cdi import CdiAnswer, cdi_answer, read_cdi_specs
from kit.runtime.host.engine import EngineFacts, engine_facts, engine_failed, engine_is_local, read_engine
from kit.runtime.host.facts import HostFacts, NvmlFacts, read_cdi, read_gpu_plan, read_host, read_nvml
from kit.runtime.host.gpus import (
    ENV_GPUS,
    GpuPlan,
    GpuWay,
    choose_gpus,
    gpu_plan,
    parse_gpus,
    way_of_container,
    with_gpus,
)
from kit.runtime.host.model_cache import ModelCache, scan_model_cache
from kit.runtime.host.pci import IommuState, PciDevice, iommu_mode, nvml_bdf, parse_lspci, upstream_bridges
from kit.runtime.host.system import MachineFacts, ToolFacts, read_machine, read_port, read_tools, run_tool

__all__ = [
    "ENV_GPUS",
    "CdiAnswer",
    "EngineFacts",
    "GpuPlan",
    "GpuWay",
    "HostFacts",
    "IommuState",
    "MachineFacts",
    "ModelCache",
    "NvmlFacts",
    "PciDevice",
    "ToolFacts",
    "cdi_answer",
    "choose_gpus",
    "engine_facts",
    "engine_failed",
    "engine_is_local",
    "gpu_plan",
    "iommu_mode",
    "nvml_bdf",
    "parse_gpus",
    "parse_lspci",
    "read_cdi",
    "read_cdi_specs",
    "read_engine",
    "read_gpu_plan",
    "read_host",
    "read_machine",
    "read_nvml",
    "read_port",
    "read_tools",
    "run_tool",
    "scan_model_cache",
    "upstream_bridges",
    "way_of_container",
    "with_gpus",
]
