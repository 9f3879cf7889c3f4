"""What the notebook's GPU view (``%air_gpu``) knows, independent of how it is drawn.

The view keeps a copy of a sampler's history merged from the increments of
``GET jupyter-air/gpu`` answers (or of the same document from a sampler in the
kernel), polls it every ``interval`` seconds on its own thread, and stops polling
after ``idle_timeout`` seconds without an interaction with the view, as the sidebar
panel does. Nothing here imports ipywidgets or plotly: the widget only renders.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

#: The time ranges a view offers, as the sidebar panel: key -> seconds.
RANGES: dict[str, float] = {"15m": 900.0, "1h": 3600.0, "2h": 7200.0}

Column = list[float | None]
GPU_FIELDS = ("util", "mem", "temp", "power")


class GpuSource(Protocol):
    """Where the samples come from: the Jupyter server's sampler or one in the kernel."""

    #: Says where the samples come from, for the view's status line.
    description: str

    def fetch(self, since: float | None, inventory: str | None) -> dict[str, Any]:
        """The answer of ``GET jupyter-air/gpu`` for these query arguments."""
        ...

    def refresh(self, since: float | None, inventory: str | None) -> dict[str, Any]:
        """Sample now, then answer as :meth:`fetch` (``POST jupyter-air/gpu/sample``)."""
        ...

    def release(self) -> None:
        """Stop whatever the source keeps running while the view is idle or closed."""
        ...


@dataclass
class GpuHistory:
    """The client-side copy of a sampler's history (docs/api.md), trimmed to its span."""

    t: list[float] = field(default_factory=list)
    cpu: Column = field(default_factory=list)
    mem: Column = field(default_factory=list)
    gpu: list[dict[str, Column]] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    state: list[dict[str, Any]] = field(default_factory=list)
    nvml: dict[str, Any] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)
    inventory: str | None = None
    now: float = 0.0
    interval: float = 10.0
    span: float = 7200.0

    def query(self) -> tuple[float | None, str | None]:
        """``since`` and ``inventory``: ask only for what is missing."""
        if self.inventory is None:
            return None, None
        return (self.t[-1] if self.t else None), self.inventory

    def merge(self, doc: dict[str, Any]) -> bool:
        """Merge one answer; returns whether everything held was replaced."""
        reset = bool(doc.get("reset")) or doc.get("inventory") != self.inventory
        if "gpus" in doc:
            self.gpus = list(doc["gpus"])
        self.nvml = doc.get("nvml", self.nvml)
        self.host = doc.get("host", self.host)
        self.state = list(doc.get("state") or [])
        self.inventory = doc.get("inventory")
        self.now = float(doc.get("now") or time.time())
        self.interval = float(doc.get("interval") or self.interval)
        self.span = float(doc.get("history") or self.span)
        samples = doc.get("samples") or {}
        times = list(samples.get("t") or [])
        if reset:
            self.t, self.cpu, self.mem, self.gpu = [], [], [], []
        while len(self.gpu) < len(self.gpus):  # aligned with the inventory, whatever came
            self.gpu.append({name: [None] * len(self.t) for name in GPU_FIELDS})
        del self.gpu[len(self.gpus) :]
        last = self.t[-1] if self.t else None
        start = 0
        while last is not None and start < len(times) and times[start] <= last:
            start += 1  # a sample held already (never expected, but never doubled)
        new = range(start, len(times))
        self.t += times[start:]
        self.cpu += [_at(samples.get("cpu"), k) for k in new]
        self.mem += [_at(samples.get("mem"), k) for k in new]
        sent = samples.get("gpu") or []
        for i, series in enumerate(self.gpu):
            columns = sent[i] if i < len(sent) else {}
            for name in GPU_FIELDS:
                series[name] += [_at(columns.get(name), k) for k in new]
        self._trim()
        return reset

    def window(self, seconds: float) -> int:
        """Index of the first sample within ``seconds`` of the latest answer."""
        cutoff = self.now - seconds
        return next((k for k, t in enumerate(self.t) if t >= cutoff), len(self.t))

    def no_gpu_reason(self) -> str | None:
        """Why there is no GPU to show, in one line (None while there are GPUs, or before
        the first answer)."""
        if self.gpus or not self.nvml:
            return None
        if not self.nvml.get("available"):
            reason = str(self.nvml.get("reason") or "the NVIDIA driver is not available")
            return f"No GPU here: {reason.rstrip('.')}. Host CPU and memory below."
        return "No GPU here: the NVIDIA driver reports none. Host CPU and memory below."

    def latest(self, column: Column) -> float | None:
        return column[-1] if column else None

    def _trim(self) -> None:
        k = self.window(self.span)
        if k:
            del self.t[:k], self.cpu[:k], self.mem[:k]
            for series in self.gpu:
                for name in GPU_FIELDS:
                    del series[name][:k]


def _at(column: list[Any] | None, k: int) -> float | None:
    return column[k] if column is not None and k < len(column) else None


class GpuPoller:
    """Polls a source on its own thread while someone interacts with the view.

    After ``idle_timeout`` seconds without :meth:`touch`, the thread ends and the
    source is released (an in-kernel sampler stops); the next :meth:`touch` starts
    both again with an immediate poll. :meth:`close` ends them for good.
    ``on_update`` runs on the polling thread after every change of what a view shows.
    """

    def __init__(
        self,
        source: GpuSource,
        *,
        interval: float = 10.0,
        idle_timeout: float = 300.0,
        on_update: Callable[[GpuPoller], None] = lambda poller: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not interval > 0 or not idle_timeout > 0:
            raise ValueError("interval and idle_timeout must be > 0 seconds")
        self.source = source
        self.interval = interval
        self.idle_timeout = idle_timeout
        self.on_update = on_update
        self.history = GpuHistory()
        self.error: str | None = None
        self._clock = clock
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_touch = clock()
        self._due: float | None = None  # None: poll at once
        self._refresh = False
        self._paused = False
        self._closed = False

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def running(self) -> bool:
        """Whether a polling thread is at work (none while paused or closed)."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self) -> None:
        """Start polling (idempotent)."""
        with self._lock:
            if self._closed or self._thread is not None:
                return
            self._paused = False
            self._thread = threading.Thread(
                target=self._run, name="jupyter-air-gpu-view", daemon=True
            )
            self._thread.start()

    def touch(self) -> None:
        """An interaction with the view: the idle clock restarts; a paused view resumes."""
        with self._lock:
            self._last_touch = self._clock()
            resume = self._paused
            if resume:
                self._due = None
        if resume:
            self.start()

    def request_refresh(self) -> None:
        """The refresh button: sample now, on the polling thread (never the caller's)."""
        with self._lock:
            self._refresh = True
            self._due = None
        self.touch()
        self._wake.set()

    def close(self, timeout: float = 5.0) -> None:
        """Stop polling for good and release the source."""
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self.source.release()

    def step(self) -> float | None:
        """One turn of the polling thread: poll if due; the seconds to wait, or None to end."""
        with self._lock:
            if self._closed:
                return None
            now = self._clock()
            idle = now - self._last_touch >= self.idle_timeout
            if idle:  # this thread ends; the next touch() starts another
                self._paused = True
                self._thread = None
                self.source.release()
            elif self._due is not None and now < self._due and not self._refresh:
                return min(self._due, self._last_touch + self.idle_timeout) - now
            refresh, self._refresh = self._refresh, False
        if idle:
            self.on_update(self)
            return None
        self._poll(refresh)
        with self._lock:
            now = self._clock()
            self._due = now + self.interval
            return min(self._due, self._last_touch + self.idle_timeout) - now

    def _poll(self, refresh: bool) -> None:
        since, inventory = self.history.query()
        try:
            if refresh:
                doc = self.source.refresh(since, inventory)
            else:
                doc = self.source.fetch(since, inventory)
        except Exception as err:  # shown in the view; the next poll tries again
            self.error = f"{type(err).__name__}: {err}"
        else:
            self.error = None
            self.history.merge(doc)
        self.on_update(self)

    def _run(self) -> None:
        while True:
            wait = self.step()
            if wait is None:
                return
            self._wake.wait(max(0.0, wait))
            self._wake.clear()
