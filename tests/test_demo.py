"""What ``make demo`` says of its quickstart job and how it starts its lab, without running
the quickstart (tests/kernel/test_quickstart.py runs it) or a browser
(tests/ui/test_demo_terminal.py opens the lab's terminal)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from mlflow import MlflowClient
from traitlets.config.loader import PyFileConfigLoader

from jupyter_air.jobs.store import JobStore
from jupyter_air.status import JobStatus
from jupyter_air.tracking.stores import lookup_store, store_key
from jupyter_air.tracking.targets import default_experiment_name
from jupyter_air.tracking.ui_links import logs_url
from scripts import demo
from tests.factories import job_spec
from tests.mlflow_store import fresh_store

LAB_URL = "http://127.0.0.1:8888/lab?token=x"


@pytest.fixture
def air_home(tmp_path: Path, mlflow_template: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "air"
    home.mkdir(mode=0o700)
    fresh_store(mlflow_template, home)  # migrated: no test here is about a new store
    monkeypatch.setenv("AIR_HOME", str(home))
    return home


@pytest.mark.heavy
def test_the_console_links_the_run_page_and_the_logs_view_and_says_air_logs(
    air_home: Path,
) -> None:
    uri = f"sqlite:///{air_home}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("quickstart", artifact_location=str(air_home / "art"))
    run = client.create_run(experiment, run_name="quickstart").info.run_id
    store = JobStore(air_home)
    spec = job_spec(command=["true"], tracking_uri=uri, experiment_id=experiment)
    job = store.create(spec).id
    store.start_attempt(job, 1, run)
    store.update(job, status=JobStatus.SUCCEEDED)

    lines = demo.summary(store, job, LAB_URL)

    key = store_key(uri)
    assert lines == [
        f"Job {job}: succeeded, MLflow run quickstart in experiment 'quickstart' (the check's "
        "own: the quickstart's experiment holds your runs only)",
        f"  run:  http://127.0.0.1:8888/jupyter-air/mlflow/{key}/#/experiments/{experiment}"
        f"/runs/{run}?workflowType=machine_learning",
        f"  logs: http://127.0.0.1:8888/lab?air-job={job}  (in a terminal: air logs {job})",
    ]
    assert lookup_store(key) == uri, "the demo's lab will serve the store's UI"


def test_the_logs_link_is_the_one_a_cell_shows_once_the_demo_lab_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Printed before the lab starts, so built from its URL, not from a running server."""
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    for url, root in [
        (LAB_URL, "http://127.0.0.1:8888/"),
        ("http://127.0.0.1:8888/user/ada/lab?token=x", "http://127.0.0.1:8888/user/ada/"),
    ]:
        server = {"pid": os.getpid(), "url": root, "base_url": urlsplit(root).path}
        (tmp_path / f"jpserver-{os.getpid()}.json").write_text(json.dumps(server))
        printed = demo.job_logs_url(demo.lab_root(url), "20261204-132627-2c2a8f")
        assert printed == logs_url("20261204-132627-2c2a8f", absolute=True, environ={})
        assert printed == f"{root}lab?air-job=20261204-132627-2c2a8f"


def test_the_printed_url_opens_the_quickstart_notebook_with_the_token() -> None:
    """JupyterLab's /lab/tree/<path> opens a notebook; /lab alone opens the Launcher.
    tests/ui/test_demo_terminal.py opens it in a browser."""
    assert demo.notebook_url(LAB_URL) == "http://127.0.0.1:8888/lab/tree/quickstart.ipynb?token=x"
    assert (
        demo.notebook_url("http://127.0.0.1:8888/user/ada/lab?token=x", "my notes.ipynb")
        == "http://127.0.0.1:8888/user/ada/lab/tree/my%20notes.ipynb?token=x"
    )


def test_the_headless_checks_runs_go_to_an_experiment_of_their_own() -> None:
    """So that the quickstart's experiment, which the runs panel shows beside the
    notebook, holds only the runs the user makes."""
    assert demo.check_experiment("ada") == "/Users/ada/make demo check"
    assert demo.check_experiment("ada") != default_experiment_name("ada", demo.QUICKSTART)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_starts_the_lab_in_the_demo_folder_with_the_demo_settings() -> None:
    recipe = subprocess.run(
        ["make", "--dry-run", "demo", "DEMO_DIR=/tmp/demo-folder", "TOKEN=x"],
        cwd=demo.ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lab = recipe[recipe.index('cd "/tmp/demo-folder"') :]
    assert f'JUPYTER_CONFIG_PATH="{demo.LAB_CONFIG}' in lab
    assert "jupyter lab " in lab
    assert "--ServerApp.root_dir=." in lab


def test_a_demo_terminal_reads_the_login_files_then_puts_the_venvs_air_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shell command the demo's settings give Jupyter, run without a terminal."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    monkeypatch.setenv("SHELL", bash)
    config = PyFileConfigLoader("jupyter_server_config.py", str(demo.LAB_CONFIG)).load_config()
    shell = config.ServerApp.terminado_settings["shell_command"]
    (tmp_path / ".profile").write_text("export AIR_TEST_LOGIN=read\n")
    bare = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "TERM": "dumb"}
    done = subprocess.run(
        [*shell, "-c", 'echo "login: $AIR_TEST_LOGIN"; command -v air; echo "${AIR_DEMO_BIN-}"'],
        env=bare,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    air = Path(sysconfig.get_path("scripts")) / "air"
    assert done.stdout.splitlines() == ["login: read", str(air), ""], done.stderr
