"""The MLflow pages a cell links to, as a user opens them from JupyterLab: the run and
the experiment open in MLflow's model-training view (not GenAI's traces overview or
its "Evaluations" framing), and the run's description links to the job's logs view.

A lab serves the MLflow UI of its kernels' local store; one ``%%air_distributed -n 1``
cell logs a few steps. The links are the cell's own (read from its header), opened in
the lab's browser context as a click would; screenshots under test-artifacts/.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from tests.fake_nvml import FakeGpu, Scenario
from tests.ui.conftest import ARTIFACTS, Lab
from tests.ui.notebook_pages import open_notebook, put_notebook, run_cells_in_one_kernel

CELL = """%%air_distributed -n 1 --run-name mlflow-view
from jupyter_air import log_metrics
for step in range(5):
    log_metrics({"train_loss": 1.0 / (step + 1)}, step=step)
print("trained")
"""
#: What only MLflow's GenAI view shows, in its sidebar and pages.
GENAI = ("Evaluations", "Prompts & versions", "Detect Issues", "Token Usage", "Sessions")
MLFLOW_LOADED = "text=Model registry"


@pytest.fixture(scope="module")
def server(start_lab: Callable[..., Lab], air_home: Path) -> Lab:
    lab = start_lab(
        Scenario(gpus=[FakeGpu(util=[30, 40])]),
        env={
            "AIR_HOME": str(air_home),
            "MLFLOW_TRACKING_URI": f"sqlite:///{air_home}/mlflow.db",
            "CUDA_VISIBLE_DEVICES": "0",
        },
    )
    put_notebook(lab, "view.ipynb", ["%load_ext jupyter_air", CELL])
    return lab


@pytest.fixture(scope="module")
def page(browser: Any, server: Lab, artifacts: Path) -> Iterator[Any]:
    page = open_notebook(browser, server, "view.ipynb", "jupyterlab")
    run_cells_in_one_kernel(page, server, "view.ipynb", [0, 1])
    try:
        page.wait_for_selector(".jp-air-JobStatus:has-text('succeeded')", timeout=180_000)
    except Exception:
        page.screenshot(path=str(artifacts / "failed-mlflow-view-cell.png"))
        raise
    yield page
    page.close()


def cell_link(page: Any, pattern: str) -> str:
    """The href of the cell header's link whose href matches ``pattern``."""
    hrefs = page.eval_on_selector_all(".jp-Cell a[href]", "as => as.map(a => a.href)")
    found = [h for h in hrefs if re.search(pattern, h)]
    assert found, hrefs
    return str(found[0])


def open_mlflow(browser: Any, server: Lab, url: str) -> Any:
    """``url`` in a new tab logged in to the lab (its token, before the UI's route), loaded."""
    tab = browser.new_page(viewport={"width": 1400, "height": 900})
    # The server starts the store's MLflow UI at its first request: that takes seconds.
    tab.goto(url.replace("#", f"?token={server.token}#", 1), timeout=120_000)
    try:
        tab.wait_for_selector(MLFLOW_LOADED, timeout=120_000)
    except Exception:
        tab.screenshot(path=str(ARTIFACTS / "failed-mlflow-view-tab.png"))
        raise
    return tab


def body(tab: Any) -> str:
    return str(tab.inner_text("body"))


def test_the_run_link_opens_the_model_training_view(
    browser: Any, server: Lab, page: Any, artifacts: Path
) -> None:
    run = open_mlflow(browser, server, cell_link(page, r"#/experiments/\d+/runs/\w+"))
    run.wait_for_selector("text=mlflow-view")
    run.wait_for_selector("text=Model metrics")
    run.screenshot(path=str(artifacts / "mlflow-run.png"))
    text = body(run)
    for word in GENAI:
        assert word not in text, f"the run page shows GenAI's {word!r}"
    run.close()


def test_the_experiment_link_opens_its_runs_not_a_traces_overview(
    browser: Any, server: Lab, page: Any, artifacts: Path
) -> None:
    experiment = open_mlflow(browser, server, cell_link(page, r"#/experiments/\d+\?"))
    experiment.wait_for_selector("text=mlflow-view")  # the run, in the runs table
    experiment.screenshot(path=str(artifacts / "mlflow-experiment.png"))
    assert "/runs" in experiment.url
    text = body(experiment)
    for word in GENAI:
        assert word not in text, f"the experiment page shows GenAI's {word!r}"
    experiment.close()


def test_the_experiment_is_of_the_model_training_kind(page: Any, air_home: Path) -> None:
    client = MlflowClient(f"sqlite:///{air_home}/mlflow.db")
    (experiment,) = [e for e in client.search_experiments() if e.name != "Default"]
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"


def test_the_runs_description_links_to_the_jobs_logs_view(
    browser: Any, server: Lab, page: Any, air_home: Path, artifacts: Path
) -> None:
    client = MlflowClient(f"sqlite:///{air_home}/mlflow.db")
    (run_info,) = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        "attributes.run_name = 'mlflow-view'",
    )
    job = run_info.data.tags["air.job_id"]
    note = run_info.data.tags["mlflow.note.content"]
    assert note == (
        f"**Logs of job {job}:** [open them in JupyterLab](/lab?air-job={job}) "
        f"or run `air logs {job}`"
    )
    run = open_mlflow(browser, server, cell_link(page, r"#/experiments/\d+/runs/\w+"))
    link = run.wait_for_selector("a:has-text('open them in JupyterLab')")
    assert f"air logs {job}" in body(run)
    link.scroll_into_view_if_needed()
    run.screenshot(path=str(artifacts / "mlflow-run-logs-link.png"))
    href = link.get_attribute("href")
    assert href == f"/lab?air-job={job}"
    logs = browser.new_page(viewport={"width": 1400, "height": 900})
    logs.goto(f"{server.url.rstrip('/')}{href}&token={server.token}")
    logs.wait_for_selector(
        f'.jp-air-JobLogs[data-job-id="{job}"] .jp-air-JobLogs-line', timeout=60_000
    )
    logs.screenshot(path=str(artifacts / "mlflow-logs-link-opened.png"))
    logs.close()
    run.close()
