"""A sweep as a schedule's task, end to end (issue 40): ``air schedule create`` of a
schedule whose task is a sweep file, fired by the real scheduler (run now, no cron
wait), whose task starts a sweep through the sweeps service; its driver runs 2 one-rank
trials as real jobs, and the study lives at a SQLite URL outside AIR_HOME (the sweep
file's ``storage:``), where ``air sweep get`` finds it from the sweep's record."""

from __future__ import annotations

import json
import re
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from mlflow import MlflowClient

from jupyter_air.jobs import cancel
from jupyter_air.jobs.store import JobStore
from jupyter_air.schedules.scheduler import stop
from jupyter_air.sweeps import driver
from jupyter_air.sweeps.store import DATABASE, SweepStore
from jupyter_air.sweeps.trials import SWEEP_TAG
from tests.air_cli import air
from tests.mlflow_store import fresh_store
from tests.waits import until

pytestmark = [pytest.mark.heavy, pytest.mark.slow]

#: loss = (x - 2)^2: x = 2 is the best.
TRAIN = """\
from jupyter_air import log_metrics, params

x = params()["x"]
log_metrics({"loss": float((x - 2) ** 2)}, step=1)
"""

SCHEDULE = """\
name: nightly-search
schedule: {{cron: "0 4 * * *", pause_status: PAUSED}}
experiment_name: searches
tasks:
  - task_key: search
    sweep:
      command: {python} train.py
      space: {{x: [1, 2]}}
      objective: {{minimize: loss}}
      trials: 2
      parallel: 2
      sampler: grid
      storage: sqlite:///../team/studies.db
"""


@pytest.fixture
def workdir(
    tmp_path: Path, mlflow_template: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", fresh_store(mlflow_template, tmp_path))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "team").mkdir()
    monkeypatch.chdir(work)
    yield work
    home = tmp_path / "air"
    stop(home)
    for sweep in SweepStore(home).sweeps():
        driver.stop_driver(home, sweep.id)
    jobs = JobStore(home)
    for job in jobs.jobs(active_only=True):
        cancel.cancel(jobs, job.id)
        cancel.wait(jobs, job.id, 60)


def air_json(*args: str) -> Any:
    done = air(*args, "--output", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_each_firing_of_a_sweep_task_starts_a_sweep_whose_study_lives_at_its_url(
    workdir: Path,
) -> None:
    (workdir / "train.py").write_text(TRAIN)
    (workdir / "schedule.yaml").write_text(SCHEDULE.format(python=sys.executable))
    created = air_json("schedule", "create", "-f", "schedule.yaml")
    (task,) = created["tasks"]
    studies = workdir.parent / "team" / "studies.db"
    url = f"sqlite:///{workdir}/../team/studies.db"
    assert task["kind"] == "sweep"
    assert task["sweep"] == {
        "objective": {"minimize": "loss"},
        "trials": 2,
        "parallel": 2,
        "storage": url,
    }
    assert not studies.exists()  # checked when made; the study comes with each firing

    fired = air_json("schedule", "run-now", "nightly-search")

    def ended() -> dict[str, Any] | None:
        runs = air_json("schedule", "runs", "nightly-search")
        return next((r for r in runs if r["id"] == fired["id"] and r["status"] != "RUNNING"), None)

    home = workdir.parent / "air"
    run = until(ended, "the run of the sweep task to end", 420, 1.0, seen=lambda: _logs(home))
    assert run["status"] == "SUCCEEDED", run
    (done,) = run["tasks"]
    sweep_id = done["sweep_id"]
    assert re.fullmatch(r"sw-[0-9a-f]{8}", sweep_id)
    assert done["job_id"] is None
    assert re.fullmatch(r"best: trial [01], loss 0", done["message"])

    # The sweep: the schedule owner's, in the schedule's experiment, found from its record.
    sweep = air_json("sweep", "get", sweep_id)
    assert sweep["status"] == "COMPLETED"
    assert sweep["experiment_name"] == "searches"
    assert sweep["storage"] == url
    assert sweep["counts"]["COMPLETE"] == 2
    assert sweep["best"]["params"] == {"x": 2}
    assert sweep["best"]["value"] == 0.0
    # The task's MLflow run is its sweep's: the best trial's parameters, the trials under it.
    assert re.fullmatch(r"[0-9a-f]{32}", sweep["run_id"] or ""), sweep
    assert (done["run_id"], done["experiment_id"]) == (sweep["run_id"], sweep["experiment_id"])
    text = air("sweep", "get", sweep_id).stdout
    assert f"  study:     {sweep_id} at {url}\n" in text
    assert (
        f"    search               SUCCEEDED  {sweep_id} (best:"
        in air("schedule", "runs", "nightly-search").stdout
    )

    # Its trials live at the URL (Optuna reads them there); AIR_HOME holds the record.
    assert stat.S_IMODE(studies.stat().st_mode) == 0o600
    study = optuna.load_study(study_name=sweep_id, storage=url)
    assert sorted(t.params["x"] for t in study.trials) == [1, 2]
    assert all(t.state is optuna.trial.TrialState.COMPLETE for t in study.trials)
    home_study = optuna.load_study(
        study_name=sweep_id, storage=f"sqlite:///{home / 'sweeps' / DATABASE}"
    )
    assert home_study.trials == []

    # Each trial a one-rank job of the sweep's, which succeeded.
    jobs = JobStore(home)
    trials = [j for j in jobs.jobs() if j.spec.tracking.tags.get(SWEEP_TAG) == sweep_id]
    assert len(trials) == 2
    assert {j.status for j in trials} == {"SUCCEEDED"}
    assert {j.owner for j in trials} == {sweep["owner"]}

    # The firing's tags, as a workload task's job has them: on each trial's and the sweep's run.
    firing = {
        "air.schedule": "nightly-search",
        "air.schedule_run": str(fired["id"]),
        "air.task_key": "search",
    }
    for job in trials:
        assert firing.items() <= job.spec.tracking.tags.items(), job.spec.tracking.tags
    sweep_tags = MlflowClient().get_run(sweep["run_id"]).data.tags
    assert firing.items() <= sweep_tags.items(), sweep_tags


def _logs(home: Path) -> str:
    """The scheduler's and the drivers' last lines, for a timeout's message."""
    found = [home / "scheduler.log", *sorted((home / "sweeps").glob("*.log"))]
    return "\n".join(p.read_text()[-2000:] for p in found if p.exists())
