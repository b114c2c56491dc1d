"""A stand-in for the `pynvml` module: the functions kit/runtime/nvml.py calls, answering like a GPU
host whose state a test or a replayed scenario sets.

It is a fake of the library, not of the kit's adapter: `NvmlGpus(FakeNvml(...))` runs the kit's real
NVML code (PID matching, whole-device fallback, P2P and topology words) without a driver.

    nvml = FakeNvml.of(count=4, name="NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                       capability=(12, 0), memory_gib=96)
    nvml.set_process(gpu=0, pid=4242, used_bytes=1 << 30)
    nvml.set_utilization(gpu=0, pct=100)
    nvml.lose(gpu=2)                                   # every call on GPU 2: NVML_ERROR_GPU_IS_LOST
    nvml.fail("nvmlDeviceGetUtilizationRates", gpu=1)  # one call on one GPU raises (NotSupported)
    nvml.xid(gpu=1, code=119)                          # Xid 119 on GPU 1: a kernel line, and an event
                                                       # where GPU 1's Xids are registered
    nvml.fail("nvmlDeviceRegisterEvents")              # a driver that offers no events

Errors carry pynvml's `value` (the NVML return code), as pynvml's own NVMLError subclasses do.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from types import SimpleNamespace


class NVMLError(Exception):
    """pynvml's base error: `value` is the NVML return code, str() its words."""

    value = 999
    words = "Unknown Error"

    def __init__(self, message: str | None = None):
        super().__init__(message or self.words)


class NVMLError_NotSupported(NVMLError):
    value, words = 3, "Not Supported"


class NVMLError_LibraryNotFound(NVMLError):
    value, words = 12, "NVML Shared Library Not Found"


class NVMLError_InvalidArgument(NVMLError):
    value, words = 2, "Invalid Argument"


class NVMLError_GpuIsLost(NVMLError):
    value, words = 15, "GPU is lost"


class NVMLError_ResetRequired(NVMLError):
    value, words = 16, "GPU requires restart"


class NVMLError_Timeout(NVMLError):
    value, words = 10, "Timeout"


class NVMLError_Unknown(NVMLError):
    value, words = 999, "Unknown Error"


def _per_device(method):
    """A pynvml function taking device handles: raises what `fail`/`lose` planted for them."""

    @functools.wraps(method)
    def wrapper(self, *args):
        for arg in args:
            if isinstance(arg, FakeDevice):
                planted = self.failures.get((method.__name__, self.devices.index(arg)))
                planted = planted or self.failures.get(("*", self.devices.index(arg)))
                if planted is not None:
                    raise planted
        planted = self.failures.get((method.__name__, None))
        if planted is not None:
            raise planted
        return method(self, *args)

    return wrapper


@dataclass
class FakeDevice:
    name: str
    uuid: str
    capability: tuple[int, int]
    memory_total: int
    bus_id: str
    processes: dict[int, int | None] = field(default_factory=dict)  # pid -> bytes (None: not reported)
    graphics: dict[int, int | None] = field(default_factory=dict)  # graphics contexts, same shape
    other_used: int = 0  # memory held by processes that are not listed (driver, other users)
    utilization: int = 0
    nvlinks: int = 0


class FakeNvml:
    """The subset of pynvml the kit uses. `available=False` behaves like a host with no driver."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18
    nvmlEventTypeXidCriticalError = 0x8

    def __init__(
        self,
        devices: list[FakeDevice] | None = None,
        *,
        driver: str = "580.95.05",
        cuda_driver: int = 13000,
        available: bool = True,
        p2p: dict[tuple[int, int], int] | None = None,
        topology: dict[tuple[int, int], int] | None = None,
    ):
        self.devices = devices or []
        self.driver = driver
        self.cuda_driver = cuda_driver
        self.available = available
        self.p2p = p2p or {}  # (i, j) -> NVML P2P status code; absent = 0 (OK)
        self.topology = topology or {}  # (i, j) -> topology level; absent = 30 (PHB)
        self.initialised = 0
        self.events: list[SimpleNamespace] = []  # Xid events not yet read (nvmlEventSetWait_v2)
        self.kernel_lines: list[tuple[float, str]] = []  # the kernel's `NVRM: Xid` lines, with their time
        self.registered: dict[int, int] = {}  # GPU index -> event types registered
        self.failures: dict[tuple[str, int | None], NVMLError] = {}
        """(function name or '*', GPU index or None for every GPU) -> the error it raises."""

    @classmethod
    def of(
        cls,
        count: int,
        *,
        name: str = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        capability: tuple[int, int] = (12, 0),
        memory_gib: float = 96,
        **kwargs,
    ) -> FakeNvml:
        devices = [
            FakeDevice(
                name=name,
                uuid=f"GPU-fake0000-0000-0000-0000-{i:012d}",
                capability=capability,
                memory_total=int(memory_gib * (1 << 30)),
                bus_id=f"00000000:{0x17 + 0x20 * i:02X}:00.0",
            )
            for i in range(count)
        ]
        return cls(devices, **kwargs)

    # -- what tests and scenarios change ------------------------------------------------------------

    def set_process(self, gpu: int, pid: int, used_bytes: int | None, *, graphics: bool = False) -> None:
        """A compute process on GPU (graphics=True: also listed as a graphics process, same memory)."""
        self.devices[gpu].processes[pid] = used_bytes
        if graphics:
            self.devices[gpu].graphics[pid] = used_bytes

    def set_utilization(self, gpu: int, pct: int) -> None:
        self.devices[gpu].utilization = pct

    def fail(self, call: str, *, gpu: int | None = None, error: NVMLError | None = None) -> None:
        """Make one pynvml function raise (for one GPU, or for all): NotSupported unless told."""
        self.failures[(call, gpu)] = error or NVMLError_NotSupported()

    def xid(self, gpu: int, code: int, *, wall: float | None = None) -> None:
        """The driver reports Xid CODE on GPU: the kernel logs its `NVRM: Xid` line (kernel_lines), and
        an event goes to whoever registered for that GPU's Xids; before any registration NVML keeps
        none (NVML API, Event Handling Methods), as the real library."""
        bus = self.devices[gpu].bus_id.split(":", 1)[1].rsplit(".", 1)[0]  # 00000000:17:00.0 -> 17:00
        line = f"NVRM: Xid (PCI:0000:{bus}): {code}, pid=4242, name=python3, Ch 00000008"
        self.kernel_lines.append((time.time() if wall is None else wall, line))
        if self.registered.get(gpu, 0) & 0x8:
            self.events.append(
                SimpleNamespace(device=self.devices[gpu], eventType=0x8, eventData=code, gpuInstanceId=0)
            )

    def lose(self, gpu: int, error: NVMLError | None = None) -> None:
        """GPU falls off: its handle and every call on it raise GPU_IS_LOST (as after a P2P hang)."""
        self.failures[("*", gpu)] = error or NVMLError_GpuIsLost()

    # -- pynvml's functions ---------------------------------------------------------------------------

    def _ready(self) -> None:
        if not self.available:
            raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")
        if not self.initialised:
            raise NVMLError("Uninitialized")

    def nvmlInit(self) -> None:
        if not self.available:
            raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised = max(0, self.initialised - 1)

    def nvmlDeviceGetCount(self) -> int:
        self._ready()
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        self._ready()
        planted = self.failures.get(("*", index)) or self.failures.get(("nvmlDeviceGetHandleByIndex", index))
        if planted is not None:
            raise planted
        return self.devices[index]

    @_per_device
    def nvmlDeviceGetName(self, handle: FakeDevice) -> str:
        return handle.name

    @_per_device
    def nvmlDeviceGetUUID(self, handle: FakeDevice) -> str:
        return handle.uuid

    @_per_device
    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeDevice) -> tuple[int, int]:
        return handle.capability

    @_per_device
    def nvmlDeviceGetMemoryInfo(self, handle: FakeDevice) -> SimpleNamespace:
        used = sum(v or 0 for v in handle.processes.values()) + handle.other_used
        return SimpleNamespace(total=handle.memory_total, used=used, free=handle.memory_total - used)

    @_per_device
    def nvmlDeviceGetPciInfo(self, handle: FakeDevice) -> SimpleNamespace:
        return SimpleNamespace(busId=handle.bus_id)

    @_per_device
    def nvmlDeviceGetUtilizationRates(self, handle: FakeDevice) -> SimpleNamespace:
        return SimpleNamespace(gpu=handle.utilization, memory=0)

    @_per_device
    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeDevice) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in handle.processes.items()]

    @_per_device
    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeDevice) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in handle.graphics.items()]

    @_per_device
    def nvmlDeviceGetNvLinkState(self, handle: FakeDevice, link: int) -> int:
        if not handle.nvlinks:
            raise NVMLError_NotSupported("Not Supported")
        if link >= handle.nvlinks:
            raise NVMLError_InvalidArgument("Invalid Argument")
        return 1

    @_per_device
    def nvmlDeviceGetP2PStatus(self, a: FakeDevice, b: FakeDevice, index: int) -> int:
        return self.p2p.get((self.devices.index(a), self.devices.index(b)), 0)

    @_per_device
    def nvmlDeviceGetTopologyCommonAncestor(self, a: FakeDevice, b: FakeDevice) -> int:
        return self.topology.get((self.devices.index(a), self.devices.index(b)), 30)

    def nvmlSystemGetDriverVersion(self) -> str:
        self._ready()
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._ready()
        return self.cuda_driver

    # Events: pynvml's nvmlEventSetCreate / nvmlDeviceRegisterEvents / nvmlEventSetWait_v2 / Free.

    def nvmlEventSetCreate(self) -> SimpleNamespace:
        self._ready()
        planted = self.failures.get(("nvmlEventSetCreate", None))
        if planted is not None:
            raise planted
        return SimpleNamespace(kind="event set")

    @_per_device
    def nvmlDeviceRegisterEvents(self, handle: FakeDevice, types: int, event_set: SimpleNamespace) -> None:
        index = self.devices.index(handle)
        self.registered[index] = self.registered.get(index, 0) | types

    def nvmlEventSetWait_v2(self, event_set: SimpleNamespace, timeout_ms: int) -> SimpleNamespace:
        self._ready()
        for position, event in enumerate(self.events):
            index = self.devices.index(event.device)
            if self.registered.get(index, 0) & event.eventType:
                return self.events.pop(position)
        raise NVMLError_Timeout()

    def nvmlEventSetFree(self, event_set: SimpleNamespace) -> None:
        self.registered.clear()

    @_per_device
    def nvmlDeviceGetIndex(self, handle: FakeDevice) -> int:
        return self.devices.index(handle)


class FakeKernelLog:
    """The kernel log of FakeNvml's host, read as kit.runtime.kernel_log.KernelLog reads the real one:
    `read()` gives the lines logged since the last read, `note` says what was read."""

    def __init__(self, nvml: FakeNvml, *, since_wall: float | None = None):
        self.nvml = nvml
        self.since_wall = since_wall
        self._taken = 0
        self.note = "the kernel log (a fake host's)"

    def read(self) -> list[tuple[float, str]]:
        lines = self.nvml.kernel_lines[self._taken :]
        self._taken = len(self.nvml.kernel_lines)
        return [(wall, line) for wall, line in lines if self.since_wall is None or wall >= self.since_wall]
