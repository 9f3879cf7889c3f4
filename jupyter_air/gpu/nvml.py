"""The one place that talks to NVML.

Every other module asks this one. NVML is initialised lazily (never at import), every
metric is read on its own so that one unsupported field or one lost GPU never drops
the rest, and a machine without a driver is a quiet, normal state rather than an error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import pynvml

log = logging.getLogger(__name__)

MIB = 1024 * 1024

#: Init errors that mean "this machine has no usable NVIDIA driver": reported as the
#: no-GPU state with NVML's reason, never logged as a failure.
NO_GPU_ERRORS = frozenset(
    {
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    }
)

#: Field errors that just mean "this GPU does not report that": shown as n/a.
UNSUPPORTED_ERRORS = frozenset(
    {
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
        pynvml.NVML_ERROR_NO_DATA,
    }
)

GpuStatus = Literal["ok", "lost", "error"]
T = TypeVar("T")


@dataclass(frozen=True)
class NvmlStatus:
    """Whether NVML could be used, and if not, why (in NVML's words)."""

    available: bool
    reason: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None


@dataclass(frozen=True)
class GpuInfo:
    """What does not change while a GPU is up: its identity and capacities."""

    index: int
    name: str | None
    uuid: str | None
    mem_total_mib: int | None
    power_limit_w: float | None


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU."""

    pid: int
    used_mib: int | None


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment. ``None`` fields were not reported."""

    status: GpuStatus = "ok"
    message: str | None = None
    util: float | None = None
    mem_used_mib: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    processes: tuple[GpuProcess, ...] = ()


@dataclass
class _Device:
    handle: Any
    handle_error: pynvml.NVMLError | None = None
    memory_v2: bool = True
    temperature_v: bool = True
    errors_seen: set[tuple[str, int]] = field(default_factory=set)


class Nvml:
    """Thread-safe, lazily initialised access to every GPU of this machine.

    ``retry_interval`` bounds how often a failed initialisation is tried again, so a
    machine without a driver costs nothing per sample.
    """

    def __init__(self, retry_interval: float = 60.0) -> None:
        self._lock = threading.RLock()
        self._retry_interval = retry_interval
        self._initialized = False
        self._last_attempt: float | None = None
        self._status = NvmlStatus(available=False, reason="NVML not initialised yet")
        self._devices: list[_Device] = []
        self._inventory: list[GpuInfo] = []
        #: Bumped whenever the status or the inventory may have changed.
        self.generation = 0

    # -- lifecycle -------------------------------------------------------------------

    def _ensure(self) -> bool:
        if self._initialized:
            return True
        now = time.monotonic()
        if self._last_attempt is not None and now - self._last_attempt < self._retry_interval:
            return False
        self._last_attempt = now
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            if err.value not in NO_GPU_ERRORS:
                log.warning("NVML could not be initialised: %s", err)
            self._status = NvmlStatus(available=False, reason=str(err))
            self.generation += 1
            return False
        self._initialized = True
        self._load_inventory()
        return True

    def _load_inventory(self) -> None:
        self.generation += 1
        driver = _optional(pynvml.nvmlSystemGetDriverVersion)
        cuda = _optional(pynvml.nvmlSystemGetCudaDriverVersion)
        cuda_text = f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as err:
            log.warning("NVML could not count GPUs: %s", err)
            self._status = NvmlStatus(False, str(err), driver, cuda_text)
            self._devices, self._inventory = [], []
            return
        devices: list[_Device] = []
        inventory: list[GpuInfo] = []
        for index in range(count):
            try:
                device = _Device(pynvml.nvmlDeviceGetHandleByIndex(index))
            except pynvml.NVMLError as err:
                if err.value != pynvml.NVML_ERROR_GPU_IS_LOST:
                    log.warning("GPU %d has no NVML handle: %s", index, err)
                device = _Device(None, handle_error=err)
            devices.append(device)
            inventory.append(self._describe(index, device))
        reason = None if count else "NVML reports no GPU on this machine"
        self._status = NvmlStatus(count > 0, reason, driver, cuda_text)
        self._devices, self._inventory = devices, inventory

    def _describe(self, index: int, device: _Device) -> GpuInfo:
        if device.handle is None:
            return GpuInfo(index, None, None, None, None)
        handle = device.handle
        memory = _optional(_memory, device)
        limit = _optional(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        return GpuInfo(
            index=index,
            name=_optional(pynvml.nvmlDeviceGetName, handle),
            uuid=_optional(pynvml.nvmlDeviceGetUUID, handle),
            mem_total_mib=round(memory.total / MIB) if memory is not None else None,
            power_limit_w=limit / 1000.0 if limit is not None else None,
        )

    def refresh(self) -> None:
        """Retry initialisation now, or read the inventory again if GPUs came or went."""
        with self._lock:
            if not self._initialized:
                self._last_attempt = None
                self._ensure()
                return
            count = _optional(pynvml.nvmlDeviceGetCount)
            if count != len(self._devices):
                self._load_inventory()

    def shutdown(self) -> None:
        with self._lock:
            if self._initialized:
                _optional(pynvml.nvmlShutdown)
            self._initialized = False
            self._last_attempt = None
            self._devices, self._inventory = [], []
            self.generation += 1

    # -- queries ---------------------------------------------------------------------

    def status(self) -> NvmlStatus:
        with self._lock:
            self._ensure()
            return self._status

    def inventory(self) -> list[GpuInfo]:
        with self._lock:
            self._ensure()
            return list(self._inventory)

    def read_all(self) -> list[GpuReading]:
        """Read every GPU of the inventory, each independently of the others."""
        with self._lock:
            if not self._ensure():
                return []
            return [self._read(i, device) for i, device in enumerate(self._devices)]

    def _read(self, index: int, device: _Device) -> GpuReading:
        if device.handle is None:
            err = device.handle_error
            lost = err is not None and err.value == pynvml.NVML_ERROR_GPU_IS_LOST
            return GpuReading(status="lost" if lost else "error", message=str(err))
        values: list[Any] = []
        errors: list[str] = []
        for label, reader in _FIELD_READERS:
            try:
                values.append(reader(device))
            except pynvml.NVMLError as err:
                if err.value == pynvml.NVML_ERROR_GPU_IS_LOST:
                    return GpuReading(status="lost", message=str(err))
                if err.value not in UNSUPPORTED_ERRORS:
                    errors.append(f"{label}: {err}")
                    self._log_once(device, index, label, err)
                values.append(None)
        util, mem_used, temp, power, processes = values
        return GpuReading(
            "error" if errors else "ok",
            "; ".join(errors) or None,
            util,
            mem_used,
            temp,
            power,
            processes or (),
        )

    @staticmethod
    def _log_once(device: _Device, index: int, label: str, err: pynvml.NVMLError) -> None:
        key = (label, int(err.value))
        if key not in device.errors_seen:
            device.errors_seen.add(key)
            log.warning("GPU %d: reading %s failed: %s", index, label, err)


def _memory(device: _Device) -> Any:
    """Memory info v2 where the driver has it (it separates reserved memory), else v1."""
    if device.memory_v2:
        try:
            return pynvml.nvmlDeviceGetMemoryInfo(device.handle, version=pynvml.nvmlMemory_v2)
        except pynvml.NVMLError as err:
            if err.value not in UNSUPPORTED_ERRORS:
                raise
            device.memory_v2 = False
    return pynvml.nvmlDeviceGetMemoryInfo(device.handle)


def _temperature(device: _Device) -> float:
    """``nvmlDeviceGetTemperatureV`` on new drivers, the deprecated call on old ones."""
    sensor = pynvml.NVML_TEMPERATURE_GPU
    if device.temperature_v:
        try:
            return float(pynvml.nvmlDeviceGetTemperatureV(device.handle, sensor))
        except pynvml.NVMLError as err:
            if err.value != pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                raise
            device.temperature_v = False
    return float(pynvml.nvmlDeviceGetTemperature(device.handle, sensor))


def _processes(device: _Device) -> tuple[GpuProcess, ...]:
    """Compute and graphics processes on one GPU (a pid in both is listed once)."""
    used_by_pid: dict[int, int | None] = {}
    for getter in (
        pynvml.nvmlDeviceGetComputeRunningProcesses,
        pynvml.nvmlDeviceGetGraphicsRunningProcesses,
    ):
        try:
            found = getter(device.handle)
        except pynvml.NVMLError as err:
            if err.value in UNSUPPORTED_ERRORS:
                continue
            raise
        for proc in found:
            used = proc.usedGpuMemory  # None where the driver cannot tell (WDDM)
            used_by_pid.setdefault(proc.pid, None if used is None else round(used / MIB))
    return tuple(GpuProcess(pid, used) for pid, used in used_by_pid.items())


#: One reader per field of a GpuReading, each tried on its own.
_FIELD_READERS: tuple[tuple[str, Callable[[_Device], Any]], ...] = (
    ("utilization", lambda d: float(pynvml.nvmlDeviceGetUtilizationRates(d.handle).gpu)),
    ("memory", lambda d: _memory(d).used / MIB),
    ("temperature", _temperature),
    ("power", lambda d: pynvml.nvmlDeviceGetPowerUsage(d.handle) / 1000.0),
    ("processes", _processes),
)


def _optional(fn: Callable[..., T], *args: Any) -> T | None:
    """Call an NVML getter whose failure only means "unknown"."""
    try:
        return fn(*args)
    except pynvml.NVMLError:
        return None
