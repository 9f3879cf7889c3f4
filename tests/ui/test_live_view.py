"""The live view of a ``%%air_distributed`` cell, as a user sees it in JupyterLab and in
Jupyter Notebook 7.

How it works, for a variant in another frontend: a lab (``start_lab``) runs on two
mostly idle fake GPUs, with system metrics every second and the idle hint's window
at 3 s (environment of the server, so of its kernels and the jobs' supervisors). The
notebook's second cell runs 2 ranks (one per fake GPU) that log ``train_loss`` every
0.5 s for about 20 s. The test reads the chart's plotly.js data in the page
(``.jp-air-LiveChart-plot``'s ``data``) at two moments, saving screenshots under
test-artifacts/, and checks that the traces grew, that the job's GPUs are drawn, that
the status shows the idle hint, and that once the job ends the widget view leaves the
static outputs (header, final status, the plotly figure) that a saved notebook keeps.
``app`` runs it in both frontends (see ``notebook_pages``); Notebook 7's screenshots
are prefixed with ``notebook7-``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_nvml import FakeGpu, Scenario
from tests.ui.conftest import Lab
from tests.ui.notebook_pages import open_notebook, put_notebook, run_cell

VIEW = ".jp-air-LiveChart"
PLOT = f"{VIEW} .jp-air-LiveChart-plot"
CELL = """%%air_distributed -n 2 --run-name live-ui
import time
from jupyter_air import log_metrics
for step in range(40):
    log_metrics({"train_loss": 1.0 / (step + 1)}, step=step)
    time.sleep(0.5)
print("done")
"""
#: The plot's traces, as plotly.js holds them: name -> number of points.
TRACES = "plot => Object.fromEntries(plot.data.map(t => [t.name, t.x.length]))"


@pytest.fixture(scope="module", params=["jupyterlab", "notebook"])
def app(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def server(
    start_lab: Callable[..., Lab], app: str, tmp_path_factory: pytest.TempPathFactory
) -> Lab:
    air_home = tmp_path_factory.mktemp("air")
    idle = Scenario(gpus=[FakeGpu(util=[5, 10, 5]), FakeGpu(util=[8, 4, 6])])
    lab = start_lab(
        idle,
        app=app,
        env={
            "AIR_HOME": str(air_home),
            "MLFLOW_TRACKING_URI": f"sqlite:///{air_home}/mlflow.db",
            "AIR_SYSTEM_METRICS_INTERVAL": "1",
            "AIR_HINT_IDLE_WINDOW": "3",
            "CUDA_VISIBLE_DEVICES": "0,1",
        },
    )
    put_notebook(lab, "live.ipynb", ["%load_ext jupyter_air", CELL])
    return lab


@pytest.fixture(scope="module")
def page(browser: Any, server: Lab, app: str) -> Iterator[Any]:
    page = open_notebook(browser, server, "live.ipynb", app)
    run_cell(page, 0)
    run_cell(page, 1)
    yield page
    page.close()


def screenshot(page: Any, artifacts: Path, app: str, name: str) -> None:
    """Under test-artifacts/, Notebook 7's prefixed with ``notebook7-``."""
    prefix = "" if app == "jupyterlab" else "notebook7-"
    page.screenshot(path=str(artifacts / f"{prefix}{name}"))


def points(page: Any) -> dict[str, int]:
    return dict(page.eval_on_selector(PLOT, TRACES))


def wait_for(page: Any, check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: {points(page)}"
        page.wait_for_timeout(500)


def test_the_chart_grows_while_the_job_runs_with_the_jobs_gpus_and_the_idle_hint(
    page: Any, artifacts: Path, app: str
) -> None:
    page.wait_for_selector(PLOT, timeout=120_000)
    wait_for(page, lambda: points(page).get("train_loss", 0) >= 2, "no train_loss points")
    first = points(page)
    screenshot(page, artifacts, app, "live-view-1.png")
    wait_for(
        page,
        lambda: points(page)["train_loss"] >= first["train_loss"] + 6,
        "the chart did not grow",
    )
    wait_for(page, lambda: "GPU 1 util %" in points(page), "no GPU traces")
    second = points(page)
    screenshot(page, artifacts, app, "live-view-2.png")
    assert second["train_loss"] > first["train_loss"]
    assert {"GPU 0 util %", "GPU 1 util %", "GPU 0 memory %", "CPU %"} <= set(second)
    page.wait_for_selector(".jp-air-JobHint", timeout=60_000)
    hint = page.inner_text(".jp-air-JobHint")
    assert "GPUs 0, 1 averaged" in hint
    assert "likely input-bound" in hint
    # The picker hides a metric's traces on the page, without the (busy) kernel.
    page.uncheck(f'{VIEW} input[value="train_loss"]')
    visible = page.eval_on_selector(
        PLOT, "plot => plot.data.find(t => t.name === 'train_loss').visible"
    )
    assert visible == "legendonly"
    page.check(f'{VIEW} input[value="train_loss"]')


def test_the_ended_job_leaves_static_outputs_a_saved_notebook_shows(
    page: Any, artifacts: Path, app: str
) -> None:
    status = ".jp-air-JobStatus"
    page.wait_for_selector(f"{status}:has-text('succeeded')", timeout=120_000)
    assert page.query_selector(VIEW) is None, "the widget view was replaced"
    # plotly's own JupyterLab renderer draws the saved figure, no kernel needed.
    figure = ".jp-RenderedPlotly.js-plotly-plot"  # the renderer is the plot
    page.wait_for_selector(figure, state="attached", timeout=30_000)
    names = page.eval_on_selector(figure, "plot => plot.data.map(t => t.name)")
    assert "train_loss" in names
    assert "GPU 0 util %" in names
    assert "Job " in page.inner_text(".jp-air-JobHeader")
    screenshot(page, artifacts, app, "live-view-final.png")
