"""System metrics of a job's runs: one sampler for every node, one path into MLflow.

Every backend samples its nodes with ``SystemSampler`` on a ``sampling.SampleLoop``, and
the supervisor journals every sample with rank 0's metrics (``journal.append_samples``),
under MLflow's names: ``system/<metric>`` for a job of one node, ``system/node_N/<metric>``
for each node of several.

The monitors are MLflow's as it has them (``mlflow.system_metrics.metrics``: the same
names, the same psutil calls, a sample the mean of its collections), written here on
psutil: MLflow's take ``import mlflow`` with them, about 2 s of CPU and 200 MB in every
supervisor and node agent that samples, which a job's ranks paid for while they ran and
which held a short job's Slurm allocation at its end (its last sample). Only a machine
whose GPUs NVML cannot read and that has ROCm's ``pyrsmi`` loads MLflow, for its
``ROCMMonitor``.

MLflow's ``GPUMonitor`` calls pynvml itself: it warns at every sample about a field a
GPU does not report (utilization on a MIG GPU, power in a vGPU guest) and knows no
temperature. Ours records the same metrics under MLflow's names, plus
``gpu_N_temperature_celsius``, read through jupyter_air's one NVML module, where a
missing driver function or a refused query costs that field only.
"""

from __future__ import annotations

import abc
import importlib.util
import logging
import os
import time
from collections import defaultdict
from collections.abc import Collection, Iterator
from dataclasses import replace
from typing import Protocol

import psutil

from ..gpu.nvml import MIB, GpuInfo, GpuReading, Nvml
from ..job_dir import AttemptDir
from .energy import EnergyMeter
from .journal import append_samples
from .sampling import CPU_PERCENT, GpuListener, Sample, prefix

log = logging.getLogger(__name__)


class Monitor(Protocol):
    """MLflow's ``BaseMetricsMonitor``'s interface: collect now, aggregate what was
    collected, clear it."""

    def collect_metrics(self) -> None: ...

    def aggregate_metrics(self) -> dict[str, float]: ...

    def clear_metrics(self) -> None: ...


class Averaged(abc.ABC):
    """A monitor whose sample is the mean of its collections since the last one."""

    def __init__(self) -> None:
        self._metrics: defaultdict[str, list[float]] = defaultdict(list)

    def collect_metrics(self) -> None:
        for name, value in self.read():
            self._metrics[name].append(value)

    @abc.abstractmethod
    def read(self) -> Iterator[tuple[str, float]]:
        """One collection's figures, by MLflow's names."""

    def aggregate_metrics(self) -> dict[str, float]:
        return {k: round(sum(v) / len(v), 1) for k, v in self._metrics.items() if v}

    def clear_metrics(self) -> None:
        self._metrics.clear()


class CpuMonitor(Averaged):
    """MLflow's ``CPUMonitor``: the host's CPU (since this thread's last reading) and memory."""

    def read(self) -> Iterator[tuple[str, float]]:
        yield CPU_PERCENT, psutil.cpu_percent()
        memory = psutil.virtual_memory()
        yield "system_memory_usage_megabytes", memory.used / 1e6
        yield "system_memory_usage_percentage", memory.used / memory.total * 100


class DiskMonitor(Averaged):
    """MLflow's ``DiskMonitor``: the root file system's use."""

    def read(self) -> Iterator[tuple[str, float]]:
        usage = psutil.disk_usage(os.sep)
        yield "disk_usage_percentage", usage.percent
        yield "disk_usage_megabytes", usage.used / 1e6
        yield "disk_available_megabytes", usage.free / 1e6


class NetworkMonitor:
    """MLflow's ``NetworkMonitor``: megabytes received and sent since it was made."""

    def __init__(self) -> None:
        first = psutil.net_io_counters()
        self._first = (first.bytes_recv / 1e6, first.bytes_sent / 1e6)
        self._metrics: dict[str, float] = {}

    def collect_metrics(self) -> None:
        now = psutil.net_io_counters()
        self._metrics["network_receive_megabytes"] = now.bytes_recv / 1e6 - self._first[0]
        self._metrics["network_transmit_megabytes"] = now.bytes_sent / 1e6 - self._first[1]

    def aggregate_metrics(self) -> dict[str, float]:
        return dict(self._metrics)

    def clear_metrics(self) -> None:
        self._metrics.clear()


class GpuMonitor(Averaged):
    """MLflow's GPU metrics and GPU temperature, for every GPU NVML reads, and the energy
    of the job's GPUs (``gpus``, NVML indices; None: every GPU) since the first sample
    (``tracking.energy``): a counter, so a sample carries its latest figure, not a mean."""

    def __init__(
        self,
        nvml: Nvml,
        on_sample: GpuListener | None = None,
        gpus: Collection[int] | None = None,
    ) -> None:
        super().__init__()
        self._nvml = nvml
        self._on_sample = on_sample
        self._gpus = None if gpus is None else frozenset(gpus)
        self._energy = EnergyMeter()

    def read(self) -> Iterator[tuple[str, float]]:
        inventory = {g.index: g for g in self._nvml.inventory()}
        readings = self._nvml.read_all()
        now = time.monotonic()
        for index, reading in enumerate(readings):
            for name, value in _gpu_metrics(reading, inventory.get(index)):
                yield f"gpu_{index}_{name}", value
            if self._gpus is None or index in self._gpus:
                self._energy.add(index, now, reading.energy_mj, reading.power_w)
        if self._on_sample is not None:  # the supervisor's hints read the same samples
            self._on_sample(readings, inventory)

    def aggregate_metrics(self) -> dict[str, float]:
        return super().aggregate_metrics() | self._energy.metrics()

    def energy_of(self, gpus: Collection[int] | None) -> None:
        """Count the energy of ``gpus`` alone from now on (None: every GPU's)."""
        self._gpus = None if gpus is None else frozenset(gpus)
        self._energy = EnergyMeter()


def _gpu_metrics(reading: GpuReading, info: GpuInfo | None) -> Iterator[tuple[str, float]]:
    """MLflow's names and units; memory used as NVML's v2 counts it (reserved excluded)."""
    if reading.util is not None:
        yield "utilization_percentage", reading.util
    if reading.mem_used_mib is not None:
        yield "memory_usage_megabytes", reading.mem_used_mib * MIB / 1e6
        if info is not None and info.mem_total_mib:
            yield "memory_usage_percentage", reading.mem_used_mib / info.mem_total_mib * 100
    if reading.power_w is not None:
        yield "power_usage_watts", reading.power_w
        if info is not None and info.power_limit_w:
            yield "power_usage_percentage", reading.power_w / info.power_limit_w * 100
    if reading.temp_c is not None:
        yield "temperature_celsius", reading.temp_c


def _rocm_monitor() -> Monitor | None:
    """MLflow's monitor of AMD's GPUs, where ROCm's ``pyrsmi`` is installed (the one
    monitor for which MLflow is loaded)."""
    if importlib.util.find_spec("pyrsmi") is None:
        return None
    import mlflow  # noqa: F401  (the package before its submodule: see sampling's thread)
    from mlflow.system_metrics.metrics.rocm_monitor import ROCMMonitor

    try:
        monitor: Monitor = ROCMMonitor()
    except Exception:  # no AMD GPU or driver here
        return None
    return monitor


class SystemSampler:
    """The metrics of the machine it runs on, as MLflow's own system-metrics monitor
    takes them (one collection per sample, aggregated): CPU, disk and network, and the
    GPUs where NVML answers (else AMD's, where ROCm answers); energy of ``gpus`` only."""

    def __init__(
        self,
        nvml: Nvml,
        on_gpu_sample: GpuListener | None = None,
        gpus: Collection[int] | None = None,
    ) -> None:
        self._nvml = nvml
        self.monitors: list[Monitor] = [CpuMonitor(), DiskMonitor(), NetworkMonitor()]
        gpu = (
            GpuMonitor(nvml, on_gpu_sample, gpus)  # its samples also feed the job's hints
            if nvml.status().available
            else _rocm_monitor()
        )
        if gpu is not None:
            self.monitors.append(gpu)
        self._failed: set[str] = set()
        self._step = 0

    def energy_of(self, gpus: Collection[int] | None) -> None:
        """The job's GPUs, once known: the energy of those alone, from now on."""
        for monitor in self.monitors:
            if isinstance(monitor, GpuMonitor):
                monitor.energy_of(gpus)

    def collect(self) -> None:
        """Each monitor collects once; one that raises loses only its own figures."""
        for monitor in self.monitors:
            try:
                monitor.collect_metrics()
            except Exception as err:
                name = type(monitor).__name__
                if name not in self._failed:  # said once, not at every sample
                    self._failed.add(name)
                    log.warning("%s failed: %s", name, err)

    def aggregate(self) -> dict[str, float]:
        """What was collected since the last sample, averaged, then cleared."""
        metrics: dict[str, float] = {}
        for monitor in self.monitors:
            metrics.update(monitor.aggregate_metrics())
            monitor.clear_metrics()
        return metrics

    def sample(self) -> Sample:
        self.collect()
        sample = Sample(time.time(), self._step, self.aggregate())
        self._step += 1
        return sample

    def close(self) -> None:
        self._nvml.shutdown()


def last_sample(files: AttemptDir, run_id: str) -> None:
    """One sample of this machine into the journal of a run of one node, so even a short
    run has its figures (taken by the tail process for a supervisor that never loaded
    MLflow)."""
    sampler = SystemSampler(Nvml())
    try:
        sample = sampler.sample()
    finally:
        sampler.close()
    # No CPU %: psutil gives a process's first reading as 0.0, with nothing to compare
    # it to, and this one starts after the job, so none of the job's CPU is to be had
    # here; the other figures are readings of now.
    metrics = {k: v for k, v in sample.metrics.items() if k != CPU_PERCENT}
    sample = replace(sample, metrics=metrics)
    append_samples(files, run_id, prefix(0, 1), [sample], [sample.step])
