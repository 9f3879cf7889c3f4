"""A fake NVML driver for tests: ``libnvidia-ml.so.1`` built from ``fake_nvml.c``.

The real ``pynvml`` (and anything above it: MLflow's GPU monitor, the sampler, the
server API) loads the fake instead of NVIDIA's library and gets GPUs, values and
errors from a *scenario file* that tests write and rewrite.

Getting it loaded
-----------------
* A subprocess: ``env={**os.environ, **env_for(build_library(), scenario_path)}``;
  ``LD_LIBRARY_PATH`` makes ``CDLL("libnvidia-ml.so.1")`` find the fake.
* This process: ``load_in_process(build_library())`` before ``pynvml`` first loads
  the library (its ``nvmlInit``), then set ``os.environ["FAKE_NVML_SCENARIO"]``.
  The library reads that variable on every call, so tests may change it at will.

Scenario file
-------------
Written by :meth:`Scenario.write` (atomically: temporary file + ``os.replace``). The
library ``stat()``s it on every NVML call and reloads it when it changed; reloading
starts every sequence over. No variable or no file means "driver not loaded":
``nvmlInit`` fails with ``NVML_ERROR_DRIVER_NOT_LOADED``. A malformed file is
reported on stderr and every call, ``nvmlInit`` included, fails with
``NVML_ERROR_UNKNOWN``.

The format is line based; blank lines and lines starting with ``#`` are ignored::

    init_error DRIVER_NOT_LOADED     # optional; an error name or a number
    driver_version 550.54.15
    cuda_driver_version 12040
    nvml_version 12.550.54.15        # optional; derived from the two above
    without nvmlDeviceGetMemoryInfo_v2   # optional: functions this driver branch lacks
    gpu                              # starts device 0; the next "gpu" starts device 1
    name NVIDIA H100 80GB HBM3       # the rest of the line
    uuid GPU-fa4e0000-0000-4000-8000-000000000000
    util 10 50 NOT_SUPPORTED 90      # a sequence: one item per call, the last one held
    mem_util 5
    mem_total 85899345920
    mem_used 1073741824
    mem_reserved 0
    temp 40
    power 100000                     # mW
    power_limit 700000               # mW, nvmlDeviceGetEnforcedPowerLimit
    power_mgmt_limit 700000          # optional, defaults to power_limit
    energy 123456                    # optional, mJ
    fan 30                           # optional, %
    virtualization 2                 # optional: 0 none (default), 1 passthrough, 2 vGPU
                                     # guest, 3 host vGPU, 4 host vSGA
    clock_sm 1980                    # optional: clock_{graphics,sm,mem,video}
    max_clock_sm 1980                # optional: max_clock_{graphics,sm,mem,video}
    process 4242 1073741824          # a compute process: pid, used bytes (repeatable)
    graphics_process 4243 1024       # a graphics process (repeatable)
    processes_error NO_PERMISSION    # optional: the compute-process query fails
    memory_v2 1                      # 0: nvmlDeviceGetMemoryInfo_v2 -> FUNCTION_NOT_FOUND
    mig 1                            # optional: MIG mode; 1 also makes utilization
                                     # NOT_SUPPORTED and process queries NO_PERMISSION
    mig_device 1 0 3g.40gb 42949672960 1073741824 4242 1073741824
                                     # a MIG device (slice): GPU and compute instance
                                     # ids, profile, memory total and used, and the
                                     # process on it (pid, bytes; optional), repeatable
    lost 0                           # 1: every call on this GPU -> GPU_IS_LOST
    clock_reasons 64                 # optional: clocks event (throttle) reasons, a bitmask
    ecc_uncorrected_volatile 2       # optional: ecc_{corrected,uncorrected}_{volatile,aggregate}
    retired_pages_sbe 3              # optional: retired_pages_{sbe,dbe,pending}
    remapped_rows_corrected 1        # optional: remapped_rows_{corrected,uncorrected,
                                     # pending,failure}
    xid 79 1733490312000             # an XID critical error at that unix time in ms
                                     # (repeatable), delivered through NVML's event set

Numeric tokens are decimal integers; any other token is an error name (the suffix
of an ``NVML_ERROR_*`` constant) that the getter returns when it reaches it. A
numeric field left out answers ``NVML_ERROR_NOT_SUPPORTED``. Memory: v1 reports
``free = total - used``; v2 reports the same ``total`` and ``free``, ``reserved``,
and ``used - reserved`` as ``used``.

Driver branches without a function
----------------------------------
``pynvml`` finds each function with ``dlsym`` (``getattr`` on its ``CDLL``), so a
driver that lacks one is played by a build that does not export it:
``build_library(without=OLD_DRIVER_LACKS)`` links with a version script that makes
those symbols local, cached per set. A scenario says which set it expects
(``Scenario(without=...)``); the library refuses a scenario whose ``without`` names a
function it exports, so a test cannot run against the wrong build unnoticed. One
process holds one build: in-process tests use the full one, other sets go to a
subprocess through :func:`env_for`.

Call log
--------
With ``FAKE_NVML_CALL_LOG=<path>`` in the environment (``env_for(..., call_log=)``),
every NVML call appends ``"<unix_time_ms> <function> <device index> <pid>"`` to that
file (index -1 when the call is not about one device). :func:`read_call_log` and
:func:`count_calls` read it, from any process. In-process, :func:`call_count` asks
the loaded library directly.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "CLOCK_REASONS",
    "ERROR_CODES",
    "LIB_NAME",
    "NEW_DRIVER_LACKS",
    "OLD_DRIVER_LACKS",
    "VIRTUALIZATION_MODES",
    "FakeGpu",
    "MigSlice",
    "Scenario",
    "build_library",
    "call_count",
    "count_calls",
    "default_uuid",
    "env_for",
    "error_code",
    "h100_mig_slices",
    "load_in_process",
    "read_call_log",
    "reset_call_counts",
    "write_scenario_text",
]

LIB_NAME = "libnvidia-ml.so.1"
SOURCE = Path(__file__).with_name("fake_nvml.c")
CFLAGS = (
    "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror",
    f"-Wl,-soname,{LIB_NAME}",
)  # fmt: skip

#: NVML error names (the suffix of ``NVML_ERROR_*``) and their codes.
ERROR_CODES: Mapping[str, int] = {
    "UNINITIALIZED": 1,
    "INVALID_ARGUMENT": 2,
    "NOT_SUPPORTED": 3,
    "NO_PERMISSION": 4,
    "ALREADY_INITIALIZED": 5,
    "NOT_FOUND": 6,
    "INSUFFICIENT_SIZE": 7,
    "INSUFFICIENT_POWER": 8,
    "DRIVER_NOT_LOADED": 9,
    "TIMEOUT": 10,
    "IRQ_ISSUE": 11,
    "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13,
    "CORRUPTED_INFOROM": 14,
    "GPU_IS_LOST": 15,
    "RESET_REQUIRED": 16,
    "OPERATING_SYSTEM": 17,
    "LIB_RM_VERSION_MISMATCH": 18,
    "IN_USE": 19,
    "MEMORY": 20,
    "NO_DATA": 21,
    "VGPU_ECC_NOT_SUPPORTED": 22,
    "INSUFFICIENT_RESOURCES": 23,
    "FREQ_NOT_SUPPORTED": 24,
    "ARGUMENT_VERSION_MISMATCH": 25,
    "DEPRECATED": 26,
    "NOT_READY": 27,
    "GPU_NOT_FOUND": 28,
    "INVALID_STATE": 29,
    "RESET_TYPE_NOT_SUPPORTED": 30,
    "UNKNOWN": 999,
}

Value = int | str | Sequence[int | str]
"""A numeric field: a value, an error name, or a sequence of them (one per call)."""

_CLOCKS = ("graphics", "sm", "mem", "video")

#: What a driver of the 470 branch does not export, while pynvml 12+ calls it: the
#: ``_v3`` process queries and memory info v2 came with R510, the versioned
#: temperature query and the clocks *event* reasons (R535) later still.
OLD_DRIVER_LACKS = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetMPSComputeRunningProcesses_v3",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetCurrentClocksEventReasons",
)

#: What a driver of a branch after R535 may drop: the throttle-reasons query under its
#: old name, which R535 renamed to ``nvmlDeviceGetCurrentClocksEventReasons``.
NEW_DRIVER_LACKS = ("nvmlDeviceGetCurrentClocksThrottleReasons",)

#: ``nvmlClocksEventReason*`` bits, by name.
CLOCK_REASONS: Mapping[str, int] = {
    "idle": 0x1,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "power_brake": 0x80,
}

#: ``nvmlGpuVirtualizationMode_t`` by name.
VIRTUALIZATION_MODES: Mapping[str, int] = {
    "none": 0,
    "passthrough": 1,
    "vgpu": 2,  # a guest running on a vGPU
    "host_vgpu": 3,
    "host_vsga": 4,
}


def error_code(error: int | str) -> int:
    """The NVML code of an error name (``"GPU_IS_LOST"`` or ``"NVML_ERROR_GPU_IS_LOST"``)."""
    if isinstance(error, int):
        return error
    name = error.removeprefix("NVML_ERROR_")
    if name not in ERROR_CODES:
        raise ValueError(f"unknown NVML error name {error!r}; known: {', '.join(ERROR_CODES)}")
    return ERROR_CODES[name]


def _token(item: int | str, what: str) -> str:
    if isinstance(item, bool) or not isinstance(item, int | str):
        raise TypeError(f"{what}: expected an int or an NVML error name, got {item!r}")
    if isinstance(item, str):
        error_code(item)  # validates
        return item.removeprefix("NVML_ERROR_")
    return str(item)


def _tokens(value: Value, what: str) -> str:
    items: Sequence[int | str] = [value] if isinstance(value, int | str) else value
    if not items:
        raise ValueError(f"{what}: a sequence needs at least one item")
    return " ".join(_token(item, what) for item in items)


def _text(value: str, what: str) -> str:
    if not value.strip() or "\n" in value or "\r" in value or len(value.encode()) > 95:
        raise ValueError(f"{what}: need 1..95 bytes on one line, got {value!r}")
    return value.strip()


def _processes(procs: Sequence[tuple[int, int]] | str, key: str, what: str) -> list[str]:
    if isinstance(procs, str):
        return [f"{key}es_error {_token(procs, what)}"]
    return [f"{key} {int(pid)} {int(used)}" for pid, used in procs]


def default_uuid(index: int) -> str:
    """The UUID a GPU gets when none is given (the C library uses the same rule)."""
    return f"GPU-fa4e{index:04x}-0000-4000-8000-{index:012x}"


@dataclass(frozen=True)
class MigSlice:
    """One MIG device of a MIG-enabled GPU: its GPU and compute instance ids, its profile
    (``1g.10gb``), its memory (bytes), and the process on it (pid, used bytes)."""

    gpu_instance: int
    compute_instance: int
    profile: str
    mem_total: int
    mem_used: int = 0
    process: tuple[int, int] | None = None

    def render(self) -> str:
        if not self.profile or any(c.isspace() for c in self.profile):
            raise ValueError(f"a MIG profile is one word (1g.10gb), got {self.profile!r}")
        numbers = (self.gpu_instance, self.compute_instance, self.mem_total, self.mem_used)
        first = " ".join(str(int(n)) for n in numbers[:2])
        line = f"mig_device {first} {self.profile} {int(numbers[2])} {int(numbers[3])}"
        if self.process is not None:
            line += f" {int(self.process[0])} {int(self.process[1])}"
        return line


def h100_mig_slices(pid: int) -> tuple[MigSlice, ...]:
    """An H100 80GB's three MIG slices (issue 41's example): 3g.40gb with process ``pid``
    holding 12 GiB, 2g.20gb and 1g.10gb free."""
    gib = 1024**3
    return (
        MigSlice(1, 0, "3g.40gb", 40 * gib, 12 * gib, (pid, 12 * gib)),
        MigSlice(5, 0, "2g.20gb", 20 * gib, 0),
        MigSlice(13, 0, "1g.10gb", 10 * gib, 0),
    )


@dataclass
class FakeGpu:
    """One device of a scenario. Numeric fields take a :data:`Value`."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str | None = None  # default: default_uuid(index)
    util: Value = 0  # GPU utilization, %
    mem_util: Value = 0  # memory-controller utilization, %
    mem_total: Value = 80 * 1024**3  # bytes
    mem_used: Value = 0  # bytes, as memory info v1 reports it
    mem_reserved: Value = 0  # bytes; v2 reports used - reserved as used
    temp: Value = 40  # degrees C
    power: Value = 100_000  # mW
    power_limit: Value = 700_000  # mW (enforced limit)
    power_mgmt_limit: Value | None = None  # mW; None: same as power_limit
    energy: Value | None = None  # mJ since driver load; None: NOT_SUPPORTED
    fan: Value | None = None  # %; None: NOT_SUPPORTED (as on data-center GPUs)
    clocks: Mapping[str, Value] = field(default_factory=dict)  # graphics/sm/mem/video MHz
    max_clocks: Mapping[str, Value] = field(default_factory=dict)
    processes: Sequence[tuple[int, int]] | str = ()  # (pid, used bytes), or an error name
    graphics_processes: Sequence[tuple[int, int]] | str = ()
    memory_v2: bool = True  # False: nvmlDeviceGetMemoryInfo_v2 -> FUNCTION_NOT_FOUND
    lost: bool = False  # True: every call on this GPU -> GPU_IS_LOST
    mig: bool | None = None  # MIG mode; None: not MIG-capable (NOT_SUPPORTED)
    mig_devices: Sequence[MigSlice] = ()  # its MIG devices (slices), with mig=True
    virtualization: str | None = None  # a key of VIRTUALIZATION_MODES; None: "none"
    #: Clocks event (throttle) reasons: a bitmask, or names of CLOCK_REASONS; None:
    #: NOT_SUPPORTED.
    clock_reasons: Value | Sequence[str] | None = None
    #: ECC counts by (corrected|uncorrected, volatile|aggregate), e.g.
    #: {"uncorrected_volatile": 2}; the others answer NOT_SUPPORTED (a consumer GPU: none).
    ecc: Mapping[str, Value] = field(default_factory=dict)
    #: Retired pages (before Ampere): (multiple single-bit, double-bit, pending); None:
    #: NOT_SUPPORTED.
    retired_pages: tuple[int, int, bool] | None = None
    #: Remapped rows (Ampere on): (corrected, uncorrected, pending, failure); None:
    #: NOT_SUPPORTED.
    remapped_rows: tuple[int, int, bool, bool] | None = None
    #: XID critical errors: (xid, unix time in seconds), delivered once that time comes.
    xids: Sequence[tuple[int, float]] = ()

    def render(self, index: int) -> str:
        """This device's lines of the scenario file."""
        what = f"gpu {index}"
        lines = [
            "gpu",
            f"name {_text(self.name, f'{what} name')}",
            f"uuid {_text(self.uuid or default_uuid(index), f'{what} uuid')}",
        ]
        numeric: dict[str, Value | None] = {
            "util": self.util,
            "mem_util": self.mem_util,
            "mem_total": self.mem_total,
            "mem_used": self.mem_used,
            "mem_reserved": self.mem_reserved,
            "temp": self.temp,
            "power": self.power,
            "power_limit": self.power_limit,
            "power_mgmt_limit": self.power_mgmt_limit,
            "energy": self.energy,
            "fan": self.fan,
        }
        numeric["clock_reasons"] = _reasons(self.clock_reasons, f"{what} clock_reasons")
        for key, count in self.ecc.items():
            if key not in _ECC:
                raise ValueError(f"{what}: unknown ECC counter {key!r}; known: {_ECC}")
            numeric[f"ecc_{key}"] = count
        if self.retired_pages is not None:
            sbe, dbe, pending = self.retired_pages
            numeric |= {
                "retired_pages_sbe": sbe,
                "retired_pages_dbe": dbe,
                "retired_pages_pending": int(pending),
            }
        if self.remapped_rows is not None:
            corrected, uncorrected, pending, failure = self.remapped_rows
            numeric |= {
                "remapped_rows_corrected": corrected,
                "remapped_rows_uncorrected": uncorrected,
                "remapped_rows_pending": int(pending),
                "remapped_rows_failure": int(failure),
            }
        for prefix, clocks in (("clock", self.clocks), ("max_clock", self.max_clocks)):
            for kind, clock in clocks.items():
                if kind not in _CLOCKS:
                    raise ValueError(f"{what}: unknown clock {kind!r}; known: {_CLOCKS}")
                numeric[f"{prefix}_{kind}"] = clock
        for key, value in numeric.items():
            if value is not None:
                lines.append(f"{key} {_tokens(value, f'{what} {key}')}")
        lines += _processes(self.processes, "process", f"{what} processes")
        lines += _processes(self.graphics_processes, "graphics_process", f"{what} graphics")
        lines += [f"xid {int(xid)} {round(t * 1000)}" for xid, t in self.xids]
        lines.append(f"memory_v2 {int(self.memory_v2)}")
        lines.append(f"lost {int(self.lost)}")
        if self.mig is not None:
            lines.append(f"mig {int(self.mig)}")
        lines += [device.render() for device in self.mig_devices]
        if self.virtualization is not None:
            if self.virtualization not in VIRTUALIZATION_MODES:
                raise ValueError(
                    f"{what}: unknown virtualization mode {self.virtualization!r}; "
                    f"known: {', '.join(VIRTUALIZATION_MODES)}"
                )
            lines.append(f"virtualization {VIRTUALIZATION_MODES[self.virtualization]}")
        return "\n".join(lines) + "\n"


_ECC = (
    "corrected_volatile",
    "uncorrected_volatile",
    "corrected_aggregate",
    "uncorrected_aggregate",
)


def _reasons(value: Value | Sequence[str] | None, what: str) -> Value | None:
    """A clock-reasons value; names (``["hw_thermal"]``) become their bitmask."""
    if value is None or isinstance(value, int | str):
        return value
    items = list(value)
    if items and all(isinstance(item, str) and item in CLOCK_REASONS for item in items):
        mask = 0
        for item in items:
            mask |= CLOCK_REASONS[str(item)]
        return mask
    if any(isinstance(item, str) and item in CLOCK_REASONS for item in items):
        raise ValueError(f"{what}: either reason names or values, got {items!r}")
    return items  # a sequence of values, one per call


_write_lock = threading.Lock()
_last_mtime_ns = 0


def _unique_mtime_ns(path: Path) -> int:
    """A modification time later than any this process wrote and than the file's own.

    The library notices a rewrite by (inode, size, mtime, ctime); kernel timestamps
    are only as fine as the timer tick and inode numbers get reused, so each write
    gets a distinct mtime to make every rewrite visible.
    """
    global _last_mtime_ns
    try:
        current = path.stat().st_mtime_ns
    except FileNotFoundError:
        current = 0
    _last_mtime_ns = max(time.time_ns(), _last_mtime_ns + 1, current + 1)
    return _last_mtime_ns


@dataclass
class Scenario:
    """What the fake driver reports. ``init_error``: an error name or code for nvmlInit.

    ``without``: the functions this driver branch lacks; the library loaded must be
    a build without them (``build_library(without=...)``).
    """

    gpus: Sequence[FakeGpu] = ()
    init_error: int | str | None = None
    driver_version: str = "550.54.15"
    cuda_driver_version: int = 12040
    without: Sequence[str] = ()

    def render(self) -> str:
        """The scenario file's text."""
        lines = ["# fake NVML scenario (see tests/fake_nvml/__init__.py)"]
        if self.init_error is not None:
            code = error_code(self.init_error)  # validates names
            lines.append(f"init_error {code}")
        lines.append(f"driver_version {_text(self.driver_version, 'driver_version')}")
        lines.append(f"cuda_driver_version {int(self.cuda_driver_version)}")
        if self.without:
            lines.append(f"without {' '.join(_function_names(self.without))}")
        if len(self.gpus) > 64:
            raise ValueError("the fake driver supports at most 64 GPUs")
        return "\n".join(lines) + "\n" + "".join(g.render(i) for i, g in enumerate(self.gpus))

    def write(self, path: Path) -> Path:
        """Write the scenario to ``path`` atomically (temp file + os.replace); return path."""
        return write_scenario_text(path, self.render())


def write_scenario_text(path: Path, text: str) -> Path:
    """Atomically write raw scenario text (for formats :class:`Scenario` cannot express)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        with _write_lock:
            mtime = _unique_mtime_ns(path)
            os.utime(tmp, ns=(mtime, mtime))
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _function_names(names: Iterable[str]) -> list[str]:
    """Sorted, deduplicated NVML function names, refused unless they look like one."""
    checked = sorted(set(names))
    for name in checked:
        if not name.isidentifier() or not name.startswith("nvml"):
            raise ValueError(f"not an NVML function name: {name!r}")
    return checked


def build_library(out_dir: Path | None = None, *, without: Iterable[str] = ()) -> Path:
    """Compile fake_nvml.c into ``<dir>/libnvidia-ml.so.1`` and return the directory.

    ``without``: functions the build must not export (a driver branch that lacks
    them); a linker version script makes them local. Without ``out_dir`` the directory
    is a cache, ``tests/fake_nvml/.build/<hash>``, keyed by the source, the flags and
    ``without``, reused when present. Builds go to a temporary name first and are
    moved into place, so concurrent builders are safe.
    """
    source = SOURCE.read_bytes()
    hidden = _function_names(without)
    script = f"{{ global: *; local: {'; '.join(hidden)}; }};\n" if hidden else ""
    if out_dir is None:
        key = source + " ".join(CFLAGS).encode() + script.encode()
        digest = hashlib.sha256(key).hexdigest()[:16]
        out_dir = SOURCE.parent / ".build" / digest
        if (out_dir / LIB_NAME).is_file():
            return out_dir
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    compiler = shutil.which(os.environ.get("CC", "gcc"))
    if compiler is None:
        raise RuntimeError("building the fake NVML library needs gcc (or $CC) on PATH")
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{LIB_NAME}.", suffix=".tmp")
    os.close(fd)
    exports = Path(f"{tmp}.map")
    flags = list(CFLAGS)
    if script:
        exports.write_text(script, encoding="utf-8")
        flags.append(f"-Wl,--version-script={exports}")
    try:
        proc = subprocess.run(
            [compiler, *flags, "-o", tmp, str(SOURCE), "-lpthread", "-ldl"],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"compiling {SOURCE} failed:\n{proc.stderr}")
        os.replace(tmp, out_dir / LIB_NAME)
    finally:
        Path(tmp).unlink(missing_ok=True)
        exports.unlink(missing_ok=True)
    return out_dir


_loaded: list[ctypes.CDLL] = []


def load_in_process(lib_dir: Path) -> None:
    """Load the fake into this process so pynvml's ``CDLL("libnvidia-ml.so.1")`` finds it.

    The dynamic loader matches an already loaded library by its soname, so this must
    run before pynvml loads NVML (its first ``nvmlInit``). Idempotent; the first fake
    loaded stays in use for the life of the process.
    """
    if _loaded:
        return
    pynvml = sys.modules.get("pynvml")
    nvml_lib = getattr(pynvml, "nvmlLib", None)
    if nvml_lib is not None:
        if not hasattr(nvml_lib, "fake_nvml_call_count"):
            raise RuntimeError("pynvml already loaded a real NVML library in this process")
        _loaded.append(nvml_lib)  # started with env_for(): the fake is already in use
        return
    path = (Path(lib_dir) / LIB_NAME).resolve()
    _loaded.append(ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL))


def _library() -> ctypes.CDLL:
    if not _loaded:
        raise RuntimeError("the fake NVML library is not loaded in this process")
    lib = _loaded[0]
    lib.fake_nvml_call_count.restype = ctypes.c_ulonglong
    lib.fake_nvml_call_count.argtypes = [ctypes.c_char_p]
    return lib


def call_count(name: str | None = None) -> int:
    """Calls of NVML function ``name`` (all functions if None) made in this process."""
    return int(_library().fake_nvml_call_count(None if name is None else name.encode()))


def init_count() -> int | None:
    """``nvmlInit`` calls of this process not yet balanced by ``nvmlShutdown``; None where
    the fake is not loaded in this process."""
    return int(_library().fake_nvml_init_count()) if _loaded else None


def reset_call_counts() -> None:
    """Set this process's call counts back to zero."""
    _library().fake_nvml_reset_call_counts()


def env_for(lib_dir: Path, scenario_path: Path, *, call_log: Path | None = None) -> dict[str, str]:
    """Environment additions for a subprocess that should use the fake driver."""
    ld_path = os.environ.get("LD_LIBRARY_PATH")
    env = {
        "LD_LIBRARY_PATH": str(Path(lib_dir).resolve()) + (f":{ld_path}" if ld_path else ""),
        "FAKE_NVML_SCENARIO": str(Path(scenario_path).resolve()),
    }
    if call_log is not None:
        env["FAKE_NVML_CALL_LOG"] = str(Path(call_log).resolve())
    return env


def read_call_log(path: Path, *, pid: int | None = None) -> list[tuple[float, str, int]]:
    """Entries of a call log as (unix time in seconds, function name, device index).

    ``pid`` keeps only the calls made by that process. A missing log reads as empty.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    entries = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue
        if pid is not None and int(parts[3]) != pid:
            continue
        entries.append((int(parts[0]) / 1000.0, parts[1], int(parts[2])))
    return entries


def count_calls(
    path: Path, name: str, *, pid: int | None = None, since: float | None = None
) -> int:
    """How many calls of ``name`` the call log holds (optionally by ``pid``, at >= ``since``)."""
    return sum(
        1
        for when, fn, _index in read_call_log(path, pid=pid)
        if fn == name and (since is None or when >= math.floor(since * 1000) / 1000)
    )
