"""What a GPU's hardware says is wrong, in words: a clock held down (thermal, power, a
hardware slowdown) and since when, ECC errors, retired pages and remapped rows, and the
XID critical errors NVML's event set delivers.

``nvml`` reads the figures; this module says what they mean. The GPU panel shows each
GPU's problems (``FaultTracker``), the job's hints name the rank behind a throttled GPU
(``hardware_hints``), and a rank's death names an XID of its GPU that coincides
(``XidWatch``, on a thread of its own: waiting for events never stalls a sample).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

import pynvml

from .nvml import GpuHealth, Nvml, XidEvent

log = logging.getLogger(__name__)


class Throttle(Enum):
    """Why a GPU's clock is held down, by what the user can do about it."""

    THERMAL = "thermal slowdown"
    POWER = "power capping"
    HW_SLOWDOWN = "hardware slowdown"


#: The ``nvmlClocksEventReason*`` bits behind each throttle; idle, application clocks,
#: sync boost and display clocks are no fault.
THROTTLE_BITS: Mapping[Throttle, int] = {
    Throttle.THERMAL: (
        pynvml.nvmlClocksEventReasonSwThermalSlowdown
        | pynvml.nvmlClocksEventReasonHwThermalSlowdown
    ),
    Throttle.POWER: (
        pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
    ),
    Throttle.HW_SLOWDOWN: pynvml.nvmlClocksEventReasonHwSlowdown,
}

#: What the common XIDs mean (NVIDIA's XID catalogue, in a few words).
XID_NAMES: Mapping[int, str] = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    32: "invalid or corrupted push buffer",
    43: "GPU stopped processing",
    45: "preemptive cleanup, after an earlier error",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    68: "video processor exception",
    69: "graphics engine class error",
    74: "NVLink error",
    79: "fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}


class Severity(Enum):
    WARN = "warn"  # slower, or worth watching
    ERROR = "error"  # a fault: results or the job at risk, a reset or a replacement due


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one GPU: ``kind`` (a throttle's name, ``ecc``,
    ``retired_pages``, ``remapped_rows``, ``xid``), the words, since when (unix
    seconds, where known), and for a throttle the share of its maximum clock left."""

    kind: str
    text: str
    severity: Severity
    since: float | None = None
    clock_percent: int | None = None

    def sentence(self) -> str:
        """``thermal slowdown since 14:02, 31 % of its clock``."""
        said = self.text
        if self.since is not None and self.kind != "xid":
            said += f" since {clock_time(self.since, seconds=False)}"
        if self.clock_percent is not None:
            said += f", {self.clock_percent} % of its clock"
        return said


def throttles(reasons: int | None) -> list[Throttle]:
    """The throttles a clocks-event-reasons bitmask holds."""
    if not reasons:
        return []
    return [throttle for throttle, bits in THROTTLE_BITS.items() if reasons & bits]


def xid_text(xid: int) -> str:
    """``XID 79 (fallen off the bus)``."""
    name = XID_NAMES.get(xid)
    return f"XID {xid} ({name})" if name else f"XID {xid}"


def clock_time(t: float, seconds: bool = True) -> str:
    """Local wall-clock time: ``14:05:12`` (or ``14:05``)."""
    return time.strftime("%H:%M:%S" if seconds else "%H:%M", time.localtime(t))


def clock_percent(health: GpuHealth, max_sm_clock_mhz: int | None) -> int | None:
    """The SM clock now as a share of its maximum."""
    if health.sm_clock_mhz is None or not max_sm_clock_mhz:
        return None
    return round(health.sm_clock_mhz / max_sm_clock_mhz * 100)


def memory_problems(health: GpuHealth) -> list[Problem]:
    """ECC errors, retired pages and remapped rows that call for attention."""
    found = []
    ecc = health.ecc
    if ecc is not None and ecc.uncorrected_volatile:
        found.append(
            Problem(
                "ecc",
                f"{ecc.uncorrected_volatile} uncorrected ECC error"
                f"{_s(ecc.uncorrected_volatile)} since the driver loaded",
                Severity.ERROR,
            )
        )
    pages = health.retired_pages
    if pages is not None and pages.pending:
        found.append(
            Problem("retired_pages", "a page retirement waits for a reset", Severity.ERROR)
        )
    elif pages is not None and pages.double_bit:
        text = f"{pages.double_bit} page{_s(pages.double_bit)} retired for double-bit errors"
        found.append(Problem("retired_pages", text, Severity.WARN))
    rows = health.remapped_rows
    if rows is not None and rows.failed:
        found.append(Problem("remapped_rows", "a row remapping failed", Severity.ERROR))
    elif rows is not None and rows.pending:
        found.append(Problem("remapped_rows", "a row remapping waits for a reset", Severity.ERROR))
    elif rows is not None and rows.uncorrected:
        text = f"{rows.uncorrected} row{_s(rows.uncorrected)} remapped for uncorrected errors"
        found.append(Problem("remapped_rows", text, Severity.WARN))
    return found


class FaultTracker:
    """The problems of a machine's GPUs over successive samples: a throttle is dated
    from the first sample that showed it, for as long as the samples go on showing it."""

    def __init__(self) -> None:
        self._since: dict[tuple[int, Throttle], float] = {}

    def update(
        self, t: float, index: int, health: GpuHealth, max_sm_clock_mhz: int | None
    ) -> list[Problem]:
        """The GPU's problems in this sample (at unix time ``t``); ``max_sm_clock_mhz``
        (``GpuInfo``'s) is what a throttled clock is a share of."""
        active = throttles(health.clock_reasons)
        for throttle in Throttle:
            key = (index, throttle)
            if throttle in active:
                self._since.setdefault(key, t)
            else:
                self._since.pop(key, None)
        share = clock_percent(health, max_sm_clock_mhz)
        found = [
            Problem(
                throttle.name.lower(),
                throttle.value,
                Severity.WARN,
                self._since[(index, throttle)],
                share,
            )
            for throttle in active
        ]
        return found + memory_problems(health)


def xid_problem(event: XidEvent) -> Problem:
    return Problem(
        "xid", f"{xid_text(event.xid)} at {clock_time(event.t)}", Severity.ERROR, event.t
    )


def _s(n: int) -> str:
    return "" if n == 1 else "s"


class XidWatch:
    """XID critical errors of this machine's GPUs, waited for on a thread of its own with
    NVML's event set (its own NVML handle, so a sampler's shutdown never frees it).

    A GPU that cannot deliver them (NOT_SUPPORTED on a MIG GPU or in a vGPU guest) is
    listed in ``refused`` with NVML's reason; without NVML, ``reason`` says why and the
    thread tries again every ``retry`` seconds. Events are kept ``keep`` seconds.
    """

    #: ``reason`` until the thread has tried to open its event set.
    NOT_STARTED = "not started"

    def __init__(
        self,
        nvml: Nvml | None = None,
        *,
        wait_ms: int = 500,
        keep: float = 7200.0,
        retry: float = 60.0,
    ) -> None:
        self._nvml = nvml or Nvml(retry_interval=0)
        self._wait_ms = wait_ms
        self._keep = keep
        self._retry = retry
        self._events: deque[XidEvent] = deque(maxlen=1000)
        self._stop = threading.Event()
        self._turn = threading.Condition()
        self._turn_began = 0.0  # when the last finished wait began (unix seconds)
        self._thread: threading.Thread | None = None
        self._waiting = False  # an event set with a GPU registered is waited on
        self.refused: dict[int, str] = {}
        self.reason: str | None = self.NOT_STARTED

    def start(self) -> XidWatch:
        """Start the thread (idempotent; after ``stop``, a new one once the last ended)."""
        thread = self._thread
        if thread is not None and thread.is_alive() and not self._stop.is_set():
            return self
        if thread is not None:
            thread.join()  # a stopped one ends within one wait
        self._stop = stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(stop,), name="air-gpu-xids", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread; it ends within one wait (``timeout``: how long to wait here)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def events(self, index: int | None = None, since: float | None = None) -> list[XidEvent]:
        """The XIDs received (of GPU ``index``, at or after ``since``), oldest first."""
        with self._turn:
            held = list(self._events)
        return [
            e
            for e in held
            if (index is None or e.index == index) and (since is None or e.t >= since)
        ]

    @property
    def watching(self) -> bool:
        """Whether an event set with a GPU registered is being waited on."""
        return self._waiting

    def caught_up(self, t: float, timeout: float = 5.0) -> bool:
        """Wait until every XID delivered by unix time ``t`` has been received: a wait
        that began after ``t`` has ended. At once when nothing is watched."""
        deadline = time.monotonic() + timeout
        with self._turn:
            while self._turn_began < t and self._waiting:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._turn.wait(left)
        return True

    def _run(self, stop: threading.Event) -> None:
        event_set = None
        failing: str | None = None
        try:
            while not stop.is_set():
                if event_set is None:
                    event_set = self._open(stop)
                    if event_set is None:
                        stop.wait(self._retry)
                        continue
                began = time.time()
                try:
                    event = self._nvml.wait_xid(event_set, self._wait_ms)
                except pynvml.NVMLError as err:  # a lost GPU: said once, tried again
                    if stop.is_set():
                        break
                    if str(err) != failing:
                        log.warning("waiting for GPU XID events failed: %s", err)
                    failing = str(err)
                    stop.wait(1.0)
                    event = None
                else:
                    failing = None
                with self._turn:
                    if event is not None:
                        self._events.append(event)
                        log.warning("GPU %d reported %s", event.index, xid_text(event.xid))
                    while self._events and self._events[0].t < time.time() - self._keep:
                        self._events.popleft()
                    self._turn_began = began
                    self._turn.notify_all()
        finally:
            if event_set is not None:
                self._nvml.free_events(event_set)
            self._nvml.shutdown()
            self._waited(False)

    def _waited(self, waiting: bool) -> None:
        with self._turn:
            self._waiting = waiting
            self._turn.notify_all()

    def _open(self, stop: threading.Event) -> Any:
        try:
            event_set, refused = self._nvml.xid_events()
        except pynvml.NVMLError as err:
            self.reason = str(err) if self._nvml.status().available else self._nvml.status().reason
            return None
        self.refused, self.reason = refused, None
        watched = len(self._nvml.inventory()) - len(refused)
        if watched <= 0:  # every GPU refused (MIG, vGPU) or none: nothing to wait for
            stop.wait()
        else:
            self._waited(True)
        return event_set

    def support(self, index: int) -> str | None:
        """Why XIDs of GPU ``index`` are not watched, or None while they are (or are
        about to be: the thread has not tried yet)."""
        reason = None if self.reason == self.NOT_STARTED else self.reason
        return self.refused.get(index) or reason


def hardware_hints(
    problems: Mapping[int, Iterable[Problem]], rank_of: Mapping[int, int]
) -> list[tuple[str, str, float]]:
    """The hints of the job's GPUs' problems: (kind, text, figure), the GPU named with
    its rank: ``GPU 3 (rank 3): thermal slowdown since 14:02, 31 % of its clock``."""
    found = []
    for index, listed in sorted(problems.items()):
        rank = rank_of.get(index)
        who = f"GPU {index}" + (f" (rank {rank})" if rank is not None else "")
        for problem in listed:
            if problem.kind == "xid":
                continue  # said in the death it coincides with
            kind = "gpu_throttle" if problem.kind in _THROTTLE_KINDS else "gpu_memory_errors"
            figure = problem.clock_percent if problem.clock_percent is not None else 0
            found.append((kind, f"{who}: {problem.sentence()}", float(figure)))
    return found


_THROTTLE_KINDS = frozenset(t.name.lower() for t in Throttle)


class HealthSample(Protocol):
    """One reading of a GPU as the hints hold it (``hints.GpuSample``)."""

    @property
    def health(self) -> GpuHealth | None: ...

    @property
    def max_sm_clock_mhz(self) -> int | None: ...


class HardwareWatch:
    """The problems of a job's GPUs over its samples, for the job's hints."""

    def __init__(self, rank_gpus: Mapping[int, int]) -> None:
        self._rank_of: dict[int, int] = {}
        for rank, index in sorted(rank_gpus.items()):
            self._rank_of.setdefault(index, rank)
        self._tracker = FaultTracker()
        self._problems: dict[int, list[Problem]] = {}

    def add(self, t: float, samples: Mapping[int, HealthSample]) -> None:
        for index in self._rank_of:
            sample = samples.get(index)
            if sample is not None and sample.health is not None:
                update = self._tracker.update(t, index, sample.health, sample.max_sm_clock_mhz)
                self._problems[index] = update

    def hints(self) -> list[tuple[str, str, float]]:
        return hardware_hints(self._problems, self._rank_of)
