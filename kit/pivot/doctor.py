"""`kit doctor [TARGET]`: the host checks that known hangs and crashes come back to, each with its fix.

    report = run_doctor("qwen-base")      # DoctorReport; checks in a fixed order, each
                                          # pass | warn | fail | not-checked (with why)

`evaluate(context, facts)` is pure: what the target needs (`DoctorContext`) and what the host has
(`kit.pivot.host.HostFacts`) in, checks out. Tests give it facts read through the fake NVML library
(kit/scenarios/fake_nvml.py) and captured lspci text; `run_doctor` reads the real host. A machine
without GPUs lists every check, says why the GPU ones could not run, and passes.

The report's JSON form is `DoctorReport`; its JSON Schema is docs/schema/doctor.json (a test keeps
the file equal to `DoctorReport.model_json_schema()`).
"""

from __future__ import annotations

import time
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kit.errors import ExitCode
from kit.pivot.host import HostFacts, nvml_bdf, read_host

SCHEMA_ID = "kit-doctor/1"
DATA_FILE = Path(__file__).resolve().parent / "doctor.toml"
Status = Literal["pass", "warn", "fail", "not-checked"]
CHECK_IDS = (
    "docker-engine",
    "image",
    "nvidia-driver",
    "container-toolkit",
    "gpu-count",
    "compute-capability",
    "gpu-busy",
    "p2p-topology",
    "pcie-acs",
    "iommu",
    "shm",
    "memlock",
    "disk",
    "model-cache",
    "port",
)
GiB = 1 << 30


class Check(BaseModel):
    """One host check."""

    model_config = ConfigDict(extra="forbid")

    id: Literal[CHECK_IDS] = Field(description="Stable identifier; the checks come in this order.")  # type: ignore[valid-type]
    title: str
    status: Status
    summary: str = Field(description="What was found, in one line.")
    why: str | None = Field(
        default=None, description="Why it matters (warn, fail) or why it could not run (not-checked)."
    )
    fix: str | None = Field(default=None, description="What to do about a warn or a fail.")
    details: dict[str, Any] = Field(default_factory=dict, description="What was read (matrices, paths).")


class DoctorReport(BaseModel):
    """`kit doctor --json`: every check, in a fixed order, and the exit code."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["kit-doctor/1"] = Field(default=SCHEMA_ID, description="This document's format.")
    target: str | None
    image: str | None
    device: Literal["cuda", "cpu"] | None
    checks: list[Check]
    counts: dict[Status, int] = Field(description="How many checks ended in each status.")
    ok: bool = Field(description="No check failed (warnings allowed).")
    exit_code: int = Field(description="0 when ok, 1 when a check failed.")
    seconds: float


@dataclass(frozen=True)
class DoctorContext:
    """What the target asks of the host; None fields mean 'no target says' (checks adapt)."""

    target: str | None = None
    image: str | None = None
    image_ref: str | None = None
    device: str | None = None
    gpus: int = 0
    image_cuda: str | None = None
    arch_list: tuple[str, ...] = ()
    hf_repo: str | None = None
    model_gib: float | None = None
    model_path: str | None = None
    hf_cache: str | None = None
    port: int | None = None
    ipc_host: bool = False
    shm_size: str | None = None
    memlock: int | None = None
    """The container's memlock ulimit from the profile (-1 unlimited), or None when it sets none."""


@cache
def _data() -> dict[str, Any]:
    return tomllib.loads(DATA_FILE.read_text(encoding="utf-8"))


def _version(text: str | None) -> tuple[int, ...]:
    return tuple(int(p) for p in (text or "").split(".") if p.isdigit())


def _gib(value: int | float | None) -> str:
    """Bytes for people: '23.5 GiB', '8 MiB'."""
    if value is None:
        return "?"
    for unit, scale in (("GiB", GiB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {unit}".replace(".0 ", " ")
    return f"{value:.0f} B"


def _size_bytes(text: str | None) -> int | None:
    """Docker's size strings ('2g', '512m', '64mb') in bytes."""
    if not text:
        return None
    number = "".join(c for c in text if c.isdigit())
    unit = text[len(number) :].lower().rstrip("b")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(unit)
    return int(number) * scale if number and scale else None


def _check(id: str, title: str, status: Status, summary: str, **rest: Any) -> Check:
    return Check(id=id, title=title, status=status, summary=summary, **rest)


class _Checks:
    """The checks, in CHECK_IDS order; each reads `ctx` and `facts` only."""

    def __init__(self, ctx: DoctorContext, facts: HostFacts):
        self.ctx = ctx
        self.facts = facts
        self.inventory = facts.nvml.inventory
        self.gpus = self.inventory.count
        self.cpu_target = ctx.device == "cpu"
        self.thresholds = _data()["thresholds"]

    def _no_gpus(self, id: str, title: str) -> Check | None:
        """The shared 'cannot run' answers of GPU checks: a CPU target, or no GPU here."""
        if self.cpu_target:
            return _check(id, title, "not-checked", "not needed", why=f"{self.ctx.target} runs on CPU")
        if not self.gpus:
            reason = self.inventory.error or "NVML sees no GPU"
            if self.ctx.device == "cuda" and id == "nvidia-driver":
                return _check(
                    id,
                    title,
                    "fail",
                    f"no NVIDIA GPU answers ({reason})",
                    why=f"{self.ctx.target} needs {self.ctx.gpus} GPU(s)",
                    fix="run it on the GPU host (or check the driver: nvidia-smi)",
                )
            if self.ctx.device == "cuda":
                return _check(id, title, "not-checked", "no NVIDIA GPU answers", why="see nvidia-driver")
            return _check(id, title, "not-checked", "no NVIDIA GPU here", why=reason)
        return None

    # -- engine and image ---------------------------------------------------------------------

    def docker_engine(self) -> Check:
        title = "Docker engine"
        docker = self.facts.docker
        if docker.error:
            return _check(
                "docker-engine",
                title,
                "fail",
                docker.error,
                why="every kit run starts a container",
                fix="start the engine (or run scripts/bootstrap as root on Debian/Ubuntu)",
            )
        return _check(
            "docker-engine",
            title,
            "pass",
            f"engine {docker.version}, runtimes: {', '.join(docker.runtimes) or 'none listed'}",
            details={"version": docker.version, "runtimes": list(docker.runtimes)},
        )

    def image(self) -> Check:
        title = "Image built"
        ctx, docker = self.ctx, self.facts.docker
        if ctx.image_ref is None:
            return _check("image", title, "not-checked", "no image named", why="no target or --image given")
        if docker.error:
            return _check("image", title, "not-checked", ctx.image_ref, why="no Docker engine answers")
        if docker.image_present:
            return _check("image", title, "pass", f"{ctx.image_ref} is built")
        return _check(
            "image",
            title,
            "warn",
            f"{ctx.image_ref} is not built",
            why="kit up, preflight and bisect run it",
            fix=f"kit image build {ctx.image}",
        )

    # -- NVIDIA ---------------------------------------------------------------------------------

    def nvidia_driver(self) -> Check:
        title = "NVIDIA driver"
        if (answer := self._no_gpus("nvidia-driver", title)) is not None:
            return answer
        inv, ctx = self.inventory, self.ctx
        summary = f"driver {inv.driver_version}, CUDA up to {inv.cuda_driver_version}"
        details = {
            "driver": inv.driver_version,
            "cuda_driver": inv.cuda_driver_version,
            "image_cuda": ctx.image_cuda,
        }
        if not ctx.image_cuda:
            return _check("nvidia-driver", title, "pass", summary, details=details)
        if _version(inv.cuda_driver_version) >= _version(ctx.image_cuda):
            return _check(
                "nvidia-driver",
                title,
                "pass",
                f"{summary}; the image needs CUDA {ctx.image_cuda}",
                details=details,
            )
        wanted = _data()["driver_for_cuda"].get(ctx.image_cuda)
        return _check(
            "nvidia-driver",
            title,
            "fail",
            f"{summary}; {ctx.image} needs CUDA {ctx.image_cuda}",
            why="the image's CUDA runtime refuses an older driver (cudaErrorInsufficientDriver)",
            fix=f"install an NVIDIA driver >= {wanted}"
            if wanted
            else f"install a driver for CUDA {ctx.image_cuda}",
            details=details,
        )

    def container_toolkit(self) -> Check:
        title = "NVIDIA container toolkit or CDI"
        if (answer := self._no_gpus("container-toolkit", title)) is not None:
            return answer
        docker, facts = self.facts.docker, self.facts
        details = {
            "runtimes": list(docker.runtimes),
            "cdi_specs": list(facts.cdi_specs),
            "binaries": list(facts.toolkit_binaries),
        }
        if docker.error:
            return _check(
                "container-toolkit",
                title,
                "not-checked",
                "engine not reachable",
                why=docker.error,
                details=details,
            )
        if "nvidia" in docker.runtimes:
            return _check(
                "container-toolkit", title, "pass", "the engine has the nvidia runtime", details=details
            )
        if facts.cdi_specs:
            return _check(
                "container-toolkit",
                title,
                "pass",
                f"CDI specs for nvidia.com/gpu: {', '.join(facts.cdi_specs)}",
                details=details,
            )
        return _check(
            "container-toolkit",
            title,
            "fail",
            "no nvidia runtime in the engine and no CDI spec for nvidia.com/gpu",
            why="containers cannot be given GPUs ('could not select device driver \"nvidia\"')",
            fix="install nvidia-container-toolkit, run 'nvidia-ctk runtime configure --runtime=docker', "
            "restart the engine",
            details=details,
        )

    def gpu_count(self) -> Check:
        title = "GPU count"
        if (answer := self._no_gpus("gpu-count", title)) is not None:
            return answer
        names = sorted({d.name for d in self.inventory.devices})
        summary = f"{self.gpus} GPU(s): {', '.join(names)}"
        details = {
            "devices": [
                {"index": d.index, "name": d.name, "bus": d.pci_bus_id} for d in self.inventory.devices
            ]
        }
        if self.ctx.gpus and self.gpus < self.ctx.gpus:
            return _check(
                "gpu-count",
                title,
                "fail",
                f"{summary}; {self.ctx.target} needs {self.ctx.gpus}",
                why="tensor parallelism needs one GPU per rank",
                fix="free or add GPUs, or lower tp (--set tp=N)",
                details=details,
            )
        return _check("gpu-count", title, "pass", summary, details=details)

    def compute_capability(self) -> Check:
        title = "Compute capability vs the image's arch list"
        if (answer := self._no_gpus("compute-capability", title)) is not None:
            return answer
        caps = sorted({d.compute_capability for d in self.inventory.devices})
        arches = self.ctx.arch_list
        details = {"capabilities": caps, "arch_list": list(arches)}
        if not arches:
            return _check(
                "compute-capability",
                title,
                "pass",
                f"capability {', '.join(caps)}",
                why="no image arch list to compare with (no CUDA image named)",
                details=details,
            )
        covered = {a.split("+")[0].rstrip("a") for a in arches}
        missing = [c for c in caps if c not in covered]
        if missing:
            return _check(
                "compute-capability",
                title,
                "fail",
                f"GPUs are sm_{missing[0].replace('.', '')}; "
                f"{self.ctx.image} is built for {';'.join(arches)}",
                why="kernels built for another architecture fail with 'no kernel image is available'",
                fix="use an image whose torch_cuda_arch_list includes the GPUs' capability",
                details=details,
            )
        return _check(
            "compute-capability",
            title,
            "pass",
            f"capability {', '.join(caps)} is in {';'.join(arches)}",
            details=details,
        )

    def gpu_busy(self) -> Check:
        title = "GPUs free (not busy, not wedged)"
        if (answer := self._no_gpus("gpu-busy", title)) is not None:
            return answer
        wedged, busy = [], []
        limit = self.thresholds["wedged_utilization_pct"]
        for index, used, util, processes in self.facts.nvml.usage:
            if util is not None and util >= limit and processes == 0:
                wedged.append(index)
            elif processes or used > self.thresholds["busy_memory_gib"] * GiB:
                busy.append(f"GPU {index}: {processes} process(es), {_gib(used)}")
        details = {
            "usage": [
                {"index": i, "memory_used_bytes": u, "utilization_pct": p, "processes": n}
                for i, u, p, n in self.facts.nvml.usage
            ]
        }
        if wedged:
            return _check(
                "gpu-busy",
                title,
                "fail",
                f"GPU {', '.join(map(str, wedged))} at 100 % utilisation with no process",
                why="a GPU left spinning by a hung collective stays busy until reset",
                fix=f"nvidia-smi --gpu-reset -i {wedged[0]} (or reboot)",
                details=details,
            )
        if busy:
            return _check(
                "gpu-busy",
                title,
                "warn",
                "; ".join(busy),
                why="another job's memory and kernels shrink the KV cache or fail the load",
                fix="stop it (see nvidia-smi; 'kit ps' lists the kit's own containers)",
                details=details,
            )
        return _check("gpu-busy", title, "pass", f"{self.gpus} GPU(s) idle", details=details)

    def p2p_topology(self) -> Check:
        title = "P2P status and topology (NVML)"
        if (answer := self._no_gpus("p2p-topology", title)) is not None:
            return answer
        if self.gpus < 2:
            return _check("p2p-topology", title, "not-checked", "one GPU", why="nothing to peer with")
        p2p, topology = self.facts.nvml.p2p, self.facts.nvml.topology
        details = {"p2p": p2p, "topology": topology}
        bad = sorted(
            {f"{i}->{j}: {status}" for i, row in p2p.items() for j, status in row.items() if status != "OK"}
        )
        paths = sorted({word for row in topology.values() for word in row.values()})
        through_cpu = [w for w in paths if w in ("PHB", "NODE", "SYS")]
        summary = f"paths {', '.join(paths)}"
        if bad:
            return _check(
                "p2p-topology",
                title,
                "warn",
                f"{summary}; P2P not available: {bad[0]}" + (f" (+{len(bad) - 1})" if len(bad) > 1 else ""),
                why="NCCL falls back to host shared memory there: slower, not a hang",
                fix="nothing required; check BIOS (Above 4G decoding, Resizable BAR) if P2P is expected",
                details=details,
            )
        note = (
            "; P2P crosses the CPU's root complex, where ACS and the IOMMU can break it (see pcie-acs, iommu)"
            if through_cpu
            else ""
        )
        return _check(
            "p2p-topology",
            title,
            "pass",
            f"{summary}; NVML reports P2P OK for every pair{note}",
            why="NVML's answer is not proof: kit preflight copies between every pair for real",
            details=details,
        )

    def pcie_acs(self) -> Check:
        title = "PCIe ACS on the GPUs' path"
        if (answer := self._no_gpus("pcie-acs", title)) is not None:
            return answer
        if self.gpus < 2:
            return _check("pcie-acs", title, "not-checked", "one GPU", why="no peer-to-peer traffic")
        facts = self.facts
        if facts.lspci is None:
            return _check("pcie-acs", title, "not-checked", "lspci unavailable", why=facts.lspci_error)
        bridges: set[str] = set()
        for device in self.inventory.devices:
            bdf = nvml_bdf(device.pci_bus_id)
            bridges.update(facts.gpu_paths.get(bdf or "", []))
        scope = "the GPUs' upstream bridges" if bridges else "every PCI bridge (GPU paths unreadable)"
        candidates = [facts.lspci[b] for b in sorted(bridges) if b in facts.lspci] or list(
            facts.lspci.values()
        )
        if any(d.access_denied for d in candidates) and not any(d.acs_control for d in candidates):
            return _check(
                "pcie-acs", title, "not-checked", "capabilities hidden", why="lspci shows them to root only"
            )
        redirecting = {d.bdf: list(d.redirecting) for d in candidates if d.redirecting}
        details = {"checked": [d.bdf for d in candidates], "redirecting": redirecting}
        if redirecting:
            first, flags = next(iter(redirecting.items()))
            return _check(
                "pcie-acs",
                title,
                "warn",
                f"ACS redirects P2P on {len(redirecting)} bridge(s) of {scope}: {first} {'+ '.join(flags)}+",
                why="ACS sends peer traffic through the root complex; NCCL's P2P all-reduce then hangs on "
                "RTX PRO 6000 hosts (NVIDIA/nccl#1999, #2079)",
                fix="disable ACS in the BIOS (or 'setpci -s BDF ECAP_ACS+6.w=0000' per bridge), or run with "
                "NCCL_P2P_DISABLE=1 (--set env.NCCL_P2P_DISABLE=1); confirm with kit preflight",
                details=details,
            )
        return _check("pcie-acs", title, "pass", f"no redirecting ACS bit on {scope}", details=details)

    def iommu(self) -> Check:
        title = "IOMMU mode"
        state = self.facts.iommu
        details = (
            {}
            if state is None
            else {
                "mode": state.mode,
                "cmdline": list(state.cmdline_flags),
                "units": list(state.units),
                "group_types": list(state.group_types),
            }
        )
        if state is None:
            return _check("iommu", title, "not-checked", "unreadable", why="no /proc/cmdline or /sys here")
        summary = f"{state.mode} ({state.why})"
        if (answer := self._no_gpus("iommu", title)) is not None:
            return answer.model_copy(update={"summary": f"{summary}; {answer.summary}", "details": details})
        if self.gpus < 2:
            return _check(
                "iommu",
                title,
                "not-checked",
                summary,
                why="one GPU: no peer-to-peer traffic",
                details=details,
            )
        if state.mode == "translated":
            return _check(
                "iommu",
                title,
                "warn",
                summary,
                why="a translating IOMMU redirects GPU peer traffic; reported as the NCCL P2P hang's cause "
                "(NVIDIA/nccl#2079)",
                fix="boot with iommu=pt (Intel: intel_iommu=on iommu=pt; AMD: amd_iommu=off or iommu=pt), "
                "or run with NCCL_P2P_DISABLE=1",
                details=details,
            )
        if state.mode == "unknown":
            return _check(
                "iommu", title, "not-checked", summary, why="group types unreadable", details=details
            )
        return _check("iommu", title, "pass", summary, details=details)

    # -- container limits, disk, model, port ------------------------------------------------------

    def shm(self) -> Check:
        title = "/dev/shm size"
        ctx, facts = self.ctx, self.facts
        minimum = self.thresholds["shm_min_gib"] * GiB
        if ctx.target and not ctx.ipc_host:
            size = _size_bytes(ctx.shm_size)
            if size is None:
                status: Status = "pass" if self.cpu_target else "warn"
                return _check(
                    "shm",
                    title,
                    status,
                    "the container gets Docker's default 64 MB /dev/shm",
                    why="NCCL's shared-memory transport needs more" if status == "warn" else None,
                    fix="set container.ipc_host = true or container.shm_size in the profile"
                    if status == "warn"
                    else None,
                )
            status = "pass" if size >= minimum or self.cpu_target else "warn"
            return _check(
                "shm",
                title,
                status,
                f"the container's /dev/shm is {ctx.shm_size} (profile)",
                fix=None
                if status == "pass"
                else f"container.shm_size of at least {self.thresholds['shm_min_gib']:g}g",
            )
        if facts.shm_total is None:
            return _check("shm", title, "not-checked", "no /dev/shm", why="statvfs failed")
        where = "host /dev/shm (the container shares the host's IPC)" if ctx.ipc_host else "host /dev/shm"
        summary = f"{where}: {_gib(facts.shm_total)}, {_gib(facts.shm_free)} free"
        if (facts.shm_free or 0) < minimum and (self.gpus or ctx.device == "cuda"):
            return _check(
                "shm",
                title,
                "warn",
                summary,
                why="NCCL WARN 'failed to extend /dev/shm' ends the start-up",
                fix="enlarge /dev/shm (mount -o remount,size=16G /dev/shm) or free it",
            )
        return _check("shm", title, "pass", summary)

    def memlock(self) -> Check:
        title = "Locked-memory limit"
        ctx, host = self.ctx, self.facts.memlock
        if self.cpu_target:
            return _check(
                "memlock", title, "not-checked", "not needed", why=f"{ctx.target} runs on CPU (no NCCL)"
            )
        if ctx.memlock == -1:
            return _check("memlock", title, "pass", "the container sets memlock=-1 (profile's ulimits)")
        shown = "unlimited" if host == -1 else ("unknown" if host is None else _gib(host))
        summary = f"this shell's memlock: {shown}" + (
            "; the profile sets none (the container gets the engine's default)" if ctx.target else ""
        )
        if host == -1 or not (self.gpus or ctx.device == "cuda"):
            aside = "" if host == -1 else " (matters for NCCL on GPUs only)"
            return _check("memlock", title, "pass", summary + aside)
        return _check(
            "memlock",
            title,
            "warn",
            summary,
            why="NCCL pins host memory; a small limit fails or slows its set-up",
            fix="container.ulimits = { memlock = -1 } in the profile (docker run --ulimit memlock=-1)",
        )

    def disk(self) -> Check:
        title = "Free disk for the model"
        ctx, facts = self.ctx, self.facts
        if not ctx.hf_repo or not ctx.hf_cache:
            why = "no target named" if not ctx.target else f"the model ({ctx.model_path}) is inside the image"
            return _check("disk", title, "not-checked", "nothing to download", why=why)
        if facts.disk_free is None:
            return _check(
                "disk", title, "not-checked", f"cannot read {facts.disk_path}", why="statvfs failed"
            )
        need = (ctx.model_gib or 0) * GiB
        have = facts.model_cache.bytes if facts.model_cache and facts.model_cache.present else 0
        if facts.model_cache and facts.model_cache.complete:
            return _check("disk", title, "pass", f"the model is already in {ctx.hf_cache}")
        missing = max(0.0, need - have) * (1 + self.thresholds["disk_margin"])
        summary = f"{_gib(facts.disk_free)} free at {facts.disk_path}; the model needs {_gib(missing)} more"
        if facts.disk_free < missing:
            return _check(
                "disk",
                title,
                "fail",
                summary,
                why="the download fails part-way and the load never starts",
                fix=f"free {_gib(missing - facts.disk_free)} or point container.hf_cache at a larger disk",
            )
        return _check("disk", title, "pass", summary)

    def model_cache(self) -> Check:
        title = "Model in the Hugging Face cache"
        ctx, cache_state = self.ctx, self.facts.model_cache
        if not ctx.hf_repo or not ctx.hf_cache or cache_state is None:
            why = "no target named" if not ctx.target else f"the model ({ctx.model_path}) is inside the image"
            return _check("model-cache", title, "not-checked", "no cache to look in", why=why)
        details = {
            "hub": cache_state.hub,
            "snapshot": cache_state.snapshot,
            "files": cache_state.files,
            "bytes": cache_state.bytes,
            "missing": list(cache_state.missing[:20]),
            "incomplete_blobs": cache_state.incomplete_blobs,
        }
        download = f"hf download {ctx.hf_repo} --cache-dir {cache_state.hub}"
        if cache_state.complete:
            return _check(
                "model-cache",
                title,
                "pass",
                f"{ctx.hf_repo} complete ({cache_state.files} files, {_gib(cache_state.bytes)})",
                details=details,
            )
        if not cache_state.present:
            return _check(
                "model-cache",
                title,
                "warn",
                f"{ctx.hf_repo} is not in {cache_state.hub}",
                why=f"the server downloads {ctx.model_gib:g} GiB first (minutes to hours of 'load')",
                fix=download,
                details=details,
            )
        gone = (
            f"{len(cache_state.missing)} file(s) missing (first: {cache_state.missing[0]})"
            if cache_state.missing
            else f"{cache_state.incomplete_blobs} interrupted download(s)"
        )
        return _check(
            "model-cache",
            title,
            "fail",
            f"{ctx.hf_repo} is incomplete: {gone}",
            why="the load fails or downloads again inside the start-up",
            fix=download,
            details=details,
        )

    def port(self) -> Check:
        title = "Server port free"
        ctx, facts = self.ctx, self.facts
        if ctx.port is None:
            return _check("port", title, "not-checked", "no port named", why="no target named")
        if facts.port_free is None:
            return _check("port", title, "not-checked", f"port {ctx.port}", why=facts.port_error)
        if facts.port_free:
            return _check("port", title, "pass", f"127.0.0.1:{ctx.port} is free")
        return _check(
            "port",
            title,
            "warn",
            f"127.0.0.1:{ctx.port} is in use",
            why="compose and systemd publish the server on this port (kit up picks a free one itself)",
            fix="stop what listens there (ss -ltnp) or set container.port",
        )


def evaluate(ctx: DoctorContext, facts: HostFacts) -> list[Check]:
    checks = _Checks(ctx, facts)
    return [getattr(checks, check_id.replace("-", "_"))() for check_id in CHECK_IDS]


def report(ctx: DoctorContext, checks: list[Check], seconds: float) -> DoctorReport:
    counts = {
        status: sum(c.status == status for c in checks) for status in ("pass", "warn", "fail", "not-checked")
    }
    ok = counts["fail"] == 0
    return DoctorReport(
        target=ctx.target,
        image=ctx.image,
        device=ctx.device,  # type: ignore[arg-type]
        checks=checks,
        counts=counts,
        ok=ok,
        exit_code=int(ExitCode.OK if ok else ExitCode.FAILED),
        seconds=round(seconds, 3),
    )


def doctor_context(
    target: str | None, *, image: str | None = None, overrides: tuple[str, ...] = ()
) -> DoctorContext:
    """What TARGET (and/or IMAGE) asks of the host; an empty context when neither is named."""
    if target is None and image is None:
        return DoctorContext()
    if target is None:
        from kit.images.manifest import load_manifest

        manifest = load_manifest(image)
        return DoctorContext(
            image=manifest.name,
            image_ref=manifest.tag,
            device=manifest.flavor,
            image_cuda=manifest.pins.cuda,
            arch_list=manifest.arch_list,
        )
    from kit.launch import resolve_full

    r = resolve_full(target, image=image, overrides=overrides)
    spec, facts = r.spec, r.model.facts
    return DoctorContext(
        target=target,
        image=spec.image,
        image_ref=spec.image_ref,
        device=spec.device,
        gpus=spec.gpus,
        image_cuda=r.manifest.pins.cuda,
        arch_list=r.manifest.arch_list,
        hf_repo=facts.hf_id,
        model_gib=facts.size_on_disk_gib,
        model_path=facts.path,
        hf_cache=spec.hf_cache,
        port=spec.port,
        ipc_host=spec.ipc_host,
        shm_size=spec.shm_size,
        memlock=spec.ulimits.get("memlock"),
    )


def run_doctor(
    target: str | None = None,
    *,
    image: str | None = None,
    overrides: tuple[str, ...] = (),
    nvml_lib: Any | None = None,
) -> DoctorReport:
    started = time.monotonic()
    ctx = doctor_context(target, image=image, overrides=overrides)
    facts = read_host(
        image_ref=ctx.image_ref, hf_cache=ctx.hf_cache, hf_repo=ctx.hf_repo, port=ctx.port, nvml_lib=nvml_lib
    )
    return report(ctx, evaluate(ctx, facts), time.monotonic() - started)


def schema() -> dict[str, Any]:
    """The JSON Schema of `kit doctor --json` (docs/schema/doctor.json)."""
    document = DoctorReport.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **document,
    }
