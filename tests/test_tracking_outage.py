"""A team's tracking server killed in the middle of a job: the ranks never wait for it,
the job ends, rank 0's points wait in the journal and say so, and ``air sync`` ships
them, each once, when the server is back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_air.jobs.store import JobStore
from tests.test_mlflow_permissions import Server, start_server, stop_server, wait_ready
from tests.waits import until

#: Two real ``mlflow server`` starts and a job: about a minute.
pytestmark = pytest.mark.slow

STEPS = 300
TRAIN = """\
import sys, time
from pathlib import Path
from jupyter_air import log_metrics
for step in range({steps}):
    log_metrics({{"loss": 1 / (step + 1)}}, step=step)
    if step == 50:
        Path(sys.argv[1]).touch()  # the test kills the server now
    time.sleep(0.02)
print("trained")
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    root = tmp_path / "team-server"
    root.mkdir()
    server = start_server(root)
    wait_ready(server)
    yield server
    if server.process.poll() is None:
        stop_server(server)


def air(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_air.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=cwd,
    )


def test_a_server_killed_mid_job_stalls_nothing_and_air_sync_ships_every_point_once(
    server: Server, tmp_path: Path
) -> None:

    home, mark = tmp_path / "air", tmp_path / "step-50"
    env = {
        **os.environ,
        "AIR_HOME": str(home),
        "MLFLOW_TRACKING_URI": server.uri,
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
    }
    (tmp_path / "train.py").write_text(TRAIN.format(steps=STEPS))
    (tmp_path / "w.yaml").write_text(
        f"command: {sys.executable} train.py {mark}\nexperiment_name: outage\n"
    )
    submitted = air(env, tmp_path, "run", "-f", "w.yaml", "--output", "json")
    assert submitted.returncode == 0, submitted.stderr
    job_id = json.loads(submitted.stdout)["id"]
    until(mark.exists, "rank 0 at step 50", timeout=180)
    stop_server(server)  # kill -9 of the whole server, mid-job

    jobs = JobStore(home)
    until(lambda: jobs.get(job_id).done, "the job's end", timeout=180)
    job = jobs.get(job_id)
    assert job.status == "SUCCEEDED", job.message
    (attempt,) = jobs.attempts(job_id)
    assert attempt.run_id, "the run was made while the server was up"
    assert f"bytes not in MLflow yet: air sync {job_id}" in air(env, tmp_path, "get", job_id).stdout
    down = air(env, tmp_path, "sync", job_id)
    assert down.returncode == 1
    assert "bytes still wait" in down.stdout

    back = start_server(tmp_path / "team-server", port=int(server.uri.rsplit(":", 1)[1]))
    try:
        wait_ready(back)
        synced = air(env, tmp_path, "sync", job_id)
        assert synced.returncode == 0, synced.stdout + synced.stderr
        assert "metrics:" not in air(env, tmp_path, "get", job_id).stdout
        from mlflow import MlflowClient

        history = MlflowClient(server.uri).get_metric_history(attempt.run_id, "loss")
        assert sorted(m.step for m in history) == list(range(STEPS)), "every point, once"
        assert air(env, tmp_path, "sync").stdout.startswith("Nothing waits")
    finally:
        stop_server(back)
