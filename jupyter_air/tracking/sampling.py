"""Sampling a node's system metrics on a thread, for every backend alike.

The one node of a local job (in the supervisor) and each node agent of a Ray job run
the same loop: every ``interval`` seconds it takes one sample with
``system_metrics.SystemSampler`` and hands it on. The sampler (psutil's monitors, NVML's
library) is loaded once the first sample is due, or when asked to ``prepare``. The loop
and that load run on threads of their own at the lowest priority; a caller's thread is
never lowered (a sample taken on it is taken at its priority). This module imports no
MLflow, and neither does the sampler, so a sample travels (a Ray poll's answer) without
it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    from ..gpu.nvml import GpuInfo, GpuReading

log = logging.getLogger(__name__)

#: MLflow's name of the host's CPU utilization (its ``CPUMonitor``'s).
CPU_PERCENT = "cpu_utilization_percentage"

#: Told each sample of every GPU (readings by NVML index, and the inventory).
GpuListener = Callable[["list[GpuReading]", "dict[int, GpuInfo]"], None]


def prefix(node: int, nnodes: int) -> str:
    """MLflow's prefix of a node's system metrics: ``system/``, or on a job of several
    nodes ``system/node_N/`` (MLflow's ``node_id``)."""
    return "system/" if nnodes == 1 else f"system/node_{node}/"


@dataclass(frozen=True)
class Sample:
    """One sample of a node, MLflow's metric names without their ``system/`` prefix."""

    t: float  # unix seconds
    step: int  # the node's sample number, from 0
    metrics: dict[str, float]

    def shifted(self, offset: float) -> Sample:
        """The same sample on a clock ``offset`` seconds behind this node's."""
        return Sample(self.t - offset, self.step, self.metrics)


def lowest_priority() -> None:
    """Nice 19 for the calling thread alone (a Linux thread has a nice value of its own),
    which must be one of ours: the threads and processes a thread starts inherit it, so
    a caller's thread lowered here would start its ranks, or its next attempt's, at it."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


class SampleLoop:
    """One node's samples every ``interval`` seconds, each given to ``on_sample`` on this
    loop's thread; ``sample_now`` wakes it for one at once."""

    def __init__(
        self,
        interval: float,
        on_sample: Callable[[Sample], None],
        on_gpu_sample: GpuListener | None = None,
        gpus: Collection[int] | None = None,
    ) -> None:
        self._interval = interval
        self._gpus = gpus
        self._on_sample = on_sample
        self._on_gpu_sample = on_gpu_sample
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._loading = threading.Lock()
        self._sampler: Any = None
        self._thread: threading.Thread | None = None
        self._last = False  # whether ``finish`` asked for a last sample

    @property
    def loaded(self) -> bool:
        """Whether the sampler is loaded here (a sample was or can be taken)."""
        return self._sampler is not None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="air-system-metrics", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        lowest_priority()
        # psutil measures the CPU % of each thread's call since that thread's last one:
        # without this, the first sample's is 0.0, with nothing to compare to. With it,
        # it is the host's CPU since the loop (the job) started.
        psutil.cpu_percent()
        failing = False
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.take()
                failing = False
            except Exception as err:  # said once while it lasts; the next may work
                if not failing:
                    log.warning("system-metrics sample failed: %r", err)
                failing = True
        self._take_last()

    @property
    def gpus(self) -> Collection[int] | None:
        """The job's GPUs (NVML indices) whose energy the samples carry; None: all."""
        return self._gpus

    @gpus.setter
    def gpus(self, gpus: Collection[int] | None) -> None:
        """Known once the ranks are: a sampler loaded before (a node agent loads it as it
        starts) counts their energy alone from now on, as one loaded after would."""
        with self._loading:
            self._gpus = gpus
            if self._sampler is not None:
                self._sampler.energy_of(gpus)

    def sample_now(self) -> None:
        """Take the next sample at once (a session cell ended with none in its span)."""
        self._wake.set()

    def prepare(self) -> None:
        """Load the sampler in the background, at the lowest priority."""
        threading.Thread(target=self._load_low, name="air-system-metrics-load", daemon=True).start()

    def _load_low(self) -> None:
        lowest_priority()
        self._load()

    def _load(self) -> Any:
        with self._loading:  # one load, whichever thread comes first
            if self._sampler is None:
                from ..gpu.nvml import Nvml
                from .system_metrics import SystemSampler

                self._sampler = SystemSampler(Nvml(), self._on_gpu_sample, self._gpus)
            return self._sampler

    def take(self) -> None:
        """One sample, now, handed on (the first loads the sampler)."""
        self._on_sample(self._load().sample())

    def finish(self, last: bool = True) -> None:
        """Stop; with ``last``, one last sample so even a short job has its figures,
        taken on the loop's thread: psutil's CPU figure is the span since that thread's
        last reading (the last sample, or the loop's start), and another thread's would
        compare with nothing and say 0.0. Without ``last``, a loop still loading
        the sampler is not waited for."""
        self._last = last
        self._stop.set()
        self._wake.set()
        try:
            if self._thread is not None and (last or self.loaded):
                self._thread.join(30)
            elif self._thread is None:  # never started: taken here
                self._take_last()
        finally:
            if self._sampler is not None:
                self._sampler.close()

    def _take_last(self) -> None:
        if not self._last:
            return
        try:
            self.take()
        except Exception as err:  # the samples already taken still count
            log.warning("last system-metrics sample failed: %s", err)
