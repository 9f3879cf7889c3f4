"""System metrics of a job's run: MLflow's own monitor, plus GPU temperature.

MLflow's GPU monitor records utilization, memory and power but not temperature; a
monitor of ours beside it adds ``gpu_N_temperature_celsius`` with the same naming,
read through jupyter_air's one NVML module.
"""

from __future__ import annotations

import logging
from typing import Any

from mlflow.system_metrics.metrics.base_metrics_monitor import BaseMetricsMonitor
from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

from ..gpu.nvml import Nvml
from .guard import RunGuard

log = logging.getLogger(__name__)


class GpuTemperatureMonitor(BaseMetricsMonitor):
    def __init__(self, nvml: Nvml) -> None:
        super().__init__()
        self._nvml = nvml

    def collect_metrics(self) -> None:
        for index, reading in enumerate(self._nvml.read_all()):
            if reading.temp_c is not None:
                self._metrics[f"gpu_{index}_temperature_celsius"].append(reading.temp_c)

    def aggregate_metrics(self) -> dict[str, float]:
        return {k: round(sum(v) / len(v), 1) for k, v in self._metrics.items() if v}


class JobSystemMetricsMonitor(SystemMetricsMonitor):
    """MLflow's monitor, sampling for as long as the job runs.

    MLflow's own loop stops once the run is no longer RUNNING; but a rank's
    ``with mlflow.start_run(run_id=...)`` ends the run at every exit, mid-training. This
    loop keeps MLflow's collection, aggregation and publishing, samples until the job
    says stop, and puts the run back to RUNNING meanwhile.
    """

    guard = RunGuard()

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
    ) -> None:
        self._nvml = Nvml()
        self.monitor = JobSystemMetricsMonitor(
            run_id, sampling_interval=interval, node_id=node_id, tracking_uri=tracking_uri
        )
        self.monitor.guard = guard
        if self._nvml.status().available:
            self.monitor.monitors.append(GpuTemperatureMonitor(self._nvml))

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
