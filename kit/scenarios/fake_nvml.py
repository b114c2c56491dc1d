"""A stand-in for the `pynvml` module: the functions kit/runtime/nvml.py calls, answering like a GPU
host whose state a test or a replayed scenario sets.

It is a fake of the library, not of the kit's adapter: `NvmlGpus(FakeNvml(...))` runs the kit's real
NVML code (PID matching, whole-device fallback, P2P and topology words) without a driver.

    nvml = FakeNvml.of(count=4, name="NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                       capability=(12, 0), memory_gib=96)
    nvml.set_process(gpu=0, pid=4242, used_bytes=1 << 30)
    nvml.set_utilization(gpu=0, pct=100)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_InvalidArgument(NVMLError):
    pass


@dataclass
class FakeDevice:
    name: str
    uuid: str
    capability: tuple[int, int]
    memory_total: int
    bus_id: str
    processes: dict[int, int | None] = field(default_factory=dict)  # pid -> bytes (None: not reported)
    other_used: int = 0  # memory held by processes that are not listed (driver, other users)
    utilization: int = 0
    nvlinks: int = 0


class FakeNvml:
    """The subset of pynvml the kit uses. `available=False` behaves like a host with no driver."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18

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

    def set_process(self, gpu: int, pid: int, used_bytes: int | None) -> None:
        self.devices[gpu].processes[pid] = used_bytes

    def set_utilization(self, gpu: int, pct: int) -> None:
        self.devices[gpu].utilization = pct

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
        return self.devices[index]

    def nvmlDeviceGetName(self, handle: FakeDevice) -> str:
        return handle.name

    def nvmlDeviceGetUUID(self, handle: FakeDevice) -> str:
        return handle.uuid

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeDevice) -> tuple[int, int]:
        return handle.capability

    def nvmlDeviceGetMemoryInfo(self, handle: FakeDevice) -> SimpleNamespace:
        used = sum(v or 0 for v in handle.processes.values()) + handle.other_used
        return SimpleNamespace(total=handle.memory_total, used=used, free=handle.memory_total - used)

    def nvmlDeviceGetPciInfo(self, handle: FakeDevice) -> SimpleNamespace:
        return SimpleNamespace(busId=handle.bus_id)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeDevice) -> SimpleNamespace:
        return SimpleNamespace(gpu=handle.utilization, memory=0)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeDevice) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in handle.processes.items()]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeDevice) -> list[SimpleNamespace]:
        return []

    def nvmlDeviceGetNvLinkState(self, handle: FakeDevice, link: int) -> int:
        if not handle.nvlinks:
            raise NVMLError_NotSupported("Not Supported")
        if link >= handle.nvlinks:
            raise NVMLError_InvalidArgument("Invalid Argument")
        return 1

    def nvmlDeviceGetP2PStatus(self, a: FakeDevice, b: FakeDevice, index: int) -> int:
        return self.p2p.get((self.devices.index(a), self.devices.index(b)), 0)

    def nvmlDeviceGetTopologyCommonAncestor(self, a: FakeDevice, b: FakeDevice) -> int:
        return self.topology.get((self.devices.index(a), self.devices.index(b)), 30)

    def nvmlSystemGetDriverVersion(self) -> str:
        self._ready()
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._ready()
        return self.cuda_driver
