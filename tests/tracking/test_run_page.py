"""What MLflow's UI shows of the experiments and runs jobs make: the model-training kind,
and the job's logs in every run's description (read back through MLflow's API)."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
from mlflow import MlflowClient

from jupyter_air.tracking import runs
from jupyter_air.tracking.run_page import (
    DESCRIPTION,
    EXPERIMENT_KIND,
    MODEL_TRAINING,
    describe_run,
    logs_line,
)
from jupyter_air.tracking.targets import job_tags

BASE_URL = "/user/ada/"


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MlflowClient:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.delenv("AIR_MLFLOW_UI_URL", raising=False)
    return MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")


@pytest.fixture
def jupyter_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process is the kernel of a Jupyter server at ``BASE_URL`` (its runtime file)."""
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    pid = psutil.Process().pid
    info = {"pid": pid, "url": f"http://10.0.0.5:8888{BASE_URL}", "base_url": BASE_URL}
    (runtime / "jpserver-1.json").write_text(json.dumps(info))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("JPY_PARENT_PID", str(pid))


def kind(client: MlflowClient, experiment_id: str) -> str | None:
    return client.get_experiment(experiment_id).tags.get(EXPERIMENT_KIND)


def test_experiments_jobs_make_or_reuse_are_of_the_model_training_kind(
    client: MlflowClient,
) -> None:
    made = runs.ensure_experiment(client, "/Users/ada/train")
    assert kind(client, made) == MODEL_TRAINING

    untagged = client.create_experiment("made-by-hand")
    assert kind(client, untagged) is None
    assert runs.ensure_experiment(client, "made-by-hand") == untagged
    assert kind(client, untagged) == MODEL_TRAINING


def test_a_kind_the_user_chose_is_kept(client: MlflowClient) -> None:
    chosen = client.create_experiment("agents", tags={EXPERIMENT_KIND: "genai_development"})
    runs.ensure_experiment(client, "agents")
    assert kind(client, chosen) == "genai_development"


def test_an_experiment_reused_by_id_gets_the_kind_too(
    client: MlflowClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow

    by_id = client.create_experiment("set-by-id")
    monkeypatch.setattr(mlflow, "get_tracking_uri", lambda: client.tracking_uri)
    # resolve_target adopts a store into the environment: undone after the test, or the
    # next module of this worker (a lab started from it) would inherit it.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", client.tracking_uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", by_id)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    target = runs.resolve_target(None, "ada", "train.ipynb")
    assert target.experiment_id == by_id
    assert kind(client, by_id) == MODEL_TRAINING


@pytest.mark.usefixtures("jupyter_server")
def test_every_attempts_run_describes_where_its_logs_are(client: MlflowClient) -> None:
    experiment = runs.ensure_experiment(client, "train")
    tags = job_tags("20261202-001500-abcdef", 1, 2, 1, None, "ada")
    first = runs.start_run(client, experiment, tags, None, None)
    retry = runs.start_run(client, experiment, {**tags, "air.attempt": "2"}, None, None)
    for run_id in (first, retry):
        note = client.get_run(run_id).data.tags[DESCRIPTION]
        assert note == (
            "**Logs of job 20261202-001500-abcdef:** [open them in JupyterLab]"
            "(/user/ada/lab?air-job=20261202-001500-abcdef) or run "
            "`air logs 20261202-001500-abcdef`"
        )


@pytest.mark.usefixtures("jupyter_server")
def test_a_resumed_runs_own_description_is_kept_and_the_link_added_once(
    client: MlflowClient,
) -> None:
    experiment = runs.ensure_experiment(client, "train")
    own = client.create_run(experiment, tags={DESCRIPTION: "Baseline, lr 3e-4."}).info.run_id
    tags = job_tags("20261202-001500-abcdef", 1, 1, 1, None, "ada")
    runs.resume_run(client, own, tags)
    runs.resume_run(client, own, tags)
    note = client.get_run(own).data.tags[DESCRIPTION]
    assert note.startswith("Baseline, lr 3e-4.\n\n**Logs of job 20261202-001500-abcdef:**")
    assert note.count("air logs 20261202-001500-abcdef") == 1


def test_without_a_jupyter_server_the_description_gives_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))  # no server runs
    line = logs_line("j1", "sqlite:///x.db")
    assert line == "**Logs of job j1:** run `air logs j1`"


@pytest.mark.usefixtures("jupyter_server")
def test_an_mlflow_ui_elsewhere_gets_the_servers_own_url() -> None:
    """A link in a page of another origin cannot be a path of this server."""
    line = logs_line("j1", "https://mlflow.internal")
    assert "(http://10.0.0.5:8888/user/ada/lab?air-job=j1)" in line
    text = describe_run(None, "j1", "sqlite:///x.db", {"AIR_MLFLOW_UI_URL": "https://ui/"})
    assert "(http://10.0.0.5:8888/user/ada/lab?air-job=j1)" in text
