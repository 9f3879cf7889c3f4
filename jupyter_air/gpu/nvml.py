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


class _GpuLost(Exception):
    """Raised inside one GPU's read to stop asking a GPU that fell off the bus."""


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
            return False
        self._initialized = True
        self._load_inventory()
        return True

    def _load_inventory(self) -> None:
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
        memory = self._memory(device)
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
            lost = device.handle_error is not None and (
                device.handle_error.value == pynvml.NVML_ERROR_GPU_IS_LOST
            )
            return GpuReading(status="lost" if lost else "error", message=str(device.handle_error))
        errors: list[str] = []

        def field_value(label: str, fn: Callable[[], T]) -> T | None:
            try:
                return fn()
            except pynvml.NVMLError as err:
                if err.value == pynvml.NVML_ERROR_GPU_IS_LOST:
                    raise _GpuLost(str(err)) from err
                if err.value not in UNSUPPORTED_ERRORS:
                    errors.append(f"{label}: {err}")
                    self._log_once(device, index, label, err)
                return None

        handle = device.handle
        try:
            util = field_value("utilization", lambda: pynvml.nvmlDeviceGetUtilizationRates(handle))
            memory = field_value("memory", lambda: self._memory(device, raising=True))
            temp = field_value("temperature", lambda: self._temperature(device))
            power = field_value("power", lambda: pynvml.nvmlDeviceGetPowerUsage(handle))
            processes = field_value("processes", lambda: _processes(handle))
        except _GpuLost as lost:
            return GpuReading(status="lost", message=str(lost))
        return GpuReading(
            status="error" if errors else "ok",
            message="; ".join(errors) or None,
            util=float(util.gpu) if util is not None else None,
            mem_used_mib=memory.used / MIB if memory is not None else None,
            temp_c=float(temp) if temp is not None else None,
            power_w=power / 1000.0 if power is not None else None,
            processes=processes or (),
        )

    def _memory(self, device: _Device, raising: bool = False) -> Any:
        """Memory info v2 where the driver has it (it separates reserved memory), else v1."""
        handle = device.handle
        try:
            if device.memory_v2:
                try:
                    return pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
                except pynvml.NVMLError as err:
                    if err.value not in UNSUPPORTED_ERRORS:
                        raise
                    device.memory_v2 = False
            return pynvml.nvmlDeviceGetMemoryInfo(handle)
        except pynvml.NVMLError:
            if raising:
                raise
            return None

    def _temperature(self, device: _Device) -> int:
        """``nvmlDeviceGetTemperatureV`` on new drivers, the deprecated call on old ones."""
        sensor = pynvml.NVML_TEMPERATURE_GPU
        if device.temperature_v:
            try:
                return int(pynvml.nvmlDeviceGetTemperatureV(device.handle, sensor))
            except pynvml.NVMLError as err:
                if err.value != pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                    raise
                device.temperature_v = False
        return int(pynvml.nvmlDeviceGetTemperature(device.handle, sensor))

    @staticmethod
    def _log_once(device: _Device, index: int, label: str, err: pynvml.NVMLError) -> None:
        key = (label, int(err.value))
        if key not in device.errors_seen:
            device.errors_seen.add(key)
            log.warning("GPU %d: reading %s failed: %s", index, label, err)


def _processes(handle: Any) -> tuple[GpuProcess, ...]:
    """Compute and graphics processes on one GPU, merged by pid."""
    merged: dict[int, int | None] = {}
    for getter in (
        pynvml.nvmlDeviceGetComputeRunningProcesses,
        pynvml.nvmlDeviceGetGraphicsRunningProcesses,
    ):
        try:
            found = getter(handle)
        except pynvml.NVMLError as err:
            if err.value in UNSUPPORTED_ERRORS:
                continue
            raise
        for proc in found:
            used = proc.usedGpuMemory
            mib = round(used / MIB) if isinstance(used, int) else None
            previous = merged.get(proc.pid)
            merged[proc.pid] = mib if previous is None else max(previous, mib or 0)
    return tuple(GpuProcess(pid, used) for pid, used in sorted(merged.items()))


def _optional(fn: Callable[..., T], *args: Any) -> T | None:
    """Call an NVML getter whose failure only means "unknown"."""
    try:
        return fn(*args)
    except pynvml.NVMLError:
        return None
