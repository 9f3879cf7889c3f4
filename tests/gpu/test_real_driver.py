"""jupyter_air's NVML module, its MLflow GPU monitor and nvidia-smi, on a real driver.

Skipped (with the reason) where no real NVIDIA driver answers; scripts/gpu-check runs
them on a machine with a GPU, its report lists each one.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from jupyter_air.gpu.faults import XidWatch
from jupyter_air.gpu.nvml import Nvml
from jupyter_air.tracking.system_metrics import GpuMonitor
from scripts.gpu_check.compare import compare
from scripts.gpu_check.hardware import UNAVAILABLE_TEXTS
from scripts.gpu_check.report import Outcome, Report
from tests.waits import until

pytestmark = pytest.mark.gpu

HOLD_MIB = 1024
HOLDER = textwrap.dedent(
    f"""
    import sys, torch
    held = torch.ones({HOLD_MIB} * 2**20, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes it
    """
)


def test_every_gpu_reports_every_field_without_error(nvml: Nvml) -> None:
    for info, reading in zip(nvml.inventory(), nvml.read_all(), strict=True):
        assert reading.status == "ok", reading.message
        assert info.name
        assert info.uuid
        assert info.mem_total_mib
        assert info.power_limit_w
        if not info.mig_mode:  # a MIG GPU reports no utilization, by design
            assert reading.util is not None, reading.unavailable
        assert reading.mem_used_mib is not None, reading.unavailable
        assert (reading.temp_c or 0) > 0, reading.unavailable
        assert (reading.power_w or 0) > 0, reading.unavailable


def test_inventory_and_readings_agree_with_nvidia_smi(nvml: Nvml) -> None:
    report = Report()
    compare(nvml, report, rounds=2, pause=0.5)
    failed = [c for c in report.checks if c.outcome is Outcome.FAILED]
    assert not failed, failed


def test_a_cuda_process_is_listed_with_the_memory_it_holds(nvml: Nvml) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} here has no CUDA")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "ready"

        def held() -> dict[int, int | None]:
            return {p.pid: p.used_mib for r in nvml.read_all() for p in r.processes}

        holding = until(
            lambda: now if holder.pid in (now := held()) else {},
            f"pid {holder.pid} among the GPU's processes",
            10,
            seen=held,
        )
        assert (holding[holder.pid] or 0) >= HOLD_MIB
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(30)


def test_mlflow_gets_every_gpu_metric_from_our_monitor(nvml: Nvml) -> None:
    monitor = GpuMonitor(nvml)
    monitor.collect_metrics()
    metrics = monitor.aggregate_metrics()
    for name in ("memory_usage_megabytes", "power_usage_watts", "temperature_celsius"):
        assert metrics.get(f"gpu_0_{name}", 0) > 0, metrics
    assert "gpu_0_utilization_percentage" in metrics or nvml.inventory()[0].mig_mode, metrics


def test_every_gpu_answers_the_hardware_queries_or_says_it_has_none(nvml: Nvml) -> None:
    """Throttle reasons, SM clock, ECC, retired pages, remapped rows (issue 39): each a
    value or NVML's "not supported", never another error and never a zero made up."""
    for info, reading in zip(nvml.inventory(), nvml.read_all(), strict=True):
        health = reading.health
        errors = {k: v for k, v in health.unavailable.items() if v not in UNAVAILABLE_TEXTS}
        assert not errors, health
        for name in ("clock_reasons", "sm_clock_mhz", "ecc", "retired_pages", "remapped_rows"):
            assert (getattr(health, name) is None) == (name in health.unavailable), health
        if not info.mig_mode and info.virtualization is None:
            assert health.clock_reasons is not None, health
            assert info.max_sm_clock_mhz, info
        if health.retired_pages is not None or health.remapped_rows is not None:
            assert health.ecc is not None, "a GPU that retires memory counts its ECC errors"


def test_an_xid_watch_opens_an_event_set_whose_waits_come_back() -> None:
    watch = XidWatch(Nvml(retry_interval=0), wait_ms=200).start()
    try:
        until(
            lambda: watch.watching or watch.refused or watch.reason != XidWatch.NOT_STARTED,
            "the event set opened",
            20,
        )
        if watch.refused and not watch.watching:
            assert set(watch.refused.values()) <= UNAVAILABLE_TEXTS, watch.refused
            pytest.skip(f"no GPU here delivers events: {watch.refused}")
        assert watch.watching, watch.reason
        assert watch.caught_up(time.time(), timeout=10)
    finally:
        watch.stop()
