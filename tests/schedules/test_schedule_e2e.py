"""Schedules end to end: the ``air`` CLI, a real scheduler process, real supervisors and
ranks, real MLflow. Few and long on purpose: each fired task is a whole job."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.jobs import cancel
from jupyter_air.jobs.store import JobStore
from jupyter_air.schedules.model import MISSED
from jupyter_air.schedules.scheduler import running, stop
from tests.mlflow_store import fresh_store
from tests.waits import until

#: A scheduler's chains and notebook tasks, fired for real: half a minute and more each.
pytestmark = pytest.mark.slow

CHAIN = """\
name: chain
schedule:
  quartz_cron_expression: "*/2 * * * * ?"
max_concurrent_runs: 1
catch_up: latest
experiment_name: chain-exp
tasks:
  - task_key: prep
    workload:
      command: {python} -c "import os, sys; sys.exit(1 if os.path.exists('fail') else 0)"
  - task_key: train
    depends_on: [{{task_key: prep}}]
    run_if: ALL_SUCCESS
    experiment_name: nightly
    workload: {{command: {python} -c "print('training')"}}
"""

NOTEBOOK = {
    "cells": [
        {
            "cell_type": "code",
            "id": "c0",
            "metadata": {},
            "source": "%load_ext jupyter_air",
            "outputs": [],
            "execution_count": None,
        },
        {
            "cell_type": "code",
            "id": "c1",
            "metadata": {},
            "source": "print('lr is', lr)",
            "outputs": [],
            "execution_count": None,
        },
        {
            "cell_type": "code",
            "id": "c2",
            "metadata": {},
            "source": "%%air_distributed -n 1 --run-name cell\nprint('rank says hello')",
            "outputs": [],
            "execution_count": None,
        },
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}

REPORT = """\
name: report
schedule:
  cron: "0 3 * * *"
  pause_status: PAUSED
experiment_name: reports
tasks:
  - task_key: report
    notebook: report.ipynb
    parameters: {lr: 0.001}
"""


@pytest.fixture
def workdir(
    tmp_path: Path, mlflow_template: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", fresh_store(mlflow_template, tmp_path))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))  # no server: no links
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    stop(tmp_path / "air")
    jobs = JobStore(tmp_path / "air")
    for job in jobs.jobs(active_only=True):
        cancel.cancel(jobs, job.id)
        cancel.wait(jobs, job.id, 60)


def air(*args: str) -> Any:
    """``air ARGS --output json``, which must succeed; its document."""
    return json.loads(air_text(*args, "--output", "json"))


def air_text(*args: str) -> str:
    """What ``air ARGS`` prints, which must succeed."""
    result = subprocess.run(
        [sys.executable, "-m", "jupyter_air.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def ended_runs(name: str) -> list[dict[str, Any]]:
    """Runs that ran (not SKIPPED), ended, oldest first."""
    runs = air("schedule", "runs", name, "--limit", "200")
    return [r for r in reversed(runs) if r["status"] not in ("RUNNING", "SKIPPED")]


def mlflow_run(tmp_path: Path, run_id: str) -> Any:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    run = client.get_run(run_id)
    return run, client.get_experiment(run.info.experiment_id).name


def test_a_chain_every_two_seconds_pause_resume_and_a_killed_scheduler(workdir: Path) -> None:
    (workdir / "chain.yaml").write_text(CHAIN.format(python=sys.executable))
    created = air("schedule", "create", "-f", "chain.yaml")
    assert created["cron"]["words"] == "Every 2 seconds (UTC)"
    assert len(created["next_fire_times"]) == 3
    home = workdir / "air"
    assert running(home) is not None  # create started the scheduler

    # prep -> train: train starts only after prep succeeded; each run in its experiment
    first = until(lambda: ended_runs("chain"), "a run of chain ended", 240, 0.5)[0]
    assert first["status"] == "SUCCEEDED"
    prep, train = first["tasks"]
    jobs = JobStore(home)
    prep_job, train_job = jobs.get(prep["job_id"]), jobs.get(train["job_id"])
    assert prep_job.ended is not None
    assert train_job.created >= prep_job.ended
    for task, experiment in ((prep, "chain-exp"), (train, "nightly")):
        run, name = mlflow_run(workdir, task["run_id"])
        assert name == experiment
        assert run.data.tags["air.schedule"] == "chain"
        assert run.data.tags["air.schedule_run"] == str(first["id"])
        assert run.data.tags["air.task_key"] == task["task_key"]
        assert run.data.tags["air.scheduled_time"] == first["scheduled_time"]
        assert run.data.tags["air.job_id"] == task["job_id"]

    # prep fails: train does not run at all (ALL_SUCCESS), the run FAILED
    (workdir / "fail").touch()
    failed = until(
        lambda: [r for r in ended_runs("chain") if r["status"] == "FAILED"],
        "a FAILED run of chain",
        240,
        0.5,
    )[0]
    assert failed["tasks"][1]["status"] == "SKIPPED"
    assert failed["tasks"][1]["job_id"] is None
    assert failed["tasks"][1]["message"] == "run_if ALL_SUCCESS: prep FAILED"
    (workdir / "fail").unlink()

    # pause: no new runs; resume: runs again
    air("schedule", "pause", "chain")
    paused_at = len(air("schedule", "runs", "chain", "--limit", "200"))
    time.sleep(5)
    assert len(air("schedule", "runs", "chain", "--limit", "200")) == paused_at
    air("schedule", "resume", "chain")
    until(
        lambda: len(air("schedule", "runs", "chain", "--limit", "200")) > paused_at,
        "a run of chain after the resume",
        240,
        0.5,
    )

    # kill -9 the scheduler: times pass unfired; any air schedule command restarts it
    last_id = max(r["id"] for r in air("schedule", "runs", "chain", "--limit", "1"))
    info = running(home)
    assert info is not None
    os.kill(info.pid, signal.SIGKILL)
    until(lambda: running(home) is None, "the killed scheduler gone", 240, 0.5)
    time.sleep(7)  # three or four times pass: the latest fires, the others are missed
    air("schedule", "list")
    restarted = running(home)
    assert restarted is not None
    assert restarted.pid != info.pid

    def runs_after_the_kill() -> list[dict[str, Any]]:
        runs = air("schedule", "runs", "chain", "--limit", "200")
        return [r for r in runs if r["id"] > last_id and r["message"] == MISSED]

    until(runs_after_the_kill, "the missed times recorded after the kill", 240, 0.5)
    after = [r for r in air("schedule", "runs", "chain", "--limit", "200") if r["id"] > last_id]
    missed = [r for r in after if r["message"] == MISSED]
    assert len(missed) >= 2
    assert all(r["status"] == "SKIPPED" for r in missed)
    missed_times = sorted(datetime.fromisoformat(r["scheduled_time"]) for r in missed)
    gaps = {(b - a).total_seconds() for a, b in itertools.pairwise(missed_times)}
    assert gaps == {2.0}  # every time while it was down, none lost
    # catch_up: latest -- the latest missed time fired, recorded by the same tick
    caught_up = [r for r in after if r["created"] == missed[0]["created"] and r not in missed]
    assert len(caught_up) == 1
    assert caught_up[0]["scheduled_time"] > max(r["scheduled_time"] for r in missed)
    assert caught_up[0]["status"] != "SKIPPED" or "max_concurrent_runs" in caught_up[0]["message"]


def test_a_notebook_task_keeps_its_executed_notebook_and_its_cell_is_its_child_job(
    workdir: Path,
) -> None:
    (workdir / "report.ipynb").write_text(json.dumps(NOTEBOOK))
    (workdir / "report.yaml").write_text(REPORT)
    created = air("schedule", "create", "-f", "report.yaml")
    assert created["pause_status"] == "PAUSED"
    assert created["next_fire_times"] == []
    (workdir / "report.ipynb").write_text("edited after the snapshot")  # changes nothing
    started = air("schedule", "run-now", "report")
    run = until(
        lambda: [r for r in ended_runs("report") if r["id"] == started["id"]],
        "the run-now run of report ended",
        400,
        0.5,
    )[0]
    assert run["status"] == "SUCCEEDED", run
    task = run["tasks"][0]
    mlrun, experiment = mlflow_run(workdir, task["run_id"])
    assert experiment == "reports"
    assert mlrun.data.tags["air.task_key"] == "report"
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{workdir}/mlflow.db")
    import nbformat

    path = client.download_artifacts(task["run_id"], "notebook/report.ipynb", str(workdir))
    executed = nbformat.read(path, as_version=4)
    assert executed.cells[0].source == "lr = 0.001", "the notebook loads jupyter_air itself"
    outputs = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", []))
    assert "lr is 0.001" in outputs
    assert "rank says hello" in outputs
    assert "already loaded" not in outputs
    # ... and the same copy in the task's job's own folder, where JupyterLab opens it
    kept = Path(task["executed_notebook"])
    assert kept == JobStore(workdir / "air").attempt_dir(task["job_id"], 1) / "notebook" / (
        "report.ipynb"
    )
    assert nbformat.read(kept, as_version=4) == executed
    runs_text = air_text("schedule", "runs", "report")
    assert f"      executed notebook: {kept}\n" in runs_text
    jobs = JobStore(workdir / "air")
    cell_jobs = [j for j in jobs.jobs() if j.id != task["job_id"]]
    assert len(cell_jobs) == 1  # the distributed cell: a job of its own
    cell_job = cell_jobs[0]
    assert cell_job.status == "SUCCEEDED"
    assert cell_job.spec.tracking.run_name == "cell"

    # ... the task's child: under it in `air get`, the schedule run and MLflow
    assert cell_job.parent_id == task["job_id"]
    assert air("get", task["job_id"])["children"] == [cell_job.id]
    assert air("get", cell_job.id)["parent_id"] == task["job_id"]
    (child,) = task["children"]
    assert (child["job_id"], child["status"], child["run_name"]) == (
        cell_job.id,
        "SUCCEEDED",
        "cell",
    )
    cell_run, cell_experiment = mlflow_run(workdir, child["run_id"])
    assert cell_experiment == "reports"
    assert cell_run.data.tags["mlflow.parentRunId"] == task["run_id"]
    assert cell_run.data.tags["air.parent_job_id"] == task["job_id"]
    text = air_text("get", task["job_id"])
    assert f"jobs it started: 1\n    {cell_job.id}  SUCCEEDED" in text

    # ... and the task's logs read as the notebook: its outputs, not the kernel's chatter
    logs = air_text("logs", task["job_id"])
    assert "lr is 0.001" in logs
    assert "rank says hello" in logs
    assert "without encryption" not in logs
    assert "already loaded" not in logs
    assert "WARNING" not in logs


FIRE_IN_A_FRESH_PROCESS = """
import json, sys
from pathlib import Path
from jupyter_air.identity import os_identity
from jupyter_air.jobs.store import JobStore
from jupyter_air.schedules.scheduler import Scheduler
from jupyter_air.schedules.service import Schedules
from jupyter_air.schedules.tick import tick

jobs = JobStore()
s = Schedules(jobs)
doc = {"name": "light", "schedule": {"cron": "0 3 * * *"},
       "tasks": [{"task_key": "t", "workload": {"command": "true"}}]}
schedule = s.create(os_identity(), s.parse(doc, Path.cwd()))
scheduler = Scheduler(jobs)
result = tick(scheduler.store, scheduler.launch, schedule.next_due, scheduler.claimer)
heavy = {"mlflow", "torch", "IPython", "tornado", "jupyter_server", "numpy"}
print(json.dumps({"submitted": result.submitted,
                  "imported": sorted(heavy & {m.split(".")[0] for m in sys.modules})}))
"""


def test_the_scheduler_submits_without_importing_mlflow_or_torch(workdir: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", FIRE_IN_A_FRESH_PROCESS],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    doc = json.loads(out.splitlines()[-1])
    assert doc["imported"] == []
    assert len(doc["submitted"]) == 1
    job = cancel.wait(JobStore(workdir / "air"), doc["submitted"][0], 120)
    assert job.status == "SUCCEEDED"


def test_one_scheduler_per_air_home_its_files_private_and_stop(workdir: Path) -> None:
    (workdir / "report.ipynb").write_text(json.dumps(NOTEBOOK))
    (workdir / "report.yaml").write_text(REPORT)
    air("schedule", "create", "-f", "report.yaml")
    home = workdir / "air"
    first = running(home)
    assert first is not None
    second = subprocess.run(
        [sys.executable, "-m", "jupyter_air.schedules.scheduler"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 0  # it found the lock held and left
    assert running(home) == first
    for name in ("scheduler.json", "scheduler.lock", "scheduler.log"):
        assert (home / name).stat().st_mode & 0o077 == 0, name
    status = air("scheduler", "status")
    assert status["running"] is True
    assert status["pid"] == first.pid
    stopped = air("scheduler", "stop")
    assert stopped["pid"] == first.pid
    assert running(home) is None
    assert air("scheduler", "status")["running"] is False
    air("schedule", "delete", "report")
    air("schedule", "list")  # with no schedule left, no scheduler is started
    assert running(home) is None


EVERY_TWO_SECONDS = """\
name: beyond-the-server
schedule:
  quartz_cron_expression: "*/2 * * * * ?"
max_concurrent_runs: 1
tasks:
  - task_key: t
    workload: {command: "true"}
"""


def test_stopping_the_jupyter_server_does_not_stop_a_schedule(workdir: Path) -> None:
    """Made through the REST API of a real server, which starts the scheduler; the
    server stopped (SIGTERM: its extensions' stop hooks run), the schedule still fires."""
    from tests.kernel.test_abuse_processes import Server

    server = Server(dict(os.environ), workdir)
    try:
        created = server.api("jupyter-air/schedules", {"yaml": EVERY_TWO_SECONDS})
        home = workdir / "air"
        info = until(lambda: running(home), "the scheduler running", 60, 0.1)
        # out of the server's process group and session: a group kill or a hangup misses it
        assert os.getpgid(info.pid) != os.getpgid(server.process.pid)
        assert os.getsid(info.pid) == info.pid
    finally:
        server.process.terminate()
        server.process.wait(60)
    stopped_at = time.time()
    assert running(home) == info

    def fired_after_the_stop() -> list[dict[str, Any]]:
        runs = air("schedule", "runs", created["id"], "--limit", "20")
        return [
            r
            for r in runs
            if datetime.fromisoformat(r["scheduled_time"]).timestamp() > stopped_at
            and r["tasks"]  # a run SKIPPED (max_concurrent_runs) has none
            and r["tasks"][0]["job_id"] is not None
        ]

    run = until(fired_after_the_stop, "a run fired after the stop", 120, 0.5)[-1]
    assert run["status"] != "SKIPPED"
    job = cancel.wait(JobStore(home), run["tasks"][0]["job_id"], 120)
    assert job.status == "SUCCEEDED"
    assert running(home) == info  # the same scheduler throughout
