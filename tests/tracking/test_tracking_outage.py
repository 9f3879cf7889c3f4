"""A team's tracking server that goes down, stops answering or answers 503 in the middle
of a job (issue 23): the ranks never wait for it, the job's outcome and a cancel come
at once, the user is told in one line which server fails since when and what waits, and
when the server answers again every point, the run's end and its logs land by
themselves, each once.

One real ``mlflow server`` (uvicorn, an sqlite backend store, ``--serve-artifacts``) for
the module, killed with kill -9 and started again on its port; a proxy in front of it
plays the server that never answers and the one that answers 503.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs.store import JobStore
from jupyter_air.tracking import journal
from tests.leftovers import end_processes_in
from tests.tracking.test_mlflow_permissions import Server, start_server, stop_server, wait_ready
from tests.tracking_proxy import Mode, TrackingProxy
from tests.waits import assert_gone_within, until

#: A real ``mlflow server``, restarted once, and three jobs: about a minute and a half.
pytestmark = pytest.mark.slow

TRAIN = """\
import os, sys, time
from pathlib import Path
from jupyter_air import log_metrics
for step in range({steps}):
    log_metrics({{"loss": 1 / (step + 1)}}, step=step)
    if step == 50 and os.environ["RANK"] == "0":
        Path(sys.argv[1]).touch()  # the test breaks the server now
    time.sleep(0.02)
print("trained")
"""


@dataclass
class Team:
    """The team's server, its proxy, and a user's home and environment."""

    root: Path
    server: Server
    proxy: TrackingProxy
    home: Path
    env: dict[str, str]

    def restart(self) -> None:
        self.server = start_server(self.root, port=int(self.server.uri.rsplit(":", 1)[1]))
        wait_ready(self.server)


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    root = tmp_path_factory.mktemp("team-server")
    server = start_server(root, "--serve-artifacts", "--artifacts-destination", str(root / "a"))
    wait_ready(server)
    proxy = TrackingProxy(server.uri)
    home = tmp_path_factory.mktemp("air")
    env = {
        **os.environ,
        "AIR_HOME": str(home),
        "AIR_SYSTEM_METRICS_INTERVAL": "1",
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
    }
    team = Team(root, server, proxy, home, env)
    yield team
    proxy.close()
    if team.server.process.poll() is None:
        stop_server(team.server)
    shutil.rmtree(home / "tails", ignore_errors=True)  # its tail process leaves with it
    end_processes_in(home)  # and is gone (the guard found it running at the end)


def air(team: Team, cwd: Path, *args: str, uri: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_air.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**team.env, "MLFLOW_TRACKING_URI": uri},
        cwd=cwd,
    )


def submit(team: Team, tmp_path: Path, uri: str, steps: int) -> tuple[str, Path]:
    """A 2-rank ``air run`` job logging a point a step; its id, and the file rank 0
    makes at step 50."""
    mark = tmp_path / "step-50"
    (tmp_path / "train.py").write_text(TRAIN.format(steps=steps))
    (tmp_path / "w.yaml").write_text(
        f"command: {sys.executable} train.py {mark}\nexperiment_name: outage\n"
        "compute:\n  nproc_per_node: 2\n"
    )
    submitted = air(team, tmp_path, "run", "-f", "w.yaml", "--output", "json", uri=uri)
    assert submitted.returncode == 0, submitted.stderr
    return json.loads(submitted.stdout)["id"], mark


def tracking_line(team: Team, tmp_path: Path, job_id: str, uri: str) -> str | None:
    doc = json.loads(air(team, tmp_path, "get", job_id, "--output", "json", uri=uri).stdout)
    line: str | None = doc["tracking"]
    return line


def journaled(team: Team, job_id: str) -> list[int]:
    """The steps of rank 0's ``loss`` points in the job's one attempt's journal."""
    files = AttemptDir(JobStore(team.home).attempt_dir(job_id, 1))
    lines = journal.read(files.metrics_journal, 0, limit=1 << 30)
    return [p.step for points, _ in lines for p in points if p.key == "loss"]


def landed(team: Team, run_id: str, status: str, steps: list[int]) -> bool:
    """Whether the run on the server has every point once, its end, and its logs."""
    client = MlflowClient(team.server.uri)
    try:
        run = client.get_run(run_id)
        history = client.get_metric_history(run_id, "loss")
        logs = [f.path for f in client.list_artifacts(run_id, "logs/node_0")]
    except Exception:
        return False
    return (
        run.info.status == status
        and sorted(m.step for m in history) == steps
        and logs == ["logs/node_0/rank_0.log", "logs/node_0/rank_1.log"]
    )


def test_a_server_killed_mid_job_stalls_nothing_says_so_and_gets_everything_when_back(
    team: Team, tmp_path: Path
) -> None:
    steps = 300
    job_id, mark = submit(team, tmp_path, team.server.uri, steps)
    until(mark.exists, "rank 0 at step 50", timeout=180)
    stop_server(team.server)  # kill -9 of the whole server, mid-job

    jobs = JobStore(team.home)
    until(lambda: jobs.get(job_id).done, "the job's end, with its server down", timeout=180)
    job = jobs.get(job_id)
    assert job.status == "SUCCEEDED", job.message
    assert team.server.process.poll() is not None, "the outcome came with the server down"
    (attempt,) = jobs.attempts(job_id)
    assert attempt.run_id, "the run was made while the server was up"

    port = team.server.uri.rsplit(":", 1)[1]
    expected = re.compile(
        rf"tracking: http://127\.0\.0\.1:{port} unreachable since \d\d:\d\d:\d\d "
        r"\(connection refused\); \d+ points, the run's end and its logs waiting"
    )

    def said() -> str | None:
        line = tracking_line(team, tmp_path, job_id, team.server.uri)
        return line if line and expected.fullmatch(line) else None

    line = until(said, "the tracking line once the run's tail failed", timeout=240)
    assert f"\n  {line}\n" in air(team, tmp_path, "get", job_id, uri=team.server.uri).stdout

    team.restart()  # nobody acts: what waited lands by itself
    until(
        lambda: landed(team, attempt.run_id or "", "FINISHED", list(range(steps))),
        "every point once, the run's end and its logs on the server",
        timeout=120,
    )
    until(
        lambda: tracking_line(team, tmp_path, job_id, team.server.uri) is None,
        "the tracking line to go",
        timeout=60,
    )
    quiet = air(team, tmp_path, "sync", uri=team.server.uri)
    assert quiet.stdout.startswith("Nothing waits"), quiet.stdout


def test_a_server_that_stops_answering_is_said_in_seconds_and_cancel_still_ends_the_job(
    team: Team, tmp_path: Path
) -> None:
    team.proxy.switch(Mode.FORWARD)
    job_id, mark = submit(team, tmp_path, team.proxy.uri, steps=100_000)
    until(mark.exists, "rank 0 at step 50", timeout=180)
    team.proxy.switch(Mode.SILENT)  # accepts, reads, never replies

    said = until(
        lambda: tracking_line(team, tmp_path, job_id, team.proxy.uri),
        "the tracking line while the server says nothing",
        timeout=120,
    )
    assert re.fullmatch(
        r"tracking: http://127\.0\.0\.1:\d+ unreachable since \d\d:\d\d:\d\d "
        r"\(no answer in (5 s|time)\); \d+ points waiting",
        said,
    ), said

    since = time.monotonic()
    cancelled = air(team, tmp_path, "cancel", job_id, uri=team.proxy.uri)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert JobStore(team.home).get(job_id).status == "CANCELLED"
    assert_gone_within(job_id, since, 10)

    team.proxy.switch(Mode.FORWARD)
    (attempt,) = JobStore(team.home).attempts(job_id)
    until(
        lambda: landed(team, attempt.run_id or "", "KILLED", journaled(team, job_id)),
        "every point journaled before the cancel, the run's end and its logs",
        timeout=120,
    )


def test_submitting_to_a_server_that_does_not_answer_is_refused_in_one_line(
    team: Team, tmp_path: Path
) -> None:
    (tmp_path / "w.yaml").write_text('command: "true"\nexperiment_name: outage\n')
    jobs = len(JobStore(team.home).jobs())
    unavailable = "HTTP 503 Service Unavailable"
    for mode, why in ((Mode.SILENT, "no answer in time"), (Mode.UNAVAILABLE, unavailable)):
        team.proxy.switch(mode)
        refused = air(team, tmp_path, "run", "-f", "w.yaml", uri=team.proxy.uri)
        assert refused.returncode != 0
        assert refused.stderr.strip().splitlines() == [
            f"air: tracking: {team.proxy.uri} does not answer ({why}); nothing was started: "
            "start the server, or set MLFLOW_TRACKING_URI to one that answers, or run with "
            "--tracking deferred"
        ]
    team.proxy.switch(Mode.FORWARD)
    assert len(JobStore(team.home).jobs()) == jobs, "nothing was submitted"


def test_a_deferred_job_runs_while_its_server_is_down_and_gets_its_run_once_it_answers(
    team: Team, tmp_path: Path
) -> None:
    team.proxy.switch(Mode.UNAVAILABLE)
    (tmp_path / "train.py").write_text(TRAIN.format(steps=100))
    (tmp_path / "w.yaml").write_text(
        f"command: {sys.executable} train.py {tmp_path / 'mark'}\nexperiment_name: later\n"
        "tracking: deferred\ncompute:\n  nproc_per_node: 2\n"
    )
    submitted = air(team, tmp_path, "run", "-f", "w.yaml", "--output", "json", uri=team.proxy.uri)
    assert submitted.returncode == 0, submitted.stderr
    assert submitted.stderr.strip().splitlines()[-1] == (
        f"tracking: {team.proxy.uri} does not answer (HTTP 503 Service Unavailable): the job "
        "runs now; its run is made once it answers"
    )
    job_id = json.loads(submitted.stdout)["id"]
    jobs = JobStore(team.home)
    until(lambda: jobs.get(job_id).done, "the job's end, its server down", timeout=180)
    assert jobs.get(job_id).status == "SUCCEEDED"
    (attempt,) = jobs.attempts(job_id)
    assert attempt.run_id is None, "no run while the server answered 503"

    def said() -> str | None:
        line = tracking_line(team, tmp_path, job_id, team.proxy.uri)
        return line if line and "the run, " in line and "its logs waiting" in line else None

    line = until(said, "the tracking line of a run not made yet", timeout=180)
    assert re.fullmatch(
        r"tracking: http://127\.0\.0\.1:\d+ unreachable since \d\d:\d\d:\d\d \(HTTP 503\); "
        r"the run, \d+ points, the run's end and its logs waiting",
        line,
    ), line
    shown = air(team, tmp_path, "get", job_id, uri=team.proxy.uri).stdout
    assert "    run: made once its tracking server answers\n" in shown

    team.proxy.switch(Mode.FORWARD)  # nobody acts: the run is made and filled
    run_id = until(lambda: jobs.attempts(job_id)[0].run_id, "the run made", timeout=120)
    until(
        lambda: landed(team, run_id, "FINISHED", journaled(team, job_id)),
        "every point, the run's end and its logs on the server",
        timeout=120,
    )
    run = MlflowClient(team.server.uri).get_run(run_id)
    assert run.data.tags["air.job_id"] == job_id
    assert run.data.tags["air.attempt"] == "1"
    experiment = MlflowClient(team.server.uri).get_experiment(run.info.experiment_id)
    assert experiment.name == "later"
    assert jobs.get(job_id).experiment_id == run.info.experiment_id


SCHEDULE = """\
name: through-outage
schedule:
  cron: "0 3 * * *"
  pause_status: PAUSED
experiment_name: scheduled
tasks:
  - task_key: strict
    workload: {{command: {python} -c "print('strict ran')"}}
  - task_key: later
    workload:
      command: {python} {later}
      tracking: deferred
"""


def test_a_schedule_fired_in_an_outage_fails_a_strict_task_in_one_line_and_runs_a_deferred_one(
    team: Team, tmp_path: Path
) -> None:
    from jupyter_air.schedules.scheduler import stop

    team.proxy.switch(Mode.UNAVAILABLE)
    later = tmp_path / "later.py"
    later.write_text("from jupyter_air import log_metrics\nlog_metrics({'x': 1.0}, step=0)\n")
    (tmp_path / "s.yaml").write_text(SCHEDULE.format(python=sys.executable, later=later))
    uri = team.proxy.uri
    try:
        assert air(team, tmp_path, "schedule", "create", "-f", "s.yaml", uri=uri).returncode == 0
        assert air(team, tmp_path, "schedule", "run-now", "through-outage", uri=uri).returncode == 0

        def ended() -> dict[str, Any] | None:
            shown = air(team, tmp_path, "schedule", "runs", "through-outage", "--output", "json",
                        uri=uri)  # fmt: skip
            runs = json.loads(shown.stdout)
            return next((r for r in runs if r["status"] not in ("RUNNING", "SKIPPED")), None)

        run = until(ended, "the schedule's run to end", timeout=240)
        assert run is not None
        tasks = {t["task_key"]: t for t in run["tasks"]}
        assert tasks["strict"]["status"] == "FAILED"
        assert tasks["strict"]["message"].startswith(
            f"could not submit: tracking: {uri} does not answer (HTTP 503 Service Unavailable); "
            "the task's job was not started"
        ), tasks["strict"]
        assert tasks["later"]["status"] == "SUCCEEDED", tasks["later"]

        team.proxy.switch(Mode.FORWARD)  # the deferred task's run is made, and filled
        job_id = tasks["later"]["job_id"]

        def run_made() -> str | None:
            (attempt,) = JobStore(team.home).attempts(job_id)
            return attempt.run_id

        run_id = until(run_made, "the deferred task's run", timeout=180) or ""
        until(lambda: landed_points(team, run_id, "x") == [0], "its point", timeout=120)
    finally:
        team.proxy.switch(Mode.FORWARD)
        stop(team.home)


def landed_points(team: Team, run_id: str, key: str) -> list[int]:
    try:
        return [m.step for m in MlflowClient(team.server.uri).get_metric_history(run_id, key)]
    except Exception:
        return []
