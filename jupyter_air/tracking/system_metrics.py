"""System metrics of a job's run: MLflow's own monitors, with a GPU monitor of ours.

MLflow's ``GPUMonitor`` calls pynvml itself: it warns at every sample about a field a
GPU does not report (utilization on a MIG GPU, power in a vGPU guest) and knows no
temperature. Ours records the same metrics under MLflow's names, plus
``gpu_N_temperature_celsius``, read through jupyter_air's one NVML module, where a
missing driver function or a refused query costs that field only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from mlflow.system_metrics.metrics.base_metrics_monitor import BaseMetricsMonitor
from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

from ..gpu.nvml import MIB, GpuInfo, GpuReading, Nvml
from .guard import RunGuard

log = logging.getLogger(__name__)

#: Told each sample of every GPU (readings by NVML index, and the inventory).
GpuListener = Callable[[list[GpuReading], dict[int, GpuInfo]], None]


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


class JobSystemMetricsMonitor(SystemMetricsMonitor):
    """MLflow's monitor, sampling for as long as the job runs.

    MLflow's own loop stops once the run is no longer RUNNING; but a rank's
    ``with mlflow.start_run(run_id=...)`` ends the run at every exit, mid-training. This
    loop keeps MLflow's collection, aggregation and publishing, samples until the job
    says stop, and puts the run back to RUNNING meanwhile.
    """

    guard = RunGuard()

    def __init__(
        self, *args: Any, nvml: Nvml, on_gpu_sample: GpuListener | None = None, **kwargs: Any
    ) -> None:
        self._nvml = nvml
        self._on_gpu_sample = on_gpu_sample
        self._failed: set[str] = set()
        super().__init__(*args, **kwargs)

    def _initialize_gpu_monitor(self) -> BaseMetricsMonitor | None:
        """Ours where NVML answers; otherwise MLflow's choice (e.g. AMD's ROCm monitor)."""
        if self._nvml.status().available:
            return GpuMonitor(self._nvml, self._on_gpu_sample)
        return super()._initialize_gpu_monitor()

    def collect_metrics(self) -> dict[str, Any]:
        """MLflow's collection, where a monitor that raises loses only its own sample."""
        for monitor in self.monitors:
            try:
                monitor.collect_metrics()
            except Exception as err:
                name = type(monitor).__name__
                if name not in self._failed:
                    self._failed.add(name)
                    log.warning("%s failed in run %s: %s", name, self._run_id, err)
        return {}

    def monitor(self) -> None:
        from mlflow import MlflowClient

        client = MlflowClient(self._tracking_uri)
        while not self._shutdown_event.is_set():
            for _ in range(self.samples_before_logging):
                self.collect_metrics()
                if self._shutdown_event.wait(self.sampling_interval):
                    return  # finish() publishes the last sample
            try:
                with self.guard.lock:
                    reopen = not self.guard.over.is_set()
                    if reopen and client.get_run(self._run_id).info.status != "RUNNING":
                        client.update_run(self._run_id, status="RUNNING")
                self.publish_metrics(self.aggregate_metrics())
            except Exception as err:
                log.warning("system metrics of run %s not logged: %s", self._run_id, err)


class RunMetrics:
    """Records system metrics into one run every ``interval`` seconds for its whole life."""

    def __init__(
        self,
        run_id: str,
        tracking_uri: str,
        interval: float,
        node_id: str | None,
        guard: RunGuard,
        on_gpu_sample: GpuListener | None = None,
    ) -> None:
        self._nvml = Nvml()
        self.monitor = JobSystemMetricsMonitor(
            run_id,
            sampling_interval=interval,
            node_id=node_id,
            tracking_uri=tracking_uri,
            nvml=self._nvml,
            on_gpu_sample=on_gpu_sample,
        )
        self.monitor.guard = guard

    def start(self) -> None:
        self.monitor.start()

    def finish(self) -> None:
        """Stop, and record one last sample so even a short run has its figures."""
        self.monitor.finish()
        try:
            self.monitor.collect_metrics()
            metrics: dict[str, Any] = self.monitor.aggregate_metrics()
            if metrics:
                self.monitor.publish_metrics(metrics)
                self.monitor.mlflow_logger.flush()
        finally:
            self._nvml.shutdown()
