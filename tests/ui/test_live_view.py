"""The quickstart's live view, as a new user sees it in JupyterLab and in Jupyter
Notebook 7.

How it works, for a variant in another frontend: a lab (``start_lab``) runs on two
mostly idle fake GPUs, with system metrics every second and the idle hint's window
at 3 s (environment of the server, so of its kernels and the jobs' supervisors). The
lab serves ``notebooks/quickstart.ipynb`` as it is in the repository; the test runs its
code cells as a user would: the 2-rank training logs three metrics a step for about
15 s, then the ``@distributed`` call. It reads the chart's data in the page (each
``.jp-air-LiveChart-panel``'s uPlot chart) at two moments, saving screenshots under
test-artifacts/, and checks that the traces grew, that each metric and the job's GPUs
are drawn with a legend, that the status shows the idle hint, that once the job ends
the widget view leaves the static outputs (header, final status, the plotly figure) a
saved notebook keeps, with no blank under the chart, and that the page logged no
anywidget error. ``app`` runs it in both frontends (see ``notebook_pages``); Notebook
7's screenshots are prefixed with ``notebook7-``.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_nvml import FakeGpu, Scenario
from tests.homes import new_home
from tests.ui.conftest import Lab
from tests.ui.notebook_pages import on_a_redrawn, open_notebook, run_cell, run_cells_in_one_kernel
from tests.waits import until

QUICKSTART = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"
VIEW = ".jp-air-LiveChart"
PLOT = f"{VIEW} .jp-air-LiveChart-plot"
#: The quickstart's cells: load_ext, the data, the training, the ``@distributed`` call.
LOAD, DATA, TRAIN, CALL = 1, 3, 5, 7
#: The chart's traces, as its panels' uPlot charts hold them: name -> points drawn.
TRACES = """plot => Object.fromEntries([...plot.querySelectorAll('.jp-air-LiveChart-panel')]
    .flatMap(p => p.uplot.series.slice(1).map((s, i) =>
        [s.label, p.uplot.data[i + 1].filter(v => v != null).length])))"""
METRICS = {"train_loss", "train_accuracy", "lr"}


@pytest.fixture(scope="module", params=["jupyterlab", "notebook"])
def app(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def put_file(lab: Lab, name: str, path: Path) -> None:
    """Save a notebook file as it is on the server (the contents API)."""
    content = json.loads(path.read_text())
    body = json.dumps({"type": "notebook", "format": "json", "content": content}).encode()
    request = urllib.request.Request(
        f"{lab.url}api/contents/{name}",
        data=body,
        method="PUT",
        headers={"Authorization": f"token {lab.token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30):
        pass


@pytest.fixture(scope="module")
def server(
    start_lab: Callable[..., Lab],
    app: str,
    tmp_path_factory: pytest.TempPathFactory,
    mlflow_template: Path,
) -> Lab:
    air_home = new_home(tmp_path_factory, mlflow_template)
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
    put_file(lab, "quickstart.ipynb", QUICKSTART)
    return lab


@pytest.fixture(scope="module")
def page(browser: Any, server: Lab, app: str) -> Iterator[Any]:
    page = open_notebook(browser, server, "quickstart.ipynb", app)
    page.on("pageerror", lambda err: page.console_lines.append(f"pageerror: {err}"))
    run_cells_in_one_kernel(page, server, "quickstart.ipynb", [LOAD, DATA, TRAIN])
    yield page
    page.close()


def screenshot(page: Any, artifacts: Path, app: str, name: str) -> None:
    """Under test-artifacts/, Notebook 7's prefixed with ``notebook7-``."""
    prefix = "" if app == "jupyterlab" else "notebook7-"
    page.screenshot(path=str(artifacts / f"{prefix}{name}"))


def output_of(page: Any, cell: int) -> Any:
    return page.locator(f".jp-Notebook .jp-Cell >> nth={cell} >> .jp-Cell-outputWrapper")


def points(page: Any) -> dict[str, int]:
    return dict(page.eval_on_selector(PLOT, TRACES))


def test_the_chart_grows_while_the_job_runs_a_panel_per_metric_with_a_legend(
    page: Any, artifacts: Path, app: str
) -> None:
    page.wait_for_selector(PLOT, timeout=120_000)
    until(
        lambda: points(page).get("train_loss", 0) >= 2,
        "train_loss points",
        90,
        step=0.5,
        seen=lambda: points(page),
    )
    first = points(page)
    screenshot(page, artifacts, app, "live-view-1.png")
    until(
        lambda: points(page)["train_loss"] >= first["train_loss"] + 20,
        "the chart grown",
        90,
        step=0.5,
        seen=lambda: points(page),
    )
    until(
        lambda: "GPU 1 util %" in points(page),
        "GPU traces",
        90,
        step=0.5,
        seen=lambda: points(page),
    )
    second = points(page)
    screenshot(page, artifacts, app, "live-view-2.png")
    if app == "jupyterlab":
        on_a_redrawn(
            lambda: output_of(page, TRAIN).screenshot(path=str(artifacts / "live-view-cell.png"))
        )
    assert second["train_loss"] > first["train_loss"]
    assert METRICS | {"GPU 0 util %", "GPU 1 util %", "GPU 0 memory %", "CPU %"} <= set(second)
    legend = page.eval_on_selector_all(
        f"{VIEW} .jp-air-LiveChart-legendItem", "nodes => nodes.map(n => n.textContent)"
    )
    assert METRICS | {"GPU 0 util %", "CPU %"} <= set(legend)
    titles = page.eval_on_selector_all(
        f"{VIEW} .jp-air-LiveChart-title", "nodes => nodes.map(n => n.textContent)"
    )
    assert {"train_loss", "train_accuracy", "lr", "GPU utilization %"} <= set(titles)
    links = page.eval_on_selector_all(
        ".jp-air-JobHeader a",
        "nodes => nodes.map(a => getComputedStyle(a).textDecorationLine)",
    )
    assert links, "the header links to the run and its logs"
    assert set(links) == {"underline"}, "links look like links while the job runs"
    page.wait_for_selector(".jp-air-JobHint", timeout=60_000)
    hint = page.inner_text(".jp-air-JobHint")
    assert "GPUs 0, 1 averaged" in hint
    assert "likely input-bound" in hint
    # The legend hides a metric's traces on the page, without the (busy) kernel.
    page.click(f'{VIEW} .jp-air-LiveChart-legendItem[data-group="train_loss"]')
    shown = """plot => [...plot.querySelectorAll('.jp-air-LiveChart-panel')]
        .flatMap(p => p.uplot.series).find(s => s.label === 'train_loss').show"""
    assert page.eval_on_selector(PLOT, shown) is False


def test_the_ended_job_leaves_a_legended_chart_with_no_blank_under_it(
    page: Any, artifacts: Path, app: str
) -> None:
    status = ".jp-air-JobStatus"
    page.wait_for_selector(f"{status}:has-text('succeeded')", timeout=180_000)
    # The status says it first; the kernel's last message then replaces the widget view.
    page.wait_for_selector(VIEW, state="detached", timeout=30_000)
    # plotly's own renderer draws the saved figure, no kernel needed.
    figure = ".js-plotly-plot"
    page.wait_for_selector(figure, state="attached", timeout=30_000)
    names = page.eval_on_selector(figure, "plot => plot.data.map(t => t.name)")
    assert METRICS | {"GPU 0 util %"} <= set(names)
    assert page.eval_on_selector(figure, "plot => plot._fullLayout.showlegend") is True
    assert "Job " in page.inner_text(".jp-air-JobHeader")
    # From the lowest thing drawn in the chart (its legend) to the next output: no blank.
    gap = page.eval_on_selector(
        figure,
        """plot => {
            const area = plot.closest('.jp-OutputArea-child');
            const drawn = Math.max(...[...plot.querySelectorAll('.legend, .xtick')]
                .map(e => e.getBoundingClientRect().bottom));
            const next = area.nextElementSibling;
            return next.getBoundingClientRect().top - drawn;
        }""",
    )
    assert gap < 60, f"{gap:.0f} px of blank under the chart"
    output_of(page, TRAIN).scroll_into_view_if_needed()
    screenshot(page, artifacts, app, "live-view-final.png")


def test_a_distributed_call_logs_no_widget_error_in_the_page(page: Any, app: str) -> None:
    run_cell(page, CALL)
    page.wait_for_selector(".jp-OutputArea-output:has-text('rank 0 of 2')", timeout=120_000)
    page.wait_for_timeout(3000)  # anywidget reports a model not ready after 2 s
    # Not JupyterLab's own note that a plugin was slow to start on a loaded machine.
    errors = [
        line
        for line in page.console_lines
        if "anywidget" in line.lower() and not line.endswith("ms to activate.")
    ]
    assert errors == []
    assert not [line for line in page.console_lines if line.startswith("pageerror")]
