"""A real job's energy and CO2 (issue 41, item 2): ``air run`` in a shell, with the
server's grid intensity kept in AIR_HOME, on the fake driver's GPU with an energy
counter; its run in MLflow and ``air get`` show both, the grams as the run logged them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs.store import JobStore
from jupyter_air.tracking.energy import keep_grid_intensity, run_energy
from tests.air_cli import air
from tests.fake_nvml import FakeGpu, Scenario, build_library, env_for
from tests.mlflow_store import fresh_store
from tests.waits import until, wait_settled

#: 0.001 kWh more at each reading of the counter.
COUNTER = [10**9 + 3_600_000 * k for k in range(1000)]


@pytest.mark.heavy
def test_a_job_started_from_a_shell_logs_its_energy_and_grams_at_the_servers_intensity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlflow_template: Path
) -> None:
    uri = fresh_store(mlflow_template, tmp_path)
    path = Scenario(gpus=[FakeGpu(energy=COUNTER, power=300_000)]).write(tmp_path / "nvml.txt")
    for name, value in env_for(build_library(), path).items():
        monkeypatch.setenv(name, value)
    for name in ("CUDA_VISIBLE_DEVICES", "AIR_GRAMS_CO2_PER_KWH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("AIR_SYSTEM_METRICS_INTERVAL", "0.5")
    monkeypatch.chdir(tmp_path)
    store = JobStore(tmp_path / "air")
    keep_grid_intensity(store.home, 400.0)  # as a server with c.AirMetrics.grams_co2_per_kwh
    command = f"{sys.executable} -c 'import time; time.sleep(3)'"
    (tmp_path / "job.yaml").write_text(json.dumps({"experiment_name": "co2", "command": command}))

    submitted = air("run", "-f", "job.yaml")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[1]
    job = wait_settled(store.home, job_id)
    assert job.status == "SUCCEEDED", job.message

    (attempt,) = store.attempts(job_id)
    energy = run_energy(AttemptDir(store.attempt_dir(job_id, 1)))
    assert energy is not None, "the job's GPU was sampled at least twice"
    assert energy.kwh >= 0.001
    assert energy.kwh == pytest.approx(round(energy.kwh, 3))  # whole readings of the counter
    assert energy.integrated_kwh == 0.0  # the counter's, all of it
    assert energy.co2_grams == pytest.approx(energy.kwh * 400)  # logged by the run

    keep_grid_intensity(store.home, 100.0)  # the setting changed since: the run keeps its
    (shown,) = json.loads(air("get", job_id, "--output", "json").stdout)["attempts"]
    assert shown["gpu_energy"]["co2_grams"] == pytest.approx(energy.kwh * 400)
    assert "g CO2 at 400 g/kWh\n" in air("get", job_id).stdout

    client, run_id = MlflowClient(uri), attempt.run_id
    assert run_id is not None

    def logged() -> dict[str, float] | None:
        metrics: dict[str, float] = client.get_run(run_id).data.metrics
        return metrics if "system/gpu_co2_grams" in metrics else None

    metrics = until(logged, "the run's grams of CO2 in MLflow")
    assert metrics["system/gpu_energy_kwh"] == pytest.approx(energy.kwh)
    assert metrics["system/gpu_co2_grams"] == pytest.approx(energy.kwh * 400)
