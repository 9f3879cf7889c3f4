"""One background sampler per Jupyter server, shared by every panel and browser tab.

It samples every GPU and the host every ``interval`` seconds into a ring of
``history`` seconds, scheduled on ``time.monotonic()``. When no client has asked for
samples for ``idle_timeout`` seconds it stops sampling; the next request resumes it
with an immediate sample, so a forgotten browser tab costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import socket
import threading
import time
from dataclasses import asdict
from typing import Any

import psutil
from traitlets import Float, TraitError, validate
from traitlets.config import LoggingConfigurable

from .faults import FaultTracker, Problem, XidWatch, xid_problem
from .history import Row, SampleHistory
from .nvml import MIB, GpuHealth, GpuInfo, GpuReading, MigDevice, Nvml, NvmlStatus


class GpuSampler(LoggingConfigurable):
    """Samples NVML and psutil on one thread and keeps the last two hours."""

    interval = Float(
        10.0,
        help="Seconds between two samples of every GPU and of the host.",
    ).tag(config=True)

    history = Float(
        7200.0,
        help="Seconds of samples kept in memory for the GPU resources panel (a fixed-size ring).",
    ).tag(config=True)

    idle_timeout = Float(
        300.0,
        help=(
            "Stop sampling when no client has asked for samples for this many seconds; "
            "the next request resumes sampling with an immediate sample."
        ),
    ).tag(config=True)

    @validate("interval", "history", "idle_timeout")
    def _positive(self, proposal: dict[str, Any]) -> float:
        value = float(proposal["value"])
        if not value > 0:
            raise TraitError(f"{proposal['trait'].name} must be > 0 seconds, got {value}")
        return value

    def __init__(self, nvml: Nvml | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._nvml = nvml or Nvml()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_request = time.monotonic()
        self._last_sample: float | None = None
        self._paused = False
        self._host = {
            "hostname": socket.gethostname(),
            "cpu_count": psutil.cpu_count(),
            "mem_total_mib": round(psutil.virtual_memory().total / MIB),
        }
        self._status = NvmlStatus(available=False, reason="not sampled yet")
        self._inventory: list[GpuInfo] = []
        self._generation = -1
        self._inventory_id = _inventory_id(self._status, [])
        self._latest: list[GpuReading] = []
        self._faults = FaultTracker()
        self._problems: list[list[Problem]] = []
        #: Each GPU's hardware figures (ECC, retired pages...) and when they last changed:
        #: an answer carries them only when they changed after its ``since``.
        self._figures: list[dict[str, Any]] = []
        self._figures_at: list[float] = []
        #: XID critical errors, on a thread of its own from the first sample on (an event
        #: ends a wait at once; the wait's length only bounds how late a stop is seen).
        self._xids = XidWatch(keep=self.history, wait_ms=2000)
        self._read_failures: set[str] = set()
        self._history = self._new_history(0)
        self.samples_taken = 0

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Start the sampling thread (idempotent)."""
        if self._thread is not None:
            return
        psutil.cpu_percent(interval=None)  # prime: the first call has no reference point
        self._stopping.clear()
        self._last_request = time.monotonic()
        self._thread = threading.Thread(
            target=self._run, name="jupyter-air-gpu-sampler", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and release NVML."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._xids.stop(timeout=0)  # it ends at its next wake, within a second
        self._nvml.shutdown()

    @property
    def paused(self) -> bool:
        return self._paused

    def _run(self) -> None:
        while not self._stopping.is_set():
            now = time.monotonic()
            with self._lock:
                if now - self._last_request >= self.idle_timeout:
                    if not self._paused:
                        self.log.info("GPU sampler paused: no client for %.0f s", self.idle_timeout)
                    self._paused = True
                elif self._last_sample is None or now >= self._last_sample + self.interval:
                    try:
                        self._sample_locked()
                    except Exception:  # the thread must outlive any one bad sample
                        self.log.exception("GPU sample failed")
                paused = self._paused
                due = (self._last_sample or now) + self.interval
                idle_at = self._last_request + self.idle_timeout
            if paused:
                self._wake.wait()
            else:
                self._wake.wait(max(0.0, min(due, idle_at) - time.monotonic()))
            self._wake.clear()

    # -- sampling --------------------------------------------------------------------

    def sample_now(self) -> None:
        """Take a sample at once (the refresh button); the schedule restarts from it."""
        self._nvml.refresh()
        with self._lock:
            self._last_request = time.monotonic()
            self._paused = False
            self._sample_locked()
        self._wake.set()

    def touch(self) -> bool:
        """Record a client's request; resume with an immediate sample if paused.

        Returns whether the sampler had been paused.
        """
        with self._lock:
            self._last_request = time.monotonic()
            was_paused = self._paused
            if was_paused:
                self._paused = False
                self.log.info("GPU sampler resumed")
            if was_paused or self._last_sample is None:
                self._sample_locked()
        if was_paused:
            self._wake.set()
        return was_paused

    def _sample_locked(self) -> None:
        self._last_sample = time.monotonic()
        t = round(time.time(), 3)
        last = self._history.last_t
        if last is not None and t <= last:  # same millisecond, or the wall clock stepped back
            t = round(last + 0.001, 3)
        try:
            readings = self._nvml.read_all()
        except Exception as err:  # the host figures and the inventory still come
            self._log_read_failure(err)
            readings = []
        if self._nvml.generation != self._generation:
            self._generation = self._nvml.generation
            status, inventory = self._nvml.status(), self._nvml.inventory()
            self._status, self._inventory = status, inventory
            self._inventory_id = _inventory_id(status, inventory)
            if len(inventory) != self._history.n_gpus:
                self._history = self._new_history(len(inventory))
        if len(readings) != len(self._inventory):  # NVML went away between the two calls
            readings = [GpuReading(status="error", message="not read")] * len(self._inventory)
        cpu = psutil.cpu_percent(interval=None)
        mem_used = psutil.virtual_memory().used / MIB
        self._history.append(
            Row(
                t=t,
                host=(cpu, mem_used),
                gpus=[(r.util, r.mem_used_mib, r.temp_c, r.power_w) for r in readings],
            )
        )
        self._latest = readings
        self._problems = [
            self._faults.update(t, i, r.health, info.max_sm_clock_mhz)
            for (i, r), info in zip(enumerate(readings), self._inventory, strict=True)
        ]
        figures = [_figures(r.health, self._xids.support(i)) for i, r in enumerate(readings)]
        if len(figures) != len(self._figures):  # another inventory: every figure is new
            self._figures, self._figures_at = [{}] * len(figures), [t] * len(figures)
        self._figures_at = [
            t if new != old else at
            for new, old, at in zip(figures, self._figures, self._figures_at, strict=True)
        ]
        self._figures = figures
        if readings:
            self._xids.start()
        self.samples_taken += 1

    def _log_read_failure(self, err: Exception) -> None:
        """Log a failed read of the GPUs, once per kind of failure."""
        kind = f"{type(err).__name__}: {err}"
        if kind not in self._read_failures:
            self._read_failures.add(kind)
            self.log.warning("GPUs not read: %s", kind, exc_info=err)

    def _new_history(self, n_gpus: int) -> SampleHistory:
        capacity = math.floor(self.history / self.interval) + 1
        return SampleHistory(capacity=capacity, n_gpus=n_gpus, span=self.history)

    # -- reading ---------------------------------------------------------------------

    def snapshot(self, since: float | None = None, inventory: str | None = None) -> dict[str, Any]:
        """The JSON document of ``GET jupyter-air/gpu`` (see docs/api.md)."""
        was_paused = self.touch()
        with self._lock:
            reset = inventory is not None and inventory != self._inventory_id
            if reset:
                since = None
            doc: dict[str, Any] = {
                "now": round(time.time(), 3),
                "interval": self.interval,
                "history": self.history,
                "paused": was_paused,
                "reset": reset,
                "inventory": self._inventory_id,
            }
            if inventory != self._inventory_id:  # what the client holds is stale or absent
                doc["nvml"] = asdict(self._status)
                doc["host"] = self._host
                doc["gpus"] = [asdict(g) for g in self._inventory]
            doc["samples"] = self._history.columns(since=since, now=time.time())
            doc["state"] = [
                _state(r, self._health(i, problems, since))
                for (i, r), problems in zip(enumerate(self._latest), self._problems, strict=True)
            ]
        return doc

    def _health(self, index: int, problems: list[Problem], since: float | None) -> dict[str, Any]:
        """A GPU's problems, XIDs received included, and its figures when they changed
        after ``since`` (the client keeps those it holds)."""
        xids = [xid_problem(e) for e in self._xids.events(index, since=time.time() - self.history)]
        health: dict[str, Any] = {"problems": [_problem(p) for p in [*problems, *xids]]}
        if since is None or self._figures_at[index] > since:
            health.update(self._figures[index])
        return health


def _figures(health: GpuHealth, xids_unwatched: str | None) -> dict[str, Any]:
    """The figures behind a GPU's memory problems, as the panel shows them."""
    return {
        "ecc": asdict(health.ecc) if health.ecc else None,
        "retired_pages": asdict(health.retired_pages) if health.retired_pages else None,
        "remapped_rows": asdict(health.remapped_rows) if health.remapped_rows else None,
        "xids_unwatched": xids_unwatched,
        "unavailable": health.unavailable,
    }


def _problem(problem: Problem) -> dict[str, Any]:
    return {**asdict(problem), "severity": problem.severity.value}


def _state(reading: GpuReading, health: dict[str, Any]) -> dict[str, Any]:
    processes = {p.pid: p for p in reading.processes}
    for device in reading.mig_devices:  # a MIG GPU's processes are its slices'
        processes.update({p.pid: p for p in device.processes if p.pid not in processes})
    state: dict[str, Any] = {
        "status": reading.status,
        "message": reading.message,
        "unavailable": reading.unavailable,
        "processes": [
            {"pid": p.pid, "name": _process_name(p.pid), "mem_mib": p.used_mib, "owner": None}
            for p in processes.values()
        ],
        "health": health,
    }
    if reading.energy_mj is not None:  # NVML's energy counter, for the metrics' gauge
        state["energy_mj"] = reading.energy_mj
    if reading.mig_devices:  # only a GPU in MIG mode has the key
        state["mig"] = [_slice(device, list(processes)) for device in reading.mig_devices]
    return state


def _slice(device: MigDevice, pids: list[int]) -> dict[str, Any]:
    """A MIG slice; its processes by their place in the GPU's list, so that what the
    server hides of another user's process there is hidden here too."""
    state = asdict(device)
    state["processes"] = [pids.index(p.pid) for p in device.processes]
    return state


def _process_name(pid: int) -> str | None:
    try:
        return psutil.Process(pid).name()
    except (psutil.Error, OSError):
        return None


def _inventory_id(status: NvmlStatus, inventory: list[GpuInfo]) -> str:
    text = json.dumps([asdict(status), [asdict(g) for g in inventory]], sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:12]
