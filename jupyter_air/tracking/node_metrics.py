"""System metrics of the nodes of a multi-node job, collected by MLflow's own monitors.

A node agent cannot count on reaching the job's tracking store (by default an SQLite
file on the notebook's machine). So each agent collects and aggregates with MLflow's
monitors where it runs, and the supervisor logs the figures under MLflow's name for
several nodes: ``system/<node>/<metric>``, the node being ``node_N``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from mlflow.entities import Metric
from mlflow.system_metrics.metrics.base_metrics_monitor import BaseMetricsMonitor
from mlflow.system_metrics.metrics.cpu_monitor import CPUMonitor
from mlflow.system_metrics.metrics.disk_monitor import DiskMonitor
from mlflow.system_metrics.metrics.network_monitor import NetworkMonitor

from ..gpu.nvml import Nvml
from .system_metrics import GpuListener, GpuMonitor

log = logging.getLogger(__name__)

#: One aggregated sample: (unix seconds, step, {metric: value}).
Sample = tuple[float, int, dict[str, float]]


class NodeMetrics:
    """MLflow's CPU, disk and network monitors, and our GPU monitor, on one node."""

    def __init__(self, nvml: Nvml, on_gpu_sample: GpuListener | None = None) -> None:
        self._monitors: list[BaseMetricsMonitor] = [CPUMonitor(), DiskMonitor(), NetworkMonitor()]
        if nvml.status().available:  # its samples also feed the job's hints
            self._monitors.append(GpuMonitor(nvml, on_gpu_sample))
        self._step = 0

    def sample(self) -> Sample:
        """Collect once and aggregate, as MLflow's monitor does every sampling interval."""
        metrics: dict[str, float] = {}
        for monitor in self._monitors:
            try:
                monitor.collect_metrics()
                metrics.update(monitor.aggregate_metrics())
            except Exception as err:
                log.warning("%s failed: %s", type(monitor).__name__, err)
            monitor.clear_metrics()
        sample = (time.time(), self._step, metrics)
        self._step += 1
        return sample


def log_node_metrics(client: Any, run_id: str, node: int, samples: list[Sample]) -> None:
    """Log one node's samples into the attempt's run as ``system/node_N/...``."""
    prefix = f"system/node_{node}/"
    metrics = [
        Metric(prefix + name, value, int(t * 1000), step)
        for t, step, values in samples
        for name, value in values.items()
    ]
    for start in range(0, len(metrics), 1000):  # MLflow's log_batch limit
        client.log_batch(run_id, metrics=metrics[start : start + 1000])
