"""The GPU resources panel and the job logs view in Jupyter Notebook 7 (the `notebook`
package), in headless chromium: on a notebook page the panel opens in Notebook 7's
right sidebar, and the logs view under the notebook (its main area holds one document)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.jobs import cancel
from jupyter_air.jobs.store import JobStore
from jupyter_air.jobs.submit import start_job
from tests.factories import job_spec
from tests.ui.conftest import Lab
from tests.ui.notebook_pages import choose_from_menu, open_notebook, put_notebook
from tests.ui.test_gpu_panel import card, two_gpus, value
from tests.ui.test_job_logs import new_experiment

PANEL = "#jp-right-stack .jp-air-GpuPanel"
LOGS = "#jp-down-stack .jp-air-JobLogs"
ROWS = f"{LOGS} .jp-air-JobLogs-line .jp-air-JobLogs-text"


@pytest.fixture(scope="module")
def notebook7(start_lab: Callable[..., Lab], air_home: Path) -> Lab:
    """Notebook 7 (not JupyterLab) on two fake GPUs, with a notebook to open."""
    nb = start_lab(two_gpus(), env={"AIR_HOME": str(air_home)}, app="notebook")
    put_notebook(nb, "train.ipynb", ["print('hello')"])
    return nb


@pytest.fixture(scope="module")
def page(browser: Any, notebook7: Lab) -> Iterator[Any]:
    page = open_notebook(browser, notebook7, "train.ipynb", "notebook")
    yield page
    page.close()


@pytest.fixture(scope="module")
def finished_job(air_home: Path, notebook7: Lab) -> str:
    """A two-rank job that printed known lines and ended."""
    store = JobStore(air_home)
    uri, experiment_id = new_experiment(air_home)
    script = "import os; print(f\"hello from rank {os.environ['RANK']} in notebook 7\")"
    workload = job_spec(
        kind="command",
        command=[sys.executable, "-c", script],
        nproc_per_node=2,
        background=True,
        tracking_uri=uri,
        experiment_id=experiment_id,
        run_name="nb7",
    )
    job = start_job(store, workload, None)
    cancel.wait(store, job.id, 120)
    assert store.get(job.id).status == "SUCCEEDED", store.get(job.id)
    return job.id


def test_the_page_is_notebook_7_not_jupyterlab(page: Any) -> None:
    assert page.evaluate("document.body.dataset.notebook") == "notebooks"
    assert page.query_selector("#jp-main-dock-panel") is None  # JupyterLab's main area


def test_view_menu_opens_the_gpu_panel_in_the_right_sidebar_with_the_drivers_gpus(
    page: Any, artifacts: Path
) -> None:
    choose_from_menu(page, "View", "Right Sidebar", "Show GPU resources")
    page.locator(f"{PANEL} {card(1)}").wait_for(timeout=60_000)  # the panel drawn
    names = page.eval_on_selector_all(
        f"{PANEL} .jp-air-GpuCard-name", "nodes => nodes.map(n => n.textContent)"
    )
    assert len(names) == 2
    assert all("NVIDIA H100 80GB HBM3" in name for name in names)
    assert page.text_content(f"{PANEL} {value(0, 'util')}") == "35 %"
    assert page.text_content(f"{PANEL} {value(0, 'mem')}") == "20.0 / 80.0 GiB"
    assert page.text_content(f"{PANEL} {value(1, 'temp')}") == "n/a"
    page.screenshot(path=str(artifacts / "notebook7-gpu-panel.png"))


def test_the_cells_logs_link_opens_the_logs_view_under_the_notebook(
    page: Any, notebook7: Lab, finished_job: str, artifacts: Path
) -> None:
    """The link a distributed cell shows (``lab?air-job=<id>``) opens the view on the
    notebook's own page rather than leaving it for JupyterLab."""
    url = page.url
    page.evaluate(
        """href => {
            const a = document.createElement('a');
            a.href = href; a.textContent = 'logs'; a.id = 'air-logs-link'; a.target = '_blank';
            document.querySelector('.jp-Cell .jp-InputArea').prepend(a);
        }""",
        f"/lab?air-job={finished_job}",
    )
    page.click("#air-logs-link")
    page.wait_for_function(
        """s => [...document.querySelectorAll(s)].filter(
                 n => n.textContent.includes('in notebook 7')).length === 2""",
        arg=ROWS,
        timeout=30_000,
    )
    texts = page.eval_on_selector_all(ROWS, "nodes => nodes.map(n => n.textContent)")
    assert "hello from rank 0 in notebook 7" in texts
    assert "hello from rank 1 in notebook 7" in texts
    assert page.url == url  # still the notebook's page
    assert page.is_visible(".jp-Notebook")
    page.screenshot(path=str(artifacts / "notebook7-job-logs.png"))
