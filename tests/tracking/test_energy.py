"""A run's GPU energy (issue 41, item 2): NVML's total energy counter of the job's GPUs
where it has one, exact; power integrated where it has none, within 2 %, and said so."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from jupyter_air.gpu.nvml import Nvml
from jupyter_air.job_dir import AttemptDir, JobDir
from jupyter_air.jobs.store import JobStore
from jupyter_air.tracking import journal
from jupyter_air.tracking.energy import (
    CO2_GRAMS,
    ENERGY_KWH,
    INTEGRATED_KWH,
    J_PER_KWH,
    EnergyMeter,
    RunEnergy,
    run_energy,
)
from jupyter_air.tracking.sampling import Sample, SampleLoop, prefix
from jupyter_air.tracking.system_metrics import GpuMonitor
from tests.air_cli import air
from tests.conftest import WriteScenario
from tests.factories import job_spec
from tests.fake_nvml import FakeGpu, Scenario
from tests.waits import until


def sampled(monitor: GpuMonitor, times: int) -> dict[str, float]:
    """``times`` collections, then the sample they make."""
    for _ in range(times):
        monitor.collect_metrics()
    return monitor.aggregate_metrics()


def test_the_energy_of_the_jobs_gpus_is_their_counters_rise_exactly(
    scenario: WriteScenario,
) -> None:
    """GPU 0 is the job's; GPU 1 (another job's, its counter climbing faster) is not."""
    scenario(
        Scenario(
            gpus=[
                FakeGpu(energy=[5_000_000, 6_800_000, 12_200_000], power=[0, 900_000]),
                FakeGpu(energy=[1_000_000, 90_000_000, 190_000_000]),
            ]
        )
    )
    nvml = Nvml(retry_interval=0)
    try:
        metrics = sampled(GpuMonitor(nvml, gpus={0}), 3)
    finally:
        nvml.shutdown()
    assert metrics[f"{ENERGY_KWH}"] == (12_200_000 - 5_000_000) / 1000 / J_PER_KWH  # 0.002 kWh
    assert INTEGRATED_KWH not in metrics  # all of it counted by the GPU, none guessed


def test_a_gpu_without_a_counter_has_its_power_integrated_and_says_so(
    scenario: WriteScenario,
) -> None:
    scenario(Scenario(gpus=[FakeGpu(energy=None, power=300_000)]))
    nvml = Nvml(retry_interval=0)
    try:
        monitor = GpuMonitor(nvml)
        assert ENERGY_KWH not in sampled(monitor, 1)  # one reading spans no time
        metrics = sampled(monitor, 2)
    finally:
        nvml.shutdown()
    assert metrics[ENERGY_KWH] > 0
    assert metrics[INTEGRATED_KWH] == metrics[ENERGY_KWH]


def test_power_integrated_over_10_s_samples_is_within_2_percent_of_the_energy() -> None:
    """An hour of a training's power (250 W, swinging 150 W every few minutes) sampled
    every 10 s, against its exact integral."""

    def power(t: float) -> float:
        return 250 + 150 * math.sin(t / 37)

    meter = EnergyMeter()
    for t in range(0, 3601, 10):
        meter.add(0, t, None, power(t))
    exact_j = 250 * 3600 + 150 * 37 * (1 - math.cos(3600 / 37))
    integrated = meter.metrics()[ENERGY_KWH] * J_PER_KWH
    assert integrated == pytest.approx(exact_j, rel=0.02)


def test_a_counter_that_restarts_keeps_what_it_had_counted() -> None:
    """A driver reload starts NVML's counter over; what was counted before stays."""
    meter = EnergyMeter()
    for t, mj in enumerate([1_000_000, 4_000_000, 500_000, 2_500_000]):
        meter.add(0, t, mj, 100.0)
    assert meter.metrics() == {ENERGY_KWH: (3_000 + 2_000) / J_PER_KWH}


def test_a_gpu_with_neither_counter_nor_power_measures_nothing() -> None:
    meter = EnergyMeter()
    for t in range(3):
        meter.add(0, t, None, None)
    assert meter.metrics() == {}


def test_a_runs_energy_is_each_nodes_last_figure_summed(tmp_path: Path) -> None:
    files = AttemptDir(tmp_path).make()
    for node, kwh in ((0, [0.1, 0.4]), (1, [0.2, 0.5])):
        samples = [Sample(1.0 + step, step, {ENERGY_KWH: k}) for step, k in enumerate(kwh)]
        journal.append_samples(files, "run", prefix(node, 2), samples, [0, 1])
    integrated = Sample(3.0, 2, {ENERGY_KWH: 0.6, INTEGRATED_KWH: 0.6})
    journal.append_samples(files, "run", prefix(1, 2), [integrated], [2])
    energy = run_energy(files)
    assert energy is not None
    assert energy.kwh == pytest.approx(1.0)
    assert energy.integrated_kwh == 0.6
    assert energy.line(400) == (
        "1 kWh (0.6 kWh of it integrated from power samples), 400 g CO2 at 400 g/kWh"
    )


def test_a_run_whose_samples_measured_no_energy_has_none(tmp_path: Path) -> None:
    files = AttemptDir(tmp_path).make()
    journal.append_samples(files, "run", "system/", [Sample(1.0, 0, {"cpu": 5.0})], [0])
    assert run_energy(files) is None
    assert RunEnergy(0.002, 0.0).line() == "0.002 kWh (the GPUs' energy counters)"


def test_air_get_shows_each_attempts_energy_and_its_co2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))  # no server: no links
    monkeypatch.setenv("AIR_GRAMS_CO2_PER_KWH", "250")
    store = JobStore(tmp_path / "air")
    job = store.create(job_spec("command", command=["true"]))
    store.update(job.id, status="RUNNING")
    store.start_attempt(job.id, 1, None)
    files = JobDir(store.job_dir(job.id)).attempt(1).make()
    samples = [Sample(1.0, 0, {ENERGY_KWH: 0.0}), Sample(11.0, 1, {ENERGY_KWH: 0.02})]
    journal.append_samples(files, "run", "system/", samples, [0, 1])

    shown = air("get", job.id)
    assert "    energy:   0.02 kWh (the GPUs' energy counters), 5 g CO2 at 250 g/kWh\n" in (
        shown.stdout
    ), shown.stderr
    (attempt,) = json.loads(air("get", job.id, "--output", "json").stdout)["attempts"]
    assert attempt["gpu_energy"] == {"kwh": 0.02, "integrated_kwh": 0.0}

    monkeypatch.setenv("AIR_GRAMS_CO2_PER_KWH", "lots")
    refused = air("get", job.id)
    assert refused.returncode != 0
    assert "AIR_GRAMS_CO2_PER_KWH must be a number of grams per kWh, got 'lots'" in refused.stderr


def test_a_nodes_sample_loop_carries_the_energy_of_the_jobs_gpus_only(
    scenario: WriteScenario,
) -> None:
    """What every backend samples with: the job's GPU (1) given to the loop, as the local
    backend and the node agent give its ranks' GPUs (the agent's loop already loaded)."""
    scenario(
        Scenario(
            gpus=[
                FakeGpu(energy=[0, 50_000_000, 90_000_000]),
                FakeGpu(energy=[2_000_000, 3_800_000, 5_600_000]),
            ]
        )
    )
    samples: list[Sample] = []
    loop = SampleLoop(3600, samples.append)
    loop.prepare()  # a node agent loads its sampler before its ranks start,
    until(lambda: loop.loaded, "the sampler loaded")
    loop.gpus = {1}  # then learns their GPUs
    loop.start()
    try:
        loop.sample_now()
        until(lambda: len(samples) == 1, "a first sample")
        loop.sample_now()
        until(lambda: len(samples) == 2, "a second sample")
    finally:
        loop.finish(last=False)
    assert ENERGY_KWH not in samples[0].metrics  # one reading: no span yet
    assert samples[1].metrics[ENERGY_KWH] == 1_800_000 / 1000 / J_PER_KWH


def test_with_the_grids_intensity_a_sample_carries_its_grams_of_co2(
    scenario: WriteScenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job started with $AIR_GRAMS_CO2_PER_KWH logs system/gpu_co2_grams beside the
    energy, so the runs panel and MLflow show it with the run's system metrics."""
    monkeypatch.setenv("AIR_GRAMS_CO2_PER_KWH", "400")
    scenario(Scenario(gpus=[FakeGpu(energy=[0, 3_600_000_000])]))  # 1 kWh
    nvml = Nvml(retry_interval=0)
    try:
        metrics = sampled(GpuMonitor(nvml), 2)
        monkeypatch.setenv("AIR_GRAMS_CO2_PER_KWH", "a lot")
        assert CO2_GRAMS not in sampled(GpuMonitor(nvml), 2)  # said in the log, not raised
    finally:
        nvml.shutdown()
    assert (metrics[ENERGY_KWH], metrics[CO2_GRAMS]) == (1.0, 400.0)
