"""NVML on drivers and GPUs that answer less: an old driver branch, MIG, vGPU.

Issue 10, item 9. A function the driver does not export, or a query a GPU refuses,
costs that field only: every other field and every other GPU keep reporting, in the
panel's sampler and in the runs' system metrics alike.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs.supervision.system_feed import SystemMetricsFeed
from jupyter_air.tracking import journal
from jupyter_air.tracking.sampling import SampleLoop
from tests.conftest import WriteScenario
from tests.fake_nvml import OLD_DRIVER_LACKS, FakeGpu, Scenario, build_library, env_for

GiB = 1024**3

#: A 470-branch driver: no ``_v3`` process queries, no memory info v2, no TemperatureV.
OLD_DRIVER = Scenario(
    without=OLD_DRIVER_LACKS,
    driver_version="470.256.02",
    cuda_driver_version=11040,
    gpus=[
        FakeGpu(
            name="Tesla V100-SXM2-32GB",
            util=42,
            mem_total=32 * GiB,
            mem_used=3 * GiB,
            temp=55,
            power=200_000,
            power_limit=300_000,
            processes=[(os.getpid(), GiB)],
            graphics_processes=[(4243, 2 * GiB)],
        ),
        FakeGpu(name="Tesla V100-SXM2-32GB", util=7, mem_total=32 * GiB, temp=33),
    ],
)

#: A MIG-enabled A100 beside a plain one: utilization and the parent's processes refused.
MIG = Scenario(
    gpus=[
        FakeGpu(name="NVIDIA A100-SXM4-40GB", mig=True, mem_total=40 * GiB, mem_used=5 * GiB),
        FakeGpu(name="NVIDIA A100-SXM4-40GB", mig=False, util=61, processes=[(4242, GiB)]),
    ]
)

#: A vGPU guest whose branch reports neither temperature nor power.
VGPU = Scenario(
    gpus=[
        FakeGpu(
            name="GRID A100-20C",
            virtualization="vgpu",
            util=12,
            mem_total=20 * GiB,
            mem_used=2 * GiB,
            temp="NOT_SUPPORTED",
            power="NOT_SUPPORTED",
            power_limit="NOT_SUPPORTED",
        )
    ]
)


def run_on_old_driver(code: str, tmp_path: Path) -> Any:
    """Run ``code`` in a fresh interpreter whose NVML is the old branch; its JSON output."""
    scenario = OLD_DRIVER.write(tmp_path / "old-driver.txt")
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env_for(build_library(without=OLD_DRIVER_LACKS), scenario)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout.splitlines()[-1])


# --- an old driver branch ----------------------------------------------------------


def test_the_sampler_thread_reports_every_field_on_a_driver_without_v3_queries(
    tmp_path: Path,
) -> None:
    doc = run_on_old_driver(
        """
        import json, time
        from jupyter_air.gpu.sampler import GpuSampler
        sampler = GpuSampler(interval=0.05)
        sampler.start()
        deadline = time.monotonic() + 30
        while sampler.samples_taken < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        doc = sampler.snapshot()
        sampler.stop()
        print(json.dumps(doc))
        """,
        tmp_path,
    )
    assert doc["nvml"]["available"] is True
    assert doc["nvml"]["driver_version"] == "470.256.02"
    assert [g["mem_total_mib"] for g in doc["gpus"]] == [32 * 1024, 32 * 1024]
    gpu0, gpu1 = doc["samples"]["gpu"]
    assert (gpu0["util"][-1], gpu0["mem"][-1], gpu0["temp"][-1], gpu0["power"][-1]) == (
        42,
        3 * 1024,
        55,
        200.0,
    )
    assert gpu1["util"][-1] == 7
    state0 = doc["state"][0]
    assert state0["status"] == "ok"
    assert state0["unavailable"] == {}
    assert [(p["pid"], p["mem_mib"]) for p in state0["processes"]] == [
        (os.getpid(), 1024),
        (4243, 2048),
    ]


def test_a_missing_function_is_looked_up_once_and_logged_once(tmp_path: Path) -> None:
    lookups, log_lines = run_on_old_driver(
        """
        import collections, io, json, logging, pynvml
        from jupyter_air.gpu.nvml import Nvml
        looked_up = collections.Counter()
        find = pynvml._nvmlGetFunctionPointer
        def counting(name):
            looked_up[name] += 1
            return find(name)
        pynvml._nvmlGetFunctionPointer = counting
        out = io.StringIO()
        logging.basicConfig(stream=out, level=logging.INFO)
        nvml = Nvml()
        for _ in range(5):
            nvml.read_all()
        lines = [l for l in out.getvalue().splitlines() if "RunningProcesses_v3" in l]
        print(json.dumps([looked_up, lines]))
        """,
        tmp_path,
    )
    assert lookups["nvmlDeviceGetComputeRunningProcesses_v3"] == 1
    assert lookups["nvmlDeviceGetGraphicsRunningProcesses_v3"] == 1
    assert lookups["nvmlDeviceGetMemoryInfo_v2"] == 1
    assert len(log_lines) == 2  # one line each for the compute and graphics queries


@pytest.mark.heavy
def test_run_system_metrics_keep_every_gpu_metric_on_a_driver_without_v3_queries(
    tmp_path: Path,
) -> None:
    metrics = run_on_old_driver(
        """
        import json
        from jupyter_air.gpu.nvml import Nvml
        from jupyter_air.tracking.system_metrics import SystemSampler
        sampler = SystemSampler(Nvml())
        for _ in range(2):
            sampler.collect()
        print(json.dumps(sampler.aggregate()))
        """,
        tmp_path,
    )
    assert metrics["gpu_0_utilization_percentage"] == 42
    assert metrics["gpu_0_memory_usage_percentage"] == pytest.approx(3 / 32 * 100, abs=0.1)
    assert metrics["gpu_0_memory_usage_megabytes"] == pytest.approx(3 * GiB / 1e6, abs=0.1)
    assert metrics["gpu_0_power_usage_watts"] == 200.0
    assert metrics["gpu_0_power_usage_percentage"] == pytest.approx(200 / 300 * 100, abs=0.1)
    assert metrics["gpu_0_temperature_celsius"] == 55
    assert metrics["gpu_1_utilization_percentage"] == 7


# --- MIG and vGPU through the panel's API -------------------------------------------


@pytest.fixture
def jp_server_config(scenario: WriteScenario) -> dict[str, Any]:
    scenario(Scenario())  # the tests write theirs before they sample
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_air": True}},
        "GpuSampler": {"interval": 3600.0},
    }


async def sample(jp_fetch: Any) -> dict[str, Any]:
    await jp_fetch("jupyter-air", "gpu", "sample", method="POST", body=b"")
    return json.loads((await jp_fetch("jupyter-air", "gpu")).body)


async def test_a_mig_gpu_reports_memory_and_says_utilization_is_not_available(
    jp_fetch: Any, scenario: WriteScenario, caplog: pytest.LogCaptureFixture
) -> None:
    scenario(MIG)
    for _ in range(3):
        doc = await sample(jp_fetch)

    assert doc["nvml"]["available"] is True
    assert [g["mig_mode"] for g in doc["gpus"]] == [True, False]
    assert doc["gpus"][0]["mem_total_mib"] == 40 * 1024
    mig, plain = doc["samples"]["gpu"]
    assert mig["mem"][-1] == 5 * 1024
    assert mig["temp"][-1] == 40
    assert mig["util"][-1] is None
    state = doc["state"][0]
    assert state.pop("health")["xids_unwatched"] == "Not Supported"
    assert state == {
        "status": "ok",
        "message": None,
        "unavailable": {"util": "Not Supported", "processes": "Insufficient Permissions"},
        "processes": [],
    }
    assert plain["util"][-1] == 61
    assert doc["state"][1]["status"] == "ok"
    assert [p["pid"] for p in doc["state"][1]["processes"]] == [4242]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_vgpu_guest_reports_what_it_can_and_says_what_it_refuses(
    jp_fetch: Any, scenario: WriteScenario
) -> None:
    scenario(VGPU)
    doc = await sample(jp_fetch)

    (gpu,) = doc["gpus"]
    assert gpu["virtualization"] == "vgpu"
    assert gpu["power_limit_w"] is None
    (samples,) = doc["samples"]["gpu"]
    assert (samples["util"][-1], samples["mem"][-1]) == (12, 2 * 1024)
    assert (samples["temp"][-1], samples["power"][-1]) == (None, None)
    assert doc["state"][0]["status"] == "ok"
    assert doc["state"][0]["unavailable"] == {"temp": "Not Supported", "power": "Not Supported"}


# --- MIG in the runs' system metrics -------------------------------------------------


@pytest.mark.heavy
def test_run_system_metrics_on_mig_record_memory_and_do_not_warn_every_sample(
    scenario: WriteScenario, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import mlflow

    scenario(MIG)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = mlflow.MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("mig")).info.run_id
    caplog.clear()
    attempt = AttemptDir(tmp_path / "attempt_1").make()
    feed = SystemMetricsFeed(run_id, attempt, 1)
    metrics = SampleLoop(0.05, lambda sample: feed.add(0, [sample]))
    metrics.start()
    time.sleep(0.5)  # several samples
    metrics.finish()
    feed.finish()
    journal.ship(client, attempt)

    logged = client.get_run(run_id).data.metrics
    assert logged["system/gpu_0_memory_usage_megabytes"] == pytest.approx(5 * GiB / 1e6, abs=0.1)
    assert logged["system/gpu_0_temperature_celsius"] == 40
    assert "system/gpu_0_utilization_percentage" not in logged
    assert logged["system/gpu_1_utilization_percentage"] == 61
    assert len(client.get_metric_history(run_id, "system/gpu_0_memory_usage_megabytes")) > 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
