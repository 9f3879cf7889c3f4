"""System metrics of a job's runs: one sampler for every node, one path into MLflow.

Every backend samples its nodes with ``SystemSampler`` (MLflow's CPU, disk and network
monitors, and a GPU monitor of ours) on a ``sampling.SampleLoop``, and the supervisor
journals every sample with rank 0's metrics (``journal.append_samples``), under MLflow's
names: ``system/<metric>`` for a job of one node, ``system/node_N/<metric>`` for each
node of several.

MLflow's ``GPUMonitor`` calls pynvml itself: it warns at every sample about a field a
GPU does not report (utilization on a MIG GPU, power in a vGPU guest) and knows no
temperature. Ours records the same metrics under MLflow's names, plus
``gpu_N_temperature_celsius``, read through jupyter_air's one NVML module, where a
missing driver function or a refused query costs that field only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import replace

# The package first: another thread (the supervisor's) may be importing it, and a
# submodule's import lock taken before the package's would deadlock against it.
import mlflow  # noqa: F401
from mlflow.system_metrics.metrics.base_metrics_monitor import BaseMetricsMonitor
from mlflow.system_metrics.metrics.cpu_monitor import CPUMonitor
from mlflow.system_metrics.metrics.disk_monitor import DiskMonitor
from mlflow.system_metrics.metrics.gpu_monitor import GPUMonitor
from mlflow.system_metrics.metrics.network_monitor import NetworkMonitor
from mlflow.system_metrics.metrics.rocm_monitor import ROCMMonitor

from ..gpu.nvml import MIB, GpuInfo, GpuReading, Nvml
from ..job_dir import AttemptDir
from .journal import append_samples
from .sampling import CPU_PERCENT, GpuListener, Sample, prefix

log = logging.getLogger(__name__)


class GpuMonitor(BaseMetricsMonitor):
    """MLflow's GPU metrics and GPU temperature, for every GPU NVML reads."""

    def __init__(self, nvml: Nvml, on_sample: GpuListener | None = None) -> None:
        super().__init__()
        self._nvml = nvml
        self._on_sample = on_sample

    def collect_metrics(self) -> None:
        inventory = {g.index: g for g in self._nvml.inventory()}
        readings = self._nvml.read_all()
        for index, reading in enumerate(readings):
            for name, value in _gpu_metrics(reading, inventory.get(index)):
                self._metrics[f"gpu_{index}_{name}"].append(value)
        if self._on_sample is not None:  # the supervisor's hints read the same samples
            self._on_sample(readings, inventory)

    def aggregate_metrics(self) -> dict[str, float]:
        return {k: round(sum(v) / len(v), 1) for k, v in self._metrics.items() if v}


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


def _mlflow_gpu_monitor() -> BaseMetricsMonitor | None:
    """MLflow's own choice where NVML does not answer here (e.g. AMD's ROCm monitor)."""
    for monitor in (GPUMonitor, ROCMMonitor):
        try:
            return monitor()
        except Exception:  # not this kind of GPU, or no driver
            continue
    return None


class SystemSampler:
    """The metrics of the machine it runs on, as MLflow's own system-metrics monitor
    takes them (one collection per sample, aggregated): its CPU, disk and network
    monitors, and ours for the GPUs where NVML answers, else MLflow's choice."""

    def __init__(self, nvml: Nvml, on_gpu_sample: GpuListener | None = None) -> None:
        self._nvml = nvml
        self.monitors: list[BaseMetricsMonitor] = [CPUMonitor(), DiskMonitor(), NetworkMonitor()]
        gpu = (
            GpuMonitor(nvml, on_gpu_sample)  # its samples also feed the job's hints
            if nvml.status().available
            else _mlflow_gpu_monitor()
        )
        if gpu is not None:
            self.monitors.append(gpu)
        self._failed: set[str] = set()
        self._step = 0

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
