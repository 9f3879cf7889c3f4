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
from typing import Any, Literal

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

#: Field errors that mean "this GPU does not report that" (not a fault): the field is
#: listed as unavailable with NVML's reason. NO_PERMISSION: a MIG parent's processes,
#: some vGPU guests' queries, for a user who is not root.
UNAVAILABLE_ERRORS = frozenset(
    {
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
        pynvml.NVML_ERROR_NO_DATA,
        pynvml.NVML_ERROR_VGPU_ECC_NOT_SUPPORTED,
    }
)

#: Errors of a versioned call that mean "this driver has no such function (or struct
#: version)": the next older variant is tried, and this one never again.
_MISSING_ERRORS = frozenset(
    {pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH}
)

#: ``nvmlDeviceGetVirtualizationMode`` answers, by name; NONE (bare metal) is ``None``.
VIRTUALIZATION_MODES = {
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH: "passthrough",
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_VGPU: "vgpu",
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU: "host_vgpu",
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VSGA: "host_vsga",
}

GpuStatus = Literal["ok", "lost", "error"]

#: One way to call an NVML function: its C name (what the driver may lack) and the
#: pynvml call. A query is a tuple of variants, newest first.
Variant = tuple[str, Callable[..., Any]]


@dataclass(frozen=True)
class NvmlStatus:
    """Whether NVML could be used, and if not, why (in NVML's words)."""

    available: bool
    reason: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None


@dataclass(frozen=True)
class GpuInfo:
    """What does not change while a GPU is up: its identity, capacities and mode.

    ``mig_mode``: True when MIG is enabled (NVML then reports no utilization for the
    GPU), None when the GPU cannot do MIG. ``virtualization``: "vgpu" in a vGPU guest,
    "passthrough", "host_vgpu", "host_vsga"; None on bare metal or when not reported.
    """

    index: int
    name: str | None
    uuid: str | None
    mem_total_mib: int | None
    power_limit_w: float | None
    mig_mode: bool | None = None
    virtualization: str | None = None
    #: The SM clock's maximum (MHz): what a throttled clock is a share of.
    max_sm_clock_mhz: int | None = None


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU."""

    pid: int
    used_mib: int | None


@dataclass(frozen=True)
class MigDevice:
    """One MIG device (slice) of a MIG-enabled GPU, as NVML lists it under its parent:
    ``index`` among them, its GPU and compute instance ids (dcgm-exporter's ``GPU_I_ID``),
    its profile (``1g.10gb``, dcgm-exporter's ``GPU_I_PROFILE``, read from its name), its
    memory, and the processes on it (which a user may read on a slice, not on its parent).
    None: not reported."""

    index: int
    uuid: str | None
    gpu_instance: int | None
    compute_instance: int | None
    profile: str | None
    mem_total_mib: int | None
    mem_used_mib: float | None
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class EccCounts:
    """``nvmlDeviceGetTotalEccErrors``: volatile counts since the driver loaded, aggregate
    over the GPU's life; None where NVML does not report that counter."""

    corrected_volatile: int | None
    uncorrected_volatile: int | None
    corrected_aggregate: int | None
    uncorrected_aggregate: int | None


@dataclass(frozen=True)
class RetiredPages:
    """Pages retired for multiple single-bit or for double-bit ECC errors (before Ampere),
    and whether a retirement waits for the next reset."""

    single_bit: int
    double_bit: int
    pending: bool


@dataclass(frozen=True)
class RemappedRows:
    """Memory rows remapped for corrected or uncorrected errors (Ampere on); ``pending``:
    a remapping waits for the next reset; ``failed``: one could not be made."""

    corrected: int
    uncorrected: int
    pending: bool
    failed: bool


@dataclass(frozen=True)
class GpuHealth:
    """What NVML says of a GPU's hardware. None where it does not report it (a consumer GPU
    has no ECC, a vGPU guest sees none of it): ``unavailable`` says why, never a zero.

    ``clock_reasons``: the clocks event (throttle) reasons, an ``nvmlClocksEventReason*``
    bitmask; ``sm_clock_mhz``: the SM clock now.
    """

    clock_reasons: int | None = None
    sm_clock_mhz: int | None = None
    ecc: EccCounts | None = None
    retired_pages: RetiredPages | None = None
    remapped_rows: RemappedRows | None = None
    unavailable: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class XidEvent:
    """An XID critical error NVML's event set delivered: which GPU, which XID, when (unix
    seconds, as received)."""

    index: int
    xid: int
    t: float


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment. ``None`` fields were not reported.

    ``unavailable`` names the fields this GPU does not report (not supported, not
    permitted, or missing from the driver), with NVML's reason; they are no error.
    """

    status: GpuStatus = "ok"
    message: str | None = None
    util: float | None = None
    mem_used_mib: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    processes: tuple[GpuProcess, ...] = ()
    unavailable: dict[str, str] = field(default_factory=dict)
    health: GpuHealth = field(default_factory=GpuHealth)
    #: ``nvmlDeviceGetTotalEnergyConsumption``: mJ since the driver loaded (Volta on);
    #: None where the GPU has no such counter (not listed in ``unavailable``: no field
    #: of the panel's).
    energy_mj: int | None = None
    #: A MIG-enabled GPU's slices; () for any other GPU.
    mig_devices: tuple[MigDevice, ...] = ()


@dataclass
class _Device:
    handle: Any
    handle_error: str | None = None
    lost: bool = False
    errors_seen: set[tuple[str, object]] = field(default_factory=set)


class _Library:
    """NVML calls that survive a driver lacking some functions.

    A function the driver does not export reaches Python in three guises: an
    ``NVMLError`` FUNCTION_NOT_FOUND (pynvml's ``dlsym`` failed), pynvml's
    ``NVMLLibraryMismatchError`` (its unversioned wrappers, e.g. the process queries,
    turn the first into this, which is no ``NVMLError``), or an ``AttributeError``
    (a pynvml too old to bind it). A variant found missing is logged once, never
    tried again, and the next older one is tried; with none left, the call raises
    FUNCTION_NOT_FOUND, which costs only the field that asked.
    """

    def __init__(self) -> None:
        self._missing: set[str] = set()

    def call(self, variants: tuple[Variant, ...], *args: Any) -> Any:
        for name, variant in variants:
            if name in self._missing:
                continue
            try:
                return variant(*args)
            except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError, AttributeError) as err:
                if isinstance(err, pynvml.NVMLError) and err.value not in _MISSING_ERRORS:
                    raise
                self._missing.add(name)
                log.info("NVML: this driver has no %s (%s); using an older call", name, err)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    def optional(self, variants: tuple[Variant, ...], *args: Any) -> Any:
        """The answer, or None when it cannot be had for any reason ("unknown")."""
        try:
            return self.call(variants, *args)
        except pynvml.NVMLError:
            return None
        except Exception:
            log.warning("NVML: %s failed unexpectedly", variants[0][0], exc_info=True)
            return None


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
        self._lib = _Library()
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
        driver = self._lib.optional(_DRIVER_VERSION)
        cuda = self._lib.optional(_CUDA_DRIVER_VERSION)
        cuda_text = f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None
        try:
            count = self._lib.call(_COUNT)
        except Exception as err:
            log.warning("NVML could not count GPUs: %s", err)
            self._status = NvmlStatus(False, str(err), driver, cuda_text)
            self._devices, self._inventory = [], []
            return
        devices = [self._open(index) for index in range(count)]
        inventory = [self._describe(index, device) for index, device in enumerate(devices)]
        reason = None if count else "NVML reports no GPU on this machine"
        self._status = NvmlStatus(count > 0, reason, driver, cuda_text)
        self._devices, self._inventory = devices, inventory

    def _open(self, index: int) -> _Device:
        try:
            return _Device(self._lib.call(_HANDLE_BY_INDEX, index))
        except Exception as err:
            lost = isinstance(err, pynvml.NVMLError) and err.value == pynvml.NVML_ERROR_GPU_IS_LOST
            if not lost:
                log.warning("GPU %d has no NVML handle: %s", index, err)
            return _Device(None, handle_error=str(err), lost=lost)

    def _describe(self, index: int, device: _Device) -> GpuInfo:
        if device.handle is None:
            return GpuInfo(index, None, None, None, None)
        handle, optional = device.handle, self._lib.optional
        memory = optional(_MEMORY, handle)
        limit = optional(_POWER_LIMIT, handle)
        mig = optional(_MIG_MODE, handle)
        virtualization = optional(_VIRTUALIZATION, handle)
        max_sm = optional(_MAX_CLOCK, handle, pynvml.NVML_CLOCK_SM)
        return GpuInfo(
            index=index,
            name=optional(_NAME, handle),
            uuid=optional(_UUID, handle),
            mem_total_mib=round(memory.total / MIB) if memory is not None else None,
            power_limit_w=limit / 1000.0 if limit is not None else None,
            mig_mode=None if mig is None else mig[0] == pynvml.NVML_DEVICE_MIG_ENABLE,
            virtualization=VIRTUALIZATION_MODES.get(virtualization),
            max_sm_clock_mhz=max_sm or None,
        )

    def refresh(self) -> None:
        """Retry initialisation now, or read the inventory again if GPUs came or went."""
        with self._lock:
            if not self._initialized:
                self._last_attempt = None
                self._ensure()
                return
            if self._lib.optional(_COUNT) != len(self._devices):
                self._load_inventory()

    def shutdown(self) -> None:
        with self._lock:
            if self._initialized:
                self._lib.optional(_SHUTDOWN)
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

    def mig_devices(self, index: int) -> tuple[MigDevice, ...]:
        """The slices of GPU ``index`` and the processes on each, without reading the
        rest of the GPU (a job's placement); () for a GPU not in MIG mode or not here."""
        with self._lock:
            if not self._ensure() or not 0 <= index < len(self._devices):
                return ()
            device = self._devices[index]
            return () if device.handle is None else self._mig_devices(index, device)

    def _read(self, index: int, device: _Device) -> GpuReading:
        if device.handle is None:
            return GpuReading(
                status="lost" if device.lost else "error", message=device.handle_error
            )
        values: dict[str, Any] = {}
        errors: list[str] = []
        unavailable: dict[str, str] = {}
        for label, reader in _FIELD_READERS:
            try:
                values[label] = reader(self._lib, device.handle)
            except Exception as err:  # whatever one field raises costs that field only
                code = err.value if isinstance(err, pynvml.NVMLError) else None
                if code == pynvml.NVML_ERROR_GPU_IS_LOST:
                    return GpuReading(status="lost", message=str(err))
                if code in UNAVAILABLE_ERRORS:
                    unavailable[label] = str(err)
                    continue
                text = str(err) if code is not None else f"{type(err).__name__}: {err}"
                errors.append(f"{label}: {text}")
                self._log_once(device, index, label, err, code)
        health = self._health(index, device)
        if health is None:
            return GpuReading(status="lost", message=str(pynvml.NVMLError(_LOST)))
        return GpuReading(
            "error" if errors else "ok",
            "; ".join(errors) or None,
            values.get("util"),
            values.get("mem"),
            values.get("temp"),
            values.get("power"),
            values.get("processes") or (),
            unavailable,
            health,
            self._lib.optional(_ENERGY, device.handle),  # a counter, not a panel field
            self._mig_devices(index, device),
        )

    def _mig_devices(self, index: int, device: _Device) -> tuple[MigDevice, ...]:
        """The slices of a GPU the inventory says is in MIG mode; one that cannot be read
        (gone since, refused) is left out, never the GPU's reading."""
        info = self._inventory[index] if index < len(self._inventory) else None
        if info is None or not info.mig_mode:
            return ()
        found = []
        for slot in range(self._lib.optional(_MAX_MIG_DEVICES, device.handle) or 0):
            try:
                handle = self._lib.call(_MIG_HANDLE, device.handle, slot)
            except pynvml.NVMLError:  # NOT_FOUND: no slice in that place
                continue
            found.append(self._mig_device(slot, handle))
        return tuple(found)

    def _mig_device(self, slot: int, handle: Any) -> MigDevice:
        optional = self._lib.optional
        name = optional(_NAME, handle)
        memory = optional(_MEMORY, handle)
        try:
            processes = _processes(self._lib, handle)
        except pynvml.NVMLError:
            processes = ()
        return MigDevice(
            index=slot,
            uuid=optional(_UUID, handle),
            gpu_instance=optional(_GPU_INSTANCE_ID, handle),
            compute_instance=optional(_COMPUTE_INSTANCE_ID, handle),
            profile=_mig_profile(name),
            mem_total_mib=round(memory.total / MIB) if memory is not None else None,
            mem_used_mib=memory.used / MIB if memory is not None else None,
            processes=processes,
        )

    def _health(self, index: int, device: _Device) -> GpuHealth | None:
        """The hardware's own figures, each on its own like the fields; an error costs the
        figure only (said once), never the GPU's status. None: the GPU is lost."""
        values: dict[str, Any] = {}
        unavailable: dict[str, str] = {}
        for label, reader in _HEALTH_READERS:
            try:
                values[label] = reader(self._lib, device.handle)
            except Exception as err:
                code = err.value if isinstance(err, pynvml.NVMLError) else None
                if code == _LOST:
                    return None
                unavailable[label] = str(err) if code is not None else type(err).__name__
                if code not in UNAVAILABLE_ERRORS:
                    self._log_once(device, index, label, err, code)
        return GpuHealth(**values, unavailable=unavailable)

    # -- events ----------------------------------------------------------------------

    def xid_events(self) -> tuple[Any, dict[int, str]]:
        """An NVML event set registered for XID critical errors on every GPU that has them,
        and the GPUs that refused, with NVML's reason (NOT_SUPPORTED on a MIG GPU or in a
        vGPU guest). Raises ``NVMLError`` when NVML or its event sets are not to be had."""
        with self._lock:
            if not self._ensure():
                raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
            event_set = self._lib.call(_EVENT_SET_CREATE)
            refused: dict[int, str] = {}
            for index, device in enumerate(self._devices):
                if device.handle is None:
                    refused[index] = device.handle_error or "no handle"
                    continue
                try:
                    supported = self._lib.call(_SUPPORTED_EVENTS, device.handle)
                    if not supported & pynvml.nvmlEventTypeXidCriticalError:
                        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
                    self._lib.call(
                        _REGISTER_EVENTS,
                        device.handle,
                        pynvml.nvmlEventTypeXidCriticalError,
                        event_set,
                    )
                except pynvml.NVMLError as err:
                    refused[index] = str(err)
            return event_set, refused

    def wait_xid(self, event_set: Any, timeout_ms: int) -> XidEvent | None:
        """The next XID of ``event_set``, or None after ``timeout_ms``. Blocks without the
        module's lock, so sampling goes on meanwhile (call it on a thread of its own)."""
        try:
            data = self._lib.call(_EVENT_SET_WAIT, event_set, timeout_ms)
        except pynvml.NVMLError as err:
            if err.value == pynvml.NVML_ERROR_TIMEOUT:
                return None
            raise
        if not data.eventType & pynvml.nvmlEventTypeXidCriticalError:
            return None
        index = self._lib.optional(_DEVICE_INDEX, data.device)
        return XidEvent(-1 if index is None else int(index), int(data.eventData), time.time())

    def free_events(self, event_set: Any) -> None:
        with self._lock:
            if self._initialized:
                self._lib.optional(_EVENT_SET_FREE, event_set)

    @staticmethod
    def _log_once(
        device: _Device, index: int, label: str, err: Exception, code: int | None
    ) -> None:
        key = (label, code if code is not None else type(err).__name__)
        if key not in device.errors_seen:
            device.errors_seen.add(key)
            log.warning("GPU %d: reading %s failed: %s", index, label, err, exc_info=code is None)


_LOST = pynvml.NVML_ERROR_GPU_IS_LOST


def _pynvml(name: str) -> Variant:
    """The variant that calls pynvml's binding of the same name, looked up when called."""
    return name, lambda *args: getattr(pynvml, name)(*args)


def _memory_v2(handle: Any) -> Any:
    return pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)


_DRIVER_VERSION = (_pynvml("nvmlSystemGetDriverVersion"),)
_CUDA_DRIVER_VERSION = (_pynvml("nvmlSystemGetCudaDriverVersion"),)
_COUNT = (_pynvml("nvmlDeviceGetCount"),)
_HANDLE_BY_INDEX = (_pynvml("nvmlDeviceGetHandleByIndex"),)
_SHUTDOWN = (_pynvml("nvmlShutdown"),)
_NAME = (_pynvml("nvmlDeviceGetName"),)
_UUID = (_pynvml("nvmlDeviceGetUUID"),)
_POWER_LIMIT = (_pynvml("nvmlDeviceGetEnforcedPowerLimit"),)
_MIG_MODE = (_pynvml("nvmlDeviceGetMigMode"),)
_MAX_MIG_DEVICES = (_pynvml("nvmlDeviceGetMaxMigDeviceCount"),)
_MIG_HANDLE = (_pynvml("nvmlDeviceGetMigDeviceHandleByIndex"),)
_GPU_INSTANCE_ID = (_pynvml("nvmlDeviceGetGpuInstanceId"),)
_COMPUTE_INSTANCE_ID = (_pynvml("nvmlDeviceGetComputeInstanceId"),)
_VIRTUALIZATION = (_pynvml("nvmlDeviceGetVirtualizationMode"),)
_UTILIZATION = (_pynvml("nvmlDeviceGetUtilizationRates"),)
_CLOCK = (_pynvml("nvmlDeviceGetClockInfo"),)
_MAX_CLOCK = (_pynvml("nvmlDeviceGetMaxClockInfo"),)
#: Renamed in R535; the old name is kept by today's drivers, but may go.
_CLOCK_REASONS = (
    _pynvml("nvmlDeviceGetCurrentClocksEventReasons"),
    _pynvml("nvmlDeviceGetCurrentClocksThrottleReasons"),
)
_ECC_ERRORS = (_pynvml("nvmlDeviceGetTotalEccErrors"),)
_RETIRED_PAGES = (_pynvml("nvmlDeviceGetRetiredPages"),)
_RETIRED_PENDING = (_pynvml("nvmlDeviceGetRetiredPagesPendingStatus"),)
_REMAPPED_ROWS = (_pynvml("nvmlDeviceGetRemappedRows"),)
_EVENT_SET_CREATE = (_pynvml("nvmlEventSetCreate"),)
_SUPPORTED_EVENTS = (_pynvml("nvmlDeviceGetSupportedEventTypes"),)
_REGISTER_EVENTS = (_pynvml("nvmlDeviceRegisterEvents"),)
_EVENT_SET_WAIT = (_pynvml("nvmlEventSetWait_v2"),)
_EVENT_SET_FREE = (_pynvml("nvmlEventSetFree"),)
_DEVICE_INDEX = (_pynvml("nvmlDeviceGetIndex"),)
_POWER = (_pynvml("nvmlDeviceGetPowerUsage"),)
_ENERGY = (_pynvml("nvmlDeviceGetTotalEnergyConsumption"),)
#: Memory info v2 separates reserved memory from used; older drivers have only v1.
_MEMORY = (("nvmlDeviceGetMemoryInfo_v2", _memory_v2), _pynvml("nvmlDeviceGetMemoryInfo"))
#: ``nvmlDeviceGetTemperatureV`` on new drivers, the deprecated call on old ones.
_TEMPERATURE = (_pynvml("nvmlDeviceGetTemperatureV"), _pynvml("nvmlDeviceGetTemperature"))
#: pynvml binds no v1 process query (a driver without ``_v2`` predates R450).
_PROCESS_QUERIES = tuple(
    (
        _pynvml(f"nvmlDevice{kind}RunningProcesses_v3"),
        _pynvml(f"nvmlDevice{kind}RunningProcesses_v2"),
    )
    for kind in ("GetCompute", "GetGraphics")
)


def _mig_profile(name: Any) -> str | None:
    """The profile in a MIG device's name ("NVIDIA H100 80GB HBM3 MIG 1g.10gb")."""
    if not isinstance(name, str) or " MIG " not in name:
        return None
    return name.rpartition(" MIG ")[2].strip() or None


def _processes(lib: _Library, handle: Any) -> tuple[GpuProcess, ...]:
    """Compute and graphics processes on one GPU (a pid in both is listed once).

    One kind refused still lists the other; both refused makes the field unavailable.
    """
    used_by_pid: dict[int, int | None] = {}
    refused: list[pynvml.NVMLError] = []
    for query in _PROCESS_QUERIES:
        try:
            found = lib.call(query, handle)
        except pynvml.NVMLError as err:
            if err.value not in UNAVAILABLE_ERRORS:
                raise
            refused.append(err)
            continue
        for proc in found:
            used = proc.usedGpuMemory  # None where the driver cannot tell (WDDM)
            used_by_pid.setdefault(proc.pid, None if used is None else round(used / MIB))
    if len(refused) == len(_PROCESS_QUERIES):
        raise refused[0]
    return tuple(GpuProcess(pid, used) for pid, used in used_by_pid.items())


#: One reader per field of a GpuReading, named as the panel's sample columns, each
#: tried on its own.
_FIELD_READERS: tuple[tuple[str, Callable[[_Library, Any], Any]], ...] = (
    ("util", lambda lib, h: float(lib.call(_UTILIZATION, h).gpu)),
    ("mem", lambda lib, h: lib.call(_MEMORY, h).used / MIB),
    ("temp", lambda lib, h: float(lib.call(_TEMPERATURE, h, pynvml.NVML_TEMPERATURE_GPU))),
    ("power", lambda lib, h: lib.call(_POWER, h) / 1000.0),
    ("processes", _processes),
)


def _ecc(lib: _Library, handle: Any) -> EccCounts:
    """The four ECC counters, each on its own; all refused makes the figure unavailable."""
    counts: list[int | None] = []
    refused: list[pynvml.NVMLError] = []
    for counter in (pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC):
        for kind in (
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        ):
            try:
                counts.append(int(lib.call(_ECC_ERRORS, handle, kind, counter)))
            except pynvml.NVMLError as err:
                if err.value not in UNAVAILABLE_ERRORS:
                    raise
                refused.append(err)
                counts.append(None)
    if len(refused) == len(counts):
        raise refused[0]
    return EccCounts(counts[0], counts[1], counts[2], counts[3])


def _retired_pages(lib: _Library, handle: Any) -> RetiredPages:
    causes = (
        pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
        pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
    )
    single, double = (len(lib.call(_RETIRED_PAGES, handle, cause)) for cause in causes)
    pending = lib.call(_RETIRED_PENDING, handle) == pynvml.NVML_FEATURE_ENABLED
    return RetiredPages(single, double, pending)


def _remapped_rows(lib: _Library, handle: Any) -> RemappedRows:
    corrected, uncorrected, pending, failed = lib.call(_REMAPPED_ROWS, handle)
    return RemappedRows(int(corrected), int(uncorrected), bool(pending), bool(failed))


#: One reader per field of a GpuHealth, each tried on its own.
_HEALTH_READERS: tuple[tuple[str, Callable[[_Library, Any], Any]], ...] = (
    ("clock_reasons", lambda lib, h: int(lib.call(_CLOCK_REASONS, h))),
    ("sm_clock_mhz", lambda lib, h: int(lib.call(_CLOCK, h, pynvml.NVML_CLOCK_SM))),
    ("ecc", _ecc),
    ("retired_pages", _retired_pages),
    ("remapped_rows", _remapped_rows),
)
