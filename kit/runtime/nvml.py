"""NVIDIA GPUs through NVML (nvidia-ml-py, imported as `pynvml`): what the host has, and what one
container's processes use of it. The only module that calls NVML.

    gpus = open_nvml()                 # None where no driver answers (with the reason: nvml_missing())
    gpus.inventory()                   # driver, CUDA driver, devices (name, UUID, capability, memory)
    gpus.usage(pids)                   # per device: memory those processes hold, utilisation, and
                                       # the Xids NVML's critical-error events reported (usage.error)
    gpus.p2p_matrix(), gpus.topology() # for doctor and fingerprints

`lib` is the pynvml module or anything with the same functions: `kit.scenarios.fake_nvml.FakeNvml`
answers like a GPU host, so the code below runs unchanged in tests and replayed scenarios.

NVML reports host PIDs; a container's processes are matched by the host PIDs the engine reports for
it (`docker top`). A process is counted once per device even when NVML lists it as both a compute
and a graphics process. Where NVML cannot say how much one process holds (some vGPU/WSL setups give
no per-process figure), the device's whole used memory stands in, and the reading says so.

Every NVML call is guarded: a GPU that stops answering (NVML_ERROR_GPU_IS_LOST after a P2P hang, a
reset required, fallen off the bus) becomes a `LostGpu` in the inventory and the usage, never an
exception in doctor, `kit up` or a bundle. Xid critical-error events are registered once per GPU and
read without waiting (nvmlEventSetWait_v2, timeout 0) in every usage reading; a driver that does not
offer them (NVML_ERROR_NOT_SUPPORTED) leaves `events_note`, never an error. A fatal Xid of NVIDIA's
catalog (xids.toml: 8 and 119 are the GSP watchdog hangs RTX PRO 6000 hosts report) becomes
`usage.error`, the verdict's gpu_error, which the gpu-lost cause reads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kit.runtime.xids import XidEvent, kernel_xid, pci_key, xid_error

# pynvml spells a few of these as 1-tuples (NVML_P2P_CAPS_INDEX_READ = (0,)); the C values are plain.
_P2P_READ, _P2P_WRITE = 0, 1
_P2P_STATUS = {
    0: "OK",
    1: "chipset not supported",
    2: "GPU not supported",
    3: "IOH topology not supported",
    4: "disabled by regkey",
    5: "not supported",
    6: "unknown",
}
# nvmlDeviceGetTopologyCommonAncestor levels, named as `nvidia-smi topo -m` names them.
_TOPOLOGY = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


@dataclass(frozen=True)
class GpuDevice:
    index: int
    name: str
    uuid: str
    compute_capability: str  # "12.0"
    memory_total_bytes: int
    pci_bus_id: str | None = None
    nvlinks: int = 0  # active NVLink links (0 on PCIe-only cards such as the RTX PRO 6000)


# NVML return codes of a GPU that no longer answers (pynvml's NVML_ERROR_*): a GPU lost after a hang,
# one that needs a reset, one gone from the bus; 999 (Unknown) is what a fallen-off-the-bus GPU gives.
LOST_CODES = {15: "GPU is lost", 16: "GPU requires reset", 28: "GPU not found", 999: "unknown error"}


XID_CRITICAL_EVENT = 0x8  # nvmlEventTypeXidCriticalError (nvml.h)
NVML_ERROR_TIMEOUT = 10  # nvmlEventSetWait_v2 with nothing waiting
_MAX_EVENTS_PER_READ = 64  # a driver flooding events must not stall the sampler


@dataclass(frozen=True)
class LostGpu:
    """A GPU NVML lists but that no longer answers (or answers only errors)."""

    index: int
    error: str
    """NVML's words, e.g. 'GPU is lost'."""
    lost: bool = True
    """True for the lost family (LOST_CODES); False when it only refused one call we need."""

    def describe(self) -> str:
        return f"GPU {self.index}: {self.error}"


@dataclass(frozen=True)
class GpuInventory:
    """The host's GPUs as NVML sees them; `error` says why there are none when NVML is unusable."""

    driver_version: str | None = None
    cuda_driver_version: str | None = None  # the newest CUDA the driver supports, "13.0"
    devices: tuple[GpuDevice, ...] = ()
    error: str | None = None
    lost: tuple[LostGpu, ...] = ()
    """GPUs NVML lists that did not answer (not in `devices`)."""

    @property
    def count(self) -> int:
        return len(self.devices)


@dataclass(frozen=True)
class GpuReading:
    """One device at one moment, as far as one container is concerned."""

    index: int
    memory_used_bytes: int  # held by the container's processes (or the whole device, see below)
    utilization_pct: int | None
    processes: int  # the container's processes on this device
    whole_device: bool = False  # NVML gave no per-process figure; memory_used_bytes is the device's


@dataclass(frozen=True)
class GpuUsage:
    readings: tuple[GpuReading, ...] = field(default_factory=tuple)
    lost: tuple[LostGpu, ...] = ()
    """Devices that did not answer this reading."""
    xids: tuple[XidEvent, ...] = ()
    """Every Xid seen on any GPU: NVML's events since the reader registered for them (where the
    driver offers them) and the kernel log's lines (where the reader was given it)."""
    server_gpus: tuple[int, ...] = ()
    """The GPUs the processes asked about have held memory on, in any reading so far."""

    @property
    def error(self) -> str | None:
        """The fatal Xids on the server's own GPUs as the verdict's evidence (read_gpu_usage hands it
        on as gpu_error): one on another GPU is another workload's trouble, not this server's."""
        return xid_error(x for x in self.xids if x.index in self.server_gpus)

    @property
    def memory_bytes(self) -> int:
        return sum(r.memory_used_bytes for r in self.readings)

    @property
    def utilization(self) -> tuple[int | None, ...]:
        return tuple(r.utilization_pct for r in self.readings)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cuda_version(value: int) -> str:
    return f"{value // 1000}.{value % 1000 // 10}"


def _error_text(exc: Exception) -> str:
    return str(exc) or LOST_CODES.get(getattr(exc, "value", None), "") or type(exc).__name__


def is_lost(exc: Exception) -> bool:
    return getattr(exc, "value", None) in LOST_CODES


class NvmlGpus:
    """Reads through `lib` (pynvml or a fake with the same functions); open with `open_nvml()`."""

    def __init__(self, lib: Any):
        self.lib = lib
        self._handles: list[tuple[int, Any]] = []
        self._lost: dict[int, LostGpu] = {}
        self._event_set: Any = None
        self._events_opened = False
        self.xids: list[XidEvent] = []
        self.events_note: str | None = None
        """Why NVML's Xid events are not read here (not offered by the driver, ...), or None."""
        self.events_since: float | None = None
        """When NVML's events were registered (epoch seconds): earlier Xids only the kernel log has."""
        self.kernel: Any = None
        """The kernel's lines (kit.runtime.kernel_log.KernelLog or alike), set by read_kernel_from."""
        self._mine: set[int] = set()
        self._registered: set[int] = set()
        for index in range(lib.nvmlDeviceGetCount()):
            try:
                self._handles.append((index, lib.nvmlDeviceGetHandleByIndex(index)))
            except lib.NVMLError as exc:
                self._lose(index, exc)

    def close(self) -> None:
        if self.kernel is not None and hasattr(self.kernel, "close"):
            self.kernel.close()
        if self._event_set is not None:
            with contextlib.suppress(self.lib.NVMLError, AttributeError):
                self.lib.nvmlEventSetFree(self._event_set)
            self._event_set = None
        with contextlib.suppress(self.lib.NVMLError):
            self.lib.nvmlShutdown()

    # -- Xid events ---------------------------------------------------------------------------------

    def _open_events(self) -> Any:
        """Once: an event set with every answering GPU registered for Xid critical errors. None where
        the driver does not offer them (NVML_ERROR_NOT_SUPPORTED on some boards and in vGPU guests)."""
        if self._events_opened:
            return self._event_set
        self._events_opened = True
        lib = self.lib
        try:
            event_set = lib.nvmlEventSetCreate()
        except (lib.NVMLError, AttributeError) as exc:
            self.events_note = f"NVML events not offered ({_error_text(exc)})"
            return None
        registered, refused = [], []
        for index, handle in self._answering():
            try:
                lib.nvmlDeviceRegisterEvents(handle, XID_CRITICAL_EVENT, event_set)
                registered.append(index)
            except lib.NVMLError as exc:
                refused.append(f"GPU {index}: {_error_text(exc)}")
        if refused:
            self.events_note = f"Xid events not offered for {', '.join(refused)}"
        if not registered:
            with contextlib.suppress(lib.NVMLError):
                lib.nvmlEventSetFree(event_set)
            return None
        self._event_set = event_set
        # NVML records an event only from nvmlDeviceRegisterEvents on (NVML API, Event Handling
        # Methods): an Xid before this moment is in the kernel log alone.
        self.events_since = time.time()
        self._registered = set(registered)
        return event_set

    def read_kernel_from(self, log: Any) -> None:
        """Also read the kernel's `NVRM: Xid` lines through LOG (`read()` -> [(wall or None, line)],
        `note`): the Xids before NVML's registration, and those of GPUs whose events NVML refuses."""
        self.kernel = log

    def _pci_indices(self) -> dict[str, int]:
        found = {}
        for index, handle in self._answering():
            pci = self._try(self.lib.nvmlDeviceGetPciInfo, handle)
            key = pci_key(_text(pci.busId)) if pci is not None else None
            if key:
                found[key] = index
        return found

    def _kernel_xids(self) -> list[XidEvent]:
        """New kernel Xid lines, matched to NVML's GPUs by PCI address; those NVML's own events also
        report (a registered GPU, logged after the registration) are left to the events."""
        if self.kernel is None:
            return []
        events = [x for wall, line in self.kernel.read() if (x := kernel_xid(line, wall)) is not None]
        if not events:
            return []
        indices = self._pci_indices()
        registered = self._registered
        found = []
        for event in events:
            index = indices.get(event.pci or "")
            told_by_nvml = index in registered and (
                event.wall is None or self.events_since is None or event.wall >= self.events_since
            )
            if not told_by_nvml:
                found.append(dataclasses.replace(event, index=index))
        return found

    def _index_of(self, device: Any) -> int | None:
        for index, handle in self._handles:
            if handle is device:
                return index
        return self._try(self.lib.nvmlDeviceGetIndex, device)

    def read_xids(self) -> tuple[XidEvent, ...]:
        """The Xid events waiting now (never blocks: timeout 0), and the kernel's new Xid lines where
        it is read; kept in `xids` as well."""
        event_set = self._open_events()
        found = self._kernel_xids()
        for _ in range(_MAX_EVENTS_PER_READ if event_set is not None else 0):
            try:
                data = self.lib.nvmlEventSetWait_v2(event_set, 0)
            except self.lib.NVMLError as exc:
                if getattr(exc, "value", None) != NVML_ERROR_TIMEOUT:
                    self.events_note = f"NVML event wait failed ({_error_text(exc)})"
                break
            if int(data.eventType) & XID_CRITICAL_EVENT:
                found.append(XidEvent(int(data.eventData), index=self._index_of(data.device)))
        self.xids += found
        return tuple(found)

    @property
    def server_gpus(self) -> tuple[int, ...]:
        """The GPUs the processes asked about (usage) have held memory on so far."""
        return tuple(sorted(self._mine))

    @property
    def lost(self) -> tuple[LostGpu, ...]:
        return tuple(self._lost[i] for i in sorted(self._lost))

    @property
    def count(self) -> int:
        """Devices NVML lists, answering or not."""
        return len(self._handles) + len(self._lost)

    def _lose(self, index: int, exc: Exception) -> None:
        self._lost[index] = LostGpu(index, _error_text(exc), is_lost(exc))

    def _answering(self) -> list[tuple[int, Any]]:
        return [(i, h) for i, h in self._handles if i not in self._lost]

    def _try(self, call, *args, default=None):
        """An optional fact: NVML's error becomes `default` (a lost GPU is still recorded)."""
        try:
            return call(*args)
        except self.lib.NVMLError as exc:
            owners = [i for i, h in self._handles if any(a is h for a in args)]
            if is_lost(exc) and len(owners) == 1:  # a pair's call cannot say which one is lost
                self._lose(owners[0], exc)
            return default

    def _nvlinks(self, handle) -> int:
        active = 0
        for link in range(int(getattr(self.lib, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                state = self.lib.nvmlDeviceGetNvLinkState(handle, link)
            except self.lib.NVMLError:
                break  # NotSupported on PCIe-only cards; InvalidArgument past the last link
            active += int(state == getattr(self.lib, "NVML_FEATURE_ENABLED", 1))
        return active

    def _device(self, index: int, handle) -> GpuDevice:
        """One device's facts; a failing required call raises lib.NVMLError (the caller records it)."""
        lib = self.lib
        major, minor = lib.nvmlDeviceGetCudaComputeCapability(handle)
        pci = self._try(lib.nvmlDeviceGetPciInfo, handle)
        return GpuDevice(
            index=index,
            name=_text(lib.nvmlDeviceGetName(handle)),
            uuid=_text(lib.nvmlDeviceGetUUID(handle)),
            compute_capability=f"{major}.{minor}",
            memory_total_bytes=int(lib.nvmlDeviceGetMemoryInfo(handle).total),
            pci_bus_id=_text(pci.busId) if pci is not None else None,
            nvlinks=self._nvlinks(handle),
        )

    def inventory(self) -> GpuInventory:
        lib = self.lib
        devices = []
        for index, handle in self._answering():
            try:
                devices.append(self._device(index, handle))
            except lib.NVMLError as exc:
                self._lose(index, exc)
        cuda = self._try(lib.nvmlSystemGetCudaDriverVersion)
        return GpuInventory(
            driver_version=_text(self._try(lib.nvmlSystemGetDriverVersion, default="")) or None,
            cuda_driver_version=None if cuda is None else _cuda_version(int(cuda)),
            devices=tuple(d for d in devices if d.index not in self._lost),
            lost=self.lost,
        )

    def _processes(self, handle) -> list[Any]:
        """Compute and graphics processes, one entry per PID (a process in both lists counts once)."""
        by_pid: dict[int, Any] = {}
        for call in (
            self.lib.nvmlDeviceGetComputeRunningProcesses,
            self.lib.nvmlDeviceGetGraphicsRunningProcesses,
        ):
            for process in self._try(call, handle, default=[]) or []:
                known = by_pid.get(process.pid)
                if known is None or (known.usedGpuMemory is None and process.usedGpuMemory is not None):
                    by_pid[process.pid] = process
        return list(by_pid.values())

    def usage(self, pids: Iterable[int]) -> GpuUsage:
        """Memory and utilisation of the devices these host PIDs use (devices they do not use: absent)."""
        wanted = set(pids)
        readings = []
        for index, handle in self._answering():
            mine = [p for p in self._processes(handle) if p.pid in wanted]
            if not mine:
                continue
            known = [p.usedGpuMemory for p in mine if p.usedGpuMemory is not None]
            whole = len(known) < len(mine)
            memory = self._try(self.lib.nvmlDeviceGetMemoryInfo, handle) if whole else None
            if whole and memory is None:
                continue  # neither figure: no reading rather than a wrong one
            used = int(memory.used) if whole else int(sum(known))
            rates = self._try(self.lib.nvmlDeviceGetUtilizationRates, handle)
            readings.append(
                GpuReading(
                    index=index,
                    memory_used_bytes=used,
                    utilization_pct=None if rates is None else int(rates.gpu),
                    processes=len(mine),
                    whole_device=whole,
                )
            )
        self.read_xids()
        self._mine.update(r.index for r in readings)
        return GpuUsage(
            tuple(r for r in readings if r.index not in self._lost),
            self.lost,
            tuple(self.xids),
            self.server_gpus,
        )

    def device_usage(self) -> tuple[tuple[int, int, int | None, int], ...]:
        """(index, memory used, utilisation %, processes) of every answering device, whoever uses it."""
        rows = []
        for index, handle in self._answering():
            memory = self._try(self.lib.nvmlDeviceGetMemoryInfo, handle)
            rates = self._try(self.lib.nvmlDeviceGetUtilizationRates, handle)
            processes = self._processes(handle)
            if memory is None:
                continue
            rows.append((index, int(memory.used), None if rates is None else int(rates.gpu), len(processes)))
        return tuple(row for row in rows if row[0] not in self._lost)

    def p2p_matrix(self) -> dict[str, dict[str, str]]:
        """P2P read/write status between every pair of devices, as NVML reports it ("OK", "not supported")."""
        matrix: dict[str, dict[str, str]] = {}
        handles = self._answering()
        for i, a in handles:
            for j, b in handles:
                if i == j:
                    continue
                row = matrix.setdefault(str(i), {})
                read = self._try(self.lib.nvmlDeviceGetP2PStatus, a, b, _P2P_READ)
                write = self._try(self.lib.nvmlDeviceGetP2PStatus, a, b, _P2P_WRITE)
                row[str(j)] = (
                    "OK"
                    if read == 0 and write == 0
                    else f"read {_P2P_STATUS.get(read, 'unknown')}, write {_P2P_STATUS.get(write, 'unknown')}"
                )
        return matrix

    def topology(self) -> dict[str, dict[str, str]]:
        """The path between every pair of devices in `nvidia-smi topo -m` words (PIX, PHB, NODE, SYS, NV#)."""
        handles = self._answering()
        links = {i: self._nvlinks(h) for i, h in handles}
        matrix: dict[str, dict[str, str]] = {}
        for i, a in handles:
            for j, b in handles:
                if i == j:
                    continue
                level = self._try(self.lib.nvmlDeviceGetTopologyCommonAncestor, a, b)
                word = _TOPOLOGY.get(level, "unknown") if level is not None else "unknown"
                if links[i] and links[j]:
                    word = f"NV{min(links[i], links[j])}"
                matrix.setdefault(str(i), {})[str(j)] = word
        return matrix


def xid_note(gpus: NvmlGpus | None) -> str | None:
    """Where this watch's Xid evidence comes from, for a verdict's notes: NVML's events count from
    their registration; the Xids before it come from the kernel log, or are unknown (and said so)."""
    if gpus is None or (gpus.events_since is None and gpus.kernel is None):
        return None
    since = time.strftime("%H:%M:%S", time.localtime(gpus.events_since)) if gpus.events_since else None
    nvml = f"NVML's Xid events from {since} (their registration)" if since else gpus.events_note
    kernel = getattr(gpus.kernel, "note", None) if gpus.kernel is not None else "the kernel log not read"
    others = sorted({x.describe() for x in gpus.xids if x.fatal and x.index not in gpus.server_gpus})
    elsewhere = f"; not the server's GPUs, left out: {'; '.join(others)}" if others else ""
    return f"Xid evidence: {nvml or 'no NVML events'}; before them: {kernel}{elsewhere}"


def lost_note(gpus: NvmlGpus | None) -> str | None:
    """One line naming the GPUs that stopped answering (read now), or None: for a verdict's notes."""
    if gpus is None:
        return None
    try:
        lost = gpus.inventory().lost
    except Exception:  # never let a note about the GPUs become the error
        return None
    if not lost:
        return None
    named = "; ".join(g.describe() for g in lost)
    return f"NVML: {named} (reset it with nvidia-smi -r -i {lost[0].index}, or reboot, before the next start)"


@functools.cache
def _pynvml() -> Any:
    import pynvml

    return pynvml


def nvml_missing(lib: Any | None = None) -> str | None:
    """Why NVML cannot be used here (no library, no driver, no device), or None when it can."""
    try:
        gpus = open_nvml(lib, strict=True)
    except _Unavailable as exc:
        return str(exc)
    assert gpus is not None
    gpus.close()
    return None


class _Unavailable(Exception):
    pass


def open_nvml(lib: Any | None = None, *, strict: bool = False) -> NvmlGpus | None:
    """NVML over `lib` (default: pynvml), or None where no driver or device answers.

    strict=True raises instead, with the reason as the message (nvml_missing uses it).
    """
    try:
        lib = lib or _pynvml()
    except ImportError as exc:
        if strict:
            raise _Unavailable(f"nvidia-ml-py is not installed ({exc})") from exc
        return None
    try:
        lib.nvmlInit()
    except lib.NVMLError as exc:
        if strict:
            raise _Unavailable(f"NVML is not available here ({type(exc).__name__})") from exc
        return None
    try:
        gpus = NvmlGpus(lib)
    except lib.NVMLError as exc:
        with contextlib.suppress(lib.NVMLError):
            lib.nvmlShutdown()
        if strict:
            raise _Unavailable(f"NVML could not list devices ({type(exc).__name__})") from exc
        return None
    if not gpus.count:
        gpus.close()
        if strict:
            raise _Unavailable("NVML sees 0 devices")
        return None
    return gpus


def read_inventory(lib: Any | None = None) -> GpuInventory:
    """The inventory, or an empty one whose `error` says why there is none. Never raises."""
    try:
        gpus = open_nvml(lib, strict=True)
    except _Unavailable as exc:
        return GpuInventory(error=str(exc))
    assert gpus is not None
    try:
        return gpus.inventory()
    except Exception as exc:  # the guarded reads should never get here; a traceback must not either
        return GpuInventory(error=f"NVML failed while reading the inventory ({type(exc).__name__}: {exc})")
    finally:
        gpus.close()
