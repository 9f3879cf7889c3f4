"""The team's tracking server behind MLflow's own auth app (``mlflow server --app-name
basic-auth``), going down mid-job (issue 23, item 6): nothing waits for it, everything
lands once it is back, with the user's credentials from MLflow's own places (the
``MLFLOW_TRACKING_USERNAME``/``PASSWORD`` variables or ``~/.mlflow/credentials``),
which are never written into the job's files, its logs or its run.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow import MlflowClient

from jupyter_air.jobs.store import JobStore
from jupyter_air.tracking import run_tails
from tests.leftovers import end_processes_in
from tests.tracking.test_mlflow_permissions import (
    Server,
    auth_app,
    start_server,
    stop_server,
    wait_ready,
)
from tests.tracking.test_tracking_outage import TRAIN, Team, landed
from tests.tracking_proxy import TrackingProxy
from tests.waits import until

#: A real auth server, restarted once: about a minute.
pytestmark = pytest.mark.slow

USER, PASSWORD = "carol", secrets.token_urlsafe(16)


class AuthTeam(Team):
    """The team's server with its auth app; started again the same way, same port."""

    auth_env: dict[str, str]
    admin: str  # the admin's password

    def restart(self) -> None:
        port = int(self.server.uri.rsplit(":", 1)[1])
        self.server = start_auth_server(self.root, self.auth_env, port)
        wait_ready(self.server)


def start_auth_server(root: Path, env: dict[str, str], port: int | None = None) -> Server:
    return start_server(
        root,
        "--app-name", "basic-auth",
        "--serve-artifacts", "--artifacts-destination", str(root / "a"),
        env=env,
        port=port,
    )  # fmt: skip


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthTeam]:
    root = tmp_path_factory.mktemp("auth-server")
    admin = secrets.token_urlsafe(16)
    auth_env = auth_app(root, admin, "READ")
    server = start_auth_server(root, auth_env)
    wait_ready(server)
    from mlflow.server.auth.client import AuthServiceClient

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_USERNAME", "admin")
        mp.setenv("MLFLOW_TRACKING_PASSWORD", admin)
        AuthServiceClient(server.uri).create_user(USER, PASSWORD)
    home = tmp_path_factory.mktemp("air")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")},
        "AIR_HOME": str(home),
        "AIR_SYSTEM_METRICS_INTERVAL": "1",
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "HOME": str(home / "user"),  # its ~/.mlflow/credentials, when a test writes one
    }
    made = AuthTeam(root, server, TrackingProxy(server.uri), home, env)
    made.auth_env = auth_env
    made.admin = admin
    yield made
    made.proxy.close()
    if made.server.process.poll() is None:
        stop_server(made.server)
    end_processes_in(home)  # the home's tail process (the guard found it at the end)


def run_job(team: AuthTeam, tmp_path: Path, env: dict[str, str], steps: int) -> tuple[str, Path]:
    """A 2-rank ``air run`` job logging a point a step, as the user; its id and the file
    rank 0 makes at step 50."""
    mark = tmp_path / "step-50"
    (tmp_path / "train.py").write_text(TRAIN.format(steps=steps))
    (tmp_path / "w.yaml").write_text(
        f"command: {sys.executable} train.py {mark}\nexperiment_name: auth-outage\n"
        "compute:\n  nproc_per_node: 2\n"
    )
    return air_run(team, tmp_path, env), mark


def air_run(team: AuthTeam, tmp_path: Path, env: dict[str, str]) -> str:
    """``air run -f w.yaml`` in ``tmp_path`` as the user; the job's id."""
    submitted = subprocess.run(
        [sys.executable, "-m", "jupyter_air.cli", "run", "-f", "w.yaml", "--output", "json"],
        capture_output=True,
        text=True,
        timeout=180,
        env={**team.env, "MLFLOW_TRACKING_URI": team.server.uri, **env},
        cwd=tmp_path,
    )
    assert submitted.returncode == 0, submitted.stderr
    return str(json.loads(submitted.stdout)["id"])


def nowhere_but_the_user_s(team: AuthTeam, run_id: str) -> None:
    """The password is in no file of the job store, no log, no tag or param of the run."""
    found = [
        str(path)
        for path in team.home.rglob("*")
        if path.is_file()
        and "user/.mlflow" not in str(path)
        and PASSWORD.encode() in path.read_bytes()
    ]
    assert found == [], "the password was written here"
    run = MlflowClient(team.server.uri).get_run(run_id)
    shown = json.dumps([run.data.tags, run.data.params])
    assert PASSWORD not in shown
    assert USER not in run.data.params.values()


@pytest.fixture
def as_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's own MLflow client reads the server as the user."""
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", USER)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", PASSWORD)


@pytest.mark.usefixtures("as_user")
def test_an_auth_server_killed_mid_job_gets_everything_as_the_user_once_back(
    team: AuthTeam, tmp_path: Path
) -> None:
    steps = 300
    credentials = {"MLFLOW_TRACKING_USERNAME": USER, "MLFLOW_TRACKING_PASSWORD": PASSWORD}
    job_id, mark = run_job(team, tmp_path, credentials, steps)
    until(mark.exists, "rank 0 at step 50", timeout=180)
    stop_server(team.server)  # kill of the whole server, mid-job

    jobs = JobStore(team.home)
    until(lambda: jobs.get(job_id).done, "the job's end, with its server down", timeout=180)
    assert jobs.get(job_id).status == "SUCCEEDED", jobs.get(job_id).message
    (attempt,) = jobs.attempts(job_id)
    assert attempt.run_id

    team.restart()  # nobody acts: what waited lands by itself, authenticated
    until(
        lambda: landed(team, attempt.run_id or "", "FINISHED", list(range(steps))),
        "every point once, the run's end and its logs on the auth server",
        timeout=180,
    )
    nowhere_but_the_user_s(team, attempt.run_id)


@pytest.mark.usefixtures("as_user")
def test_credentials_from_the_user_s_mlflow_credentials_file_are_used_and_kept_there(
    team: AuthTeam, tmp_path: Path
) -> None:
    mlflow_dir = Path(team.env["HOME"]) / ".mlflow"
    mlflow_dir.mkdir(parents=True, exist_ok=True)
    (mlflow_dir / "credentials").write_text(
        f"[mlflow]\nmlflow_tracking_username = {USER}\nmlflow_tracking_password = {PASSWORD}\n"
    )
    job_id, _ = run_job(team, tmp_path, {}, steps=60)
    jobs = JobStore(team.home)
    until(lambda: jobs.get(job_id).done, "the job's end", timeout=180)
    assert jobs.get(job_id).status == "SUCCEEDED", jobs.get(job_id).message
    (attempt,) = jobs.attempts(job_id)
    until(
        lambda: landed(team, attempt.run_id or "", "FINISHED", list(range(60))),
        "every point, the end and the logs",
        timeout=180,
    )
    nowhere_but_the_user_s(team, attempt.run_id or "")


@pytest.mark.usefixtures("as_user")
def test_a_deferred_job_s_grants_are_set_on_the_experiment_its_run_is_made_in_late(
    team: AuthTeam, tmp_path: Path
) -> None:
    """The server is down from the submission to the job's end: the user's tail process
    makes the experiment and the run when it is back, and gives the job's grants there
    too (nobody else is left to)."""
    from mlflow.server.auth.client import AuthServiceClient

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_USERNAME", "admin")
        mp.setenv("MLFLOW_TRACKING_PASSWORD", team.admin)
        AuthServiceClient(team.server.uri).create_user("dave", secrets.token_urlsafe(16))
    stop_server(team.server)
    (tmp_path / "late.py").write_text(
        "from jupyter_air import log_metrics\nlog_metrics({'x': 1.0}, step=0)\n"
    )
    (tmp_path / "w.yaml").write_text(
        f"command: {sys.executable} late.py\nexperiment_name: made-late\n"
        "tracking: deferred\npermissions: ['dave:CAN_MANAGE_RUN']\n"
    )
    credentials = {"MLFLOW_TRACKING_USERNAME": USER, "MLFLOW_TRACKING_PASSWORD": PASSWORD}
    job_id = air_run(team, tmp_path, credentials)
    jobs = JobStore(team.home)
    until(lambda: jobs.get(job_id).done, "the job's end, with its server down", timeout=180)
    assert jobs.get(job_id).status == "SUCCEEDED", jobs.get(job_id).message
    assert jobs.attempts(job_id)[0].run_id is None, "no run while the server was down"

    team.restart()  # nobody acts
    run_id = until(lambda: jobs.attempts(job_id)[0].run_id, "the run made late", timeout=180)
    experiment_id = MlflowClient(team.server.uri).get_run(run_id).info.experiment_id

    def dave_s() -> str:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("MLFLOW_TRACKING_USERNAME", "admin")
            mp.setenv("MLFLOW_TRACKING_PASSWORD", team.admin)
            held = AuthServiceClient(team.server.uri).get_user_permission(
                "dave", "experiment", experiment_id
            )
        return str(held.permission)

    until(lambda: dave_s() == "EDIT", "dave's EDIT on the late experiment", timeout=60)
    # The rest of its tail (its end, its logs) lands too: nothing is left to retry against
    # a server the module stops next (the tail process would try it for ever).
    client = MlflowClient(team.server.uri)
    until(lambda: client.get_run(run_id).info.status == "FINISHED", "the late run's end", 120)
    until(lambda: not run_tails.pending(team.home / "tails"), "no tail left pending", 120)
