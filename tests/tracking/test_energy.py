"""A run's GPU energy (issue 41, item 2): NVML's total energy counter of the job's GPUs
where it has one, exact; power integrated where it has none, within 2 %, and said so;
a job of several nodes their sum; grams of CO2 at the grid's intensity."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
from traitlets import TraitError

from jupyter_air.gpu.nvml import Nvml
from jupyter_air.job_dir import AttemptDir, JobDir
from jupyter_air.jobs.store import JobStore
from jupyter_air.jobs.supervision.system_feed import SystemMetricsFeed
from jupyter_air.metrics.settings import AirMetrics
from jupyter_air.tracking import journal
from jupyter_air.tracking.energy import (
    CO2_GRAMS,
    ENERGY_KWH,
    GRID_FILE,
    INTEGRATED_KWH,
    J_PER_KWH,
    EnergyMeter,
    RunEnergy,
    grid_intensity,
    jobs_grid_intensity,
    keep_grid_intensity,
    run_energy,
)
from jupyter_air.tracking.sampling import Sample, SampleLoop, prefix
from jupyter_air.tracking.system_metrics import GpuMonitor
from tests.air_cli import air
from tests.conftest import WriteScenario
from tests.factories import job_spec
from tests.fake_nvml import FakeGpu, Scenario
from tests.jobs.test_system_feed import Journaled
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
    assert energy.priced(400).line() == (
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
    """At the server's intensity (kept in AIR_HOME), or $AIR_GRAMS_CO2_PER_KWH's; a run
    that logged its grams of CO2 keeps them, whatever the intensity is now."""
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))  # no server: no links
    monkeypatch.delenv("AIR_GRAMS_CO2_PER_KWH", raising=False)
    store = JobStore(tmp_path / "air")
    keep_grid_intensity(store.home, 400.0)  # c.AirMetrics.grams_co2_per_kwh = 400
    job = store.create(job_spec("command", command=["true"]))
    store.update(job.id, status="RUNNING")
    for number, logged in ((1, {}), (2, {CO2_GRAMS: 2.0})):  # the second logged 100 g/kWh
        store.start_attempt(job.id, number, None)
        files = JobDir(store.job_dir(job.id)).attempt(number).make()
        samples = [Sample(1.0, 0, {ENERGY_KWH: 0.0}), Sample(11.0, 1, {ENERGY_KWH: 0.02, **logged})]
        journal.append_samples(files, "run", "system/", samples, [0, 1])

    shown = air("get", job.id).stdout
    assert "    energy:   0.02 kWh (the GPUs' energy counters), 8 g CO2 at 400 g/kWh\n" in shown
    assert "    energy:   0.02 kWh (the GPUs' energy counters), 2 g CO2 at 100 g/kWh\n" in shown
    monkeypatch.setenv("AIR_GRAMS_CO2_PER_KWH", "250")  # wins over the server's
    first, second = json.loads(air("get", job.id, "--output", "json").stdout)["attempts"]
    assert first["gpu_energy"] == {"kwh": 0.02, "integrated_kwh": 0.0, "co2_grams": 5.0}
    assert second["gpu_energy"]["co2_grams"] == 2.0

    monkeypatch.setenv("AIR_GRAMS_CO2_PER_KWH", "lots")
    refused = air("get", job.id)
    assert refused.returncode != 0
    assert "AIR_GRAMS_CO2_PER_KWH must be a number of grams per kWh, got 'lots'" in refused.stderr


def test_the_servers_intensity_is_kept_for_the_users_jobs_and_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("AIR_GRAMS_CO2_PER_KWH", raising=False)
    assert grid_intensity(tmp_path) is None
    AirMetrics(grams_co2_per_kwh=380.0).share_with_jobs(tmp_path)
    assert grid_intensity(tmp_path) == 380.0
    assert (tmp_path / GRID_FILE).stat().st_mode & 0o777 == 0o600
    monkeypatch.setenv("AIR_GRAMS_CO2_PER_KWH", "50")
    assert grid_intensity(tmp_path) == 50.0  # a job started with it set
    monkeypatch.delenv("AIR_GRAMS_CO2_PER_KWH")
    AirMetrics(grams_co2_per_kwh=None).share_with_jobs(tmp_path)  # the setting taken out
    assert not (tmp_path / GRID_FILE).exists()
    (tmp_path / GRID_FILE).write_text('{"grams_co2_per_kwh": -3}')
    with pytest.raises(ValueError, match=r"grid.json must be 0..10000 g/kWh, got -3"):
        grid_intensity(tmp_path)
    assert jobs_grid_intensity(tmp_path) is None  # costs a job's CO2 figure only
    with pytest.raises(TraitError, match=r"AirMetrics\.grams_co2_per_kwh must be 0\.\.10000"):
        AirMetrics(grams_co2_per_kwh=float("nan"))
    (tmp_path / GRID_FILE).unlink()
    (tmp_path / GRID_FILE).mkdir()  # a file that cannot be written: said, not raised
    with caplog.at_level(logging.WARNING, "jupyter_air.metrics.settings"):
        AirMetrics(grams_co2_per_kwh=380.0).share_with_jobs(tmp_path)
    assert "jobs will not know the grid's CO2 intensity" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == [GRID_FILE], "no leftover"


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


def test_a_job_of_two_nodes_has_their_gpus_energy_summed_and_its_co2(
    scenario: WriteScenario, tmp_path: Path
) -> None:
    """The path of a Ray or Slurm job's samples: each node's sample loop counts its own
    GPU (GPU 0 on node 0, GPU 1 on node 1 here), and the supervisor's feed journals each
    node's figures under its node and the job's sum under ``system/``, as a job of one
    node has it, priced at the grid's intensity."""
    scenario(
        Scenario(
            gpus=[  # a reading a sample: node 0 samples twice, then node 1
                FakeGpu(energy=[0, 36_000_000]),  # 0.01 kWh between node 0's two
                FakeGpu(energy=[0, 0, 9_000_000, 16_200_000]),  # 0.002 kWh in node 1's
            ]
        )
    )
    client = Journaled.at(tmp_path)
    feed = SystemMetricsFeed("run", client.attempt, 2, None, 500.0)
    for node in (0, 1):

        def to_feed(sample: Sample, node: int = node) -> None:
            feed.add(node, [sample])

        loop = SampleLoop(3600, to_feed, gpus={node})
        try:
            loop.take()
            loop.take()
        finally:
            loop.finish(last=False)
    feed.finish()

    last = {key: value for key, value, *_ in client.of("run")}
    assert last["system/node_0/gpu_energy_kwh"] == pytest.approx(0.01)
    assert last["system/node_1/gpu_energy_kwh"] == pytest.approx(0.002)
    assert last["system/gpu_energy_kwh"] == pytest.approx(0.012)  # the run's: both nodes
    assert last["system/gpu_co2_grams"] == pytest.approx(6.0)  # at 500 g/kWh
    assert "system/gpu_energy_integrated_kwh" not in last  # counted by the GPUs, all of it
    assert run_energy(client.attempt) == pytest.approx(RunEnergy(0.012, 0.0, 6.0))
