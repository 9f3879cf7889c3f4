"""Without ``MLFLOW_TRACKING_URI``, a user's cells, ``air run`` jobs and scheduled runs
all land in one MLflow store under AIR_HOME, whatever directory each started from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from jupyter_air.jobs import cancel
from jupyter_air.jobs.store import JobStore
from jupyter_air.schedules.scheduler import stop
from jupyter_air.tracking.run_tails import serving
from tests.kernel.conftest import Kernel
from tests.waits import until

#: Every test drives a real kernel: left to make test.
pytestmark = pytest.mark.heavy

CELL = """\
%%air_distributed -n 1 --run-name from-the-notebook
import mlflow
from jupyter_air import log_metrics
log_metrics({"loss": 0.5}, step=1)
with open("weights.txt", "w") as f:
    f.write("w")
mlflow.log_artifact("weights.txt")
"""

SCHEDULE = """\
name: nightly
experiment_name: nightly
schedule: {{cron: "0 3 * * *", pause_status: PAUSED}}
tasks:
  - task_key: train
    workload: {{command: {python} -c "print('scheduled')", mlflow_run_name: from-a-schedule}}
"""


@pytest.fixture
def home(tmp_path: Path, kernel_env: dict[str, str]) -> Iterator[Path]:
    home = tmp_path / "air home"
    yield home
    stop(home)
    jobs = JobStore(home)
    for job in jobs.jobs(active_only=True):
        cancel.cancel(jobs, job.id)
        cancel.wait(jobs, job.id, 60)


def user_env(home: Path, kernel_env: dict[str, str]) -> dict[str, str]:
    """The kernel tests' environment as a user's without any tracking setting."""
    env = {**kernel_env, "AIR_HOME": str(home), "JUPYTER_RUNTIME_DIR": str(home / "rt")}
    del env["MLFLOW_TRACKING_URI"]
    return env


def air(env: dict[str, str], cwd: Path, *args: str) -> Any:
    result = subprocess.run(
        [sys.executable, "-m", "jupyter_air.cli", *args, "--output", "json"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=cwd,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_cells_air_run_and_schedules_from_three_directories_share_one_store(
    tmp_path: Path, home: Path, kernel_env: dict[str, str]
) -> None:
    env = user_env(home, kernel_env)
    notebooks, cli_dir, schedule_dir = (tmp_path / d for d in ("notebooks", "cli", "sched"))
    for directory in (notebooks, cli_dir, schedule_dir):
        directory.mkdir()

    kernel = Kernel(env, cwd=notebooks)
    try:
        assert kernel.run("%load_ext jupyter_air").error is None
        cell = kernel.run(CELL)
        assert cell.error is None, cell.traceback
        kernel_uri = kernel.run("import mlflow; mlflow.get_tracking_uri()").value()
    finally:
        kernel.shutdown()

    (cli_dir / "w.yaml").write_text(
        f"command: {sys.executable} -c \"print('cli')\"\n"
        "mlflow_run_name: from-air-run\nexperiment_name: cli\n"
    )
    submitted = air(env, cli_dir, "run", "-f", "w.yaml")
    (schedule_dir / "s.yaml").write_text(SCHEDULE.format(python=sys.executable))
    air(env, schedule_dir, "schedule", "create", "-f", "s.yaml")
    air(env, schedule_dir, "schedule", "run-now", "nightly")

    store = f"sqlite:///{home}/mlflow.db"
    assert kernel_uri.strip("'") == store
    jobs = JobStore(home)
    # the schedule's job is submitted by the scheduler in its own time: three jobs first
    until(
        lambda: len(jobs.jobs()) >= 3 and not jobs.jobs(active_only=True),
        "the schedule's job submitted, and every job ended",
        timeout=240,
    )
    recorded = {job.spec.tracking.tracking_uri for job in jobs.jobs()}
    assert recorded == {store}, "every job recorded the one store"
    assert air(env, tmp_path, "get", submitted["id"])["status"] == "SUCCEEDED"

    client = MlflowClient(store)
    names = {
        run.info.run_name: run
        for run in client.search_runs([e.experiment_id for e in client.search_experiments()])
    }
    assert {"from-the-notebook", "from-air-run", "from-a-schedule"} <= names.keys()
    for directory in (notebooks, cli_dir, schedule_dir):
        assert not (directory / "mlflow.db").exists(), directory
        assert not (directory / "mlartifacts").exists(), directory
    cell_run = names["from-the-notebook"].info
    assert cell_run.artifact_uri.startswith((home / "mlartifacts").as_uri() + "/")
    assert "weights.txt" in {a.path for a in client.list_artifacts(cell_run.run_id)}
    listed = air(env, tmp_path, "list", "--all-status")
    assert len(listed) == len(jobs.jobs())


def test_an_explicit_tracking_uri_still_wins(
    tmp_path: Path, home: Path, kernel_env: dict[str, str]
) -> None:
    env = {**user_env(home, kernel_env), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/team.db"}
    (tmp_path / "w.yaml").write_text(
        f"command: {sys.executable} -c \"print('cli')\"\nexperiment_name: team\n"
    )
    submitted = air(env, tmp_path, "run", "-f", "w.yaml")
    job = JobStore(home).get(submitted["id"])
    assert job.spec.tracking.tracking_uri == f"sqlite:///{tmp_path}/team.db"
    assert not os.path.exists(home / "mlflow.db")


def test_loading_the_extension_starts_the_users_tail_process_with_the_store_open(
    tmp_path: Path, home: Path, kernel_env: dict[str, str]
) -> None:
    """The first cell's run is made by a process that has MLflow loaded and the store
    open already (one started by that cell held it 2.6 s); the kernel imports no MLflow."""
    kernel = Kernel(user_env(home, kernel_env), cwd=tmp_path)
    try:
        assert kernel.run("%load_ext jupyter_air").error is None
        until(lambda: serving(home), "the user's tail process serving", 120)
        until((home / "mlflow.db").exists, "the default store opened (made) by it", 120)
        assert kernel.run("import sys; 'mlflow' in sys.modules").value() == "False"
    finally:
        kernel.shutdown()
