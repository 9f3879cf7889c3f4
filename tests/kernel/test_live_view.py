"""Where widgets are not drawn (nbclient here), a distributed cell still leaves its
links, its final status and the run's chart (a static plotly figure with a text summary)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.kernel.conftest import execute_notebook

CELL = """%%air_distributed -n 2 --run-name live
from jupyter_air import log_metrics
import os, time
for step in range(30):
    log_metrics({"train_loss": 1.0 / (step + 1), "lr": 0.1}, step=step)
    time.sleep(0.2)
print("rank", os.environ["RANK"], "done")
"""


def outputs_of(tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext jupyter_air"), nbformat.v4.new_code_cell(CELL)]
    path = tmp_path / "live.ipynb"
    nbformat.write(nb, path)
    env = {k: v for k, v in env.items() if k != "JPY_SESSION_NAME"}  # as `jupyter execute`
    return execute_notebook(path, env, tmp_path, monkeypatch)


def test_nbclient_gets_links_final_status_and_the_runs_chart_with_a_summary(
    kernel_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = outputs_of(tmp_path, kernel_env, monkeypatch)
    assert not [o for o in outputs if o["output_type"] == "error"]
    displays = [o["data"] for o in outputs if o["output_type"] == "display_data"]
    assert not any("application/vnd.jupyter.widget-view+json" in d for d in displays)

    header = displays[0]
    assert header["text/plain"].startswith("Job ")
    # No Jupyter server here: no link to nowhere, but the command that opens the run.
    assert "href" not in header["text/html"]
    assert "open run: mlflow ui --backend-store-uri" in header["text/plain"]
    assert "#/experiments/" in header["text/plain"]
    assert "logs: air logs " in header["text/plain"]

    status = displays[1]["text/plain"]
    assert status.startswith("succeeded · ")
    assert "attempt 1/1" in status

    chart = displays[2]
    figure = chart["application/vnd.plotly.v1+json"]
    traces = {t["name"]: t for t in figure["data"]}
    assert traces["train_loss"]["x"] == list(range(30))
    assert traces["train_loss"]["y"][-1] == pytest.approx(1 / 30)
    assert "CPU %" in traces, "the host's CPU from the run's system metrics"
    assert "GPU 0 util %" not in traces, "the fake GPU is not the job's (no CUDA devices)"
    summary = chart["text/plain"]
    assert "train_loss: last 0.0333333 (step 29), min 0.0333333 (step 29), 30 steps" in summary
    assert "lr: last 0.1 (step 29)" in summary
    json.dumps(figure)  # saved as is in the notebook

    text = "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")
    assert "[rank 0] rank 0 done" in text
    assert "[rank 1] rank 1 done" in text


def test_without_a_jupyter_server_the_header_gives_the_command_that_opens_the_run(
    tmp_path: Path,
) -> None:
    from jupyter_air.kernel.launch import job_links

    env = {"JUPYTER_RUNTIME_DIR": str(tmp_path)}  # no server's runtime file here
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        patch.delenv("AIR_MLFLOW_UI_URL", raising=False)
        links = job_links("sqlite:////data/my runs/mlflow.db", "3", "abc123", "job1")
    assert links["run"] is None
    assert links["experiment"] is None
    assert links["logs"] is None
    assert links["open run"] == (
        "mlflow ui --backend-store-uri 'sqlite:////data/my runs/mlflow.db', "
        "then open http://127.0.0.1:5000/#/experiments/3/runs/abc123"
    )


def test_the_command_never_shows_the_stores_credentials() -> None:
    from jupyter_air.tracking.ui_links import ui_command

    text = ui_command("postgresql://ada:s3cret@db.internal/mlflow", "1", "r")
    assert "s3cret" not in text
    assert "ada" not in text
    assert text.startswith("mlflow ui --backend-store-uri postgresql://db.internal/mlflow (add")
