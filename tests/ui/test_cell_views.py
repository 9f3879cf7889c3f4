"""The cell views' edges a new user met (issue 28, point 5), in JupyterLab as they see them.

One lab, one notebook: a fresh cell and warm session cells that log no metrics (no chart,
no sentence, no blank where a chart would be), the session's start message (its run a
link that opens the run in MLflow), ``%air_session status`` (pids as words), a session
cell's output under its header, status and chart as a fresh cell's, while it runs and
after, and a fresh cell's host-CPU chart, whose time axis ends at the job's last sample.
The lab's jobs sample system metrics every hour, so that the cells that log nothing have
no sample to chart; the last cell's kernel asks for one a second first. In JupyterLab and
in Notebook 7 (``app``); screenshots of each cell under test-artifacts/, named
``cell-views-*`` (Notebook 7's prefixed with ``notebook7-``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_nvml import FakeGpu, Scenario
from tests.homes import new_home
from tests.ui.conftest import Lab
from tests.ui.notebook_pages import on_a_redrawn, open_notebook, put_notebook, run_calls, run_cell
from tests.waits import until

#: Rank 0 waits until the run holds a few host-CPU samples (the supervisor loads MLflow
#: first: seconds on a loaded machine), so that the chart has a line to end.
SAMPLED = """%%air_distributed -n 1
import os, time
from mlflow import MlflowClient
history, deadline = MlflowClient().get_metric_history, time.monotonic() + 120
while len(history(os.environ["MLFLOW_RUN_ID"], "system/cpu_utilization_percentage")) < 4:
    assert time.monotonic() < deadline, "no host-CPU samples in the run"
    time.sleep(0.5)
print("sampled")
"""
CELLS = [
    "%load_ext jupyter_air",
    '%%air_distributed -n 1\nprint("hello from a fresh cell")',
    "%air_session start -n 2 --oversubscribe --run-name warm",
    '%%air_distributed --session\nprint("hello from the session")',
    '%%air_distributed --session\nimport time\nprint("first line", flush=True)\n'
    'time.sleep(4)\nprint("last line")',
    "%air_session status",
    'import os\nos.environ["AIR_SYSTEM_METRICS_INTERVAL"] = "1"',
    SAMPLED,
]
LOAD, FRESH, START, QUICK, SLOW, STATUS, EVERY_SECOND, CHARTED = range(len(CELLS))
#: Each output of a cell, top to bottom: what it shows, its height and its text.
OUTPUTS = """cell => [...cell.querySelectorAll('.jp-OutputArea-child')].map(c => ({
    header: !!c.querySelector('.jp-air-JobHeader'),
    status: !!c.querySelector('.jp-air-JobStatus'),
    chart: !!c.querySelector('.js-plotly-plot, .jp-air-LiveChart'),
    height: c.getBoundingClientRect().height,
    text: c.innerText.trim(),
}))"""
#: The height of the live chart in a cell; null while the cell has none.
CHART_HEIGHT = "c => c.querySelector('.jp-air-LiveChart')?.getBoundingClientRect().height ?? null"


@pytest.fixture(scope="module", params=["jupyterlab", "notebook"])
def app(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def server(
    start_lab: Callable[..., Lab],
    app: str,
    tmp_path_factory: pytest.TempPathFactory,
    mlflow_template: Path,
) -> Lab:
    air_home = new_home(tmp_path_factory, mlflow_template)
    lab = start_lab(
        Scenario(gpus=[FakeGpu(util=[30, 50])]),
        app=app,
        env={
            "AIR_HOME": str(air_home),
            "MLFLOW_TRACKING_URI": f"sqlite:///{air_home}/mlflow.db",
            "AIR_SYSTEM_METRICS_INTERVAL": "3600",
            "CUDA_VISIBLE_DEVICES": "0",
        },
    )
    put_notebook(lab, "cells.ipynb", CELLS)
    return lab


@pytest.fixture(scope="module")
def page(browser: Any, server: Lab, app: str) -> Iterator[Any]:
    page = open_notebook(browser, server, "cells.ipynb", app)
    page.app = app
    yield page
    page.close()


def cell(page: Any, index: int) -> Any:
    return page.locator(f".jp-Notebook .jp-Cell >> nth={index}")


def ran(page: Any, index: int, timeout: float = 240_000) -> None:
    """Once cell ``index`` has run (its prompt has a number)."""
    page.wait_for_function(
        "n => /\\[\\d+\\]/.test(document.querySelectorAll("
        "'.jp-Notebook .jp-Cell .jp-InputPrompt')[n]?.textContent ?? '')",
        arg=index,
        timeout=timeout,
    )


def shot(page: Any, artifacts: Path, index: int, name: str) -> None:
    prefix = "" if page.app == "jupyterlab" else "notebook7-"
    on_a_redrawn(cell(page, index).scroll_into_view_if_needed)
    on_a_redrawn(
        lambda: cell(page, index).screenshot(path=str(artifacts / f"{prefix}cell-views-{name}.png"))
    )


def layout(page: Any, index: int) -> list[str]:
    """What cell ``index`` shows, top to bottom: "header", "status", "chart", "output";
    an output that shows nothing must take no room (no blank in the cell)."""
    shown: list[str] = []
    for output in cell(page, index).evaluate(OUTPUTS):
        roles = [role for role in ("header", "status", "chart") if output[role]]
        if not roles and output["text"]:
            roles = ["output"]
        assert roles or output["height"] < 1, f"{output['height']:.0f} px of blank in {index}"
        shown += roles
    return shown


def test_cells_that_log_nothing_show_no_chart_and_their_output_under_their_status(
    page: Any, server: Lab, artifacts: Path
) -> None:
    """A fresh cell and a session cell that print and log nothing read alike: header,
    status, the output; no chart, no sentence about it, no blank in its place."""
    run_calls(page, [LOAD, FRESH])
    run_cell(page, START)
    ran(page, START)
    run_cell(page, QUICK)
    ran(page, QUICK)
    for index in (FRESH, QUICK):
        page.wait_for_selector(
            f".jp-Notebook .jp-Cell >> nth={index} >> .jp-air-JobStatus:has-text('succeeded')"
        )
    shot(page, artifacts, FRESH, "fresh-nothing-logged")
    shot(page, artifacts, QUICK, "session-nothing-logged")
    assert layout(page, FRESH) == ["header", "status", "output"]
    assert layout(page, QUICK) == ["header", "status", "output"]
    for index in (FRESH, QUICK):
        assert "no metrics" not in cell(page, index).inner_text()


def test_the_session_start_message_links_to_its_run(
    browser: Any, page: Any, server: Lab, artifacts: Path
) -> None:
    shot(page, artifacts, START, "session-start")
    link = cell(page, START).locator(".jp-air-SessionHeader a", has_text="run warm")
    assert link.count() == 1, cell(page, START).inner_html()
    assert "#/experiments/" in (link.get_attribute("href") or "")
    with page.expect_popup() as opened:
        link.click()
    run = opened.value
    # The server starts the store's MLflow UI at its first request: that takes seconds.
    run.wait_for_selector("text=Model registry", timeout=180_000)
    run.wait_for_selector("text=warm", timeout=60_000)
    run.close()


def test_a_running_session_cell_keeps_its_live_view_above_its_output(
    page: Any, artifacts: Path
) -> None:
    """The widget view (header, status, live chart) takes the place of the header and
    status above the first line, while the cell runs and once it ended."""
    run_cell(page, SLOW)
    view = f".jp-Notebook .jp-Cell >> nth={SLOW} >> .jp-air-LiveChart"
    page.wait_for_selector(view, state="attached", timeout=120_000)
    page.wait_for_selector(
        f".jp-Notebook .jp-Cell >> nth={SLOW} >> .jp-OutputArea-output:has-text('first line')"
    )
    shot(page, artifacts, SLOW, "session-running")
    # Nothing sampled yet (hourly samples): the live chart takes no room until it has a line.
    # Looked up afresh in the cell: the view is drawn again as the cell's outputs come.
    (height,) = until(
        lambda: [h for h in [cell(page, SLOW).evaluate(CHART_HEIGHT)] if h is not None],
        "the live chart in the cell",
    )
    assert height < 1
    running = layout(page, SLOW)
    assert running[-1] == "output", running
    assert running.index("chart") < running.index("output"), running
    ran(page, SLOW)
    page.wait_for_selector(
        f".jp-Notebook .jp-Cell >> nth={SLOW} >> .jp-air-JobStatus:has-text('succeeded')"
    )
    shot(page, artifacts, SLOW, "session-ended")
    # The session samples the system as each cell ends: its chart, if in time, above.
    assert layout(page, SLOW) in (
        ["header", "status", "output"],
        ["header", "status", "chart", "output"],
    )
    assert "last line" in cell(page, SLOW).inner_text()


def test_session_status_says_each_ranks_pid(page: Any, artifacts: Path) -> None:
    run_cell(page, STATUS)
    ran(page, STATUS)
    shot(page, artifacts, STATUS, "session-status")
    text = cell(page, STATUS).locator(".jp-OutputArea").inner_text()
    assert re.search(r"\npids: rank 0: \d+, rank 1: \d+$", text.strip()), text


def test_the_host_cpu_axis_of_an_ended_job_ends_at_its_last_sample(
    page: Any, artifacts: Path
) -> None:
    run_cell(page, EVERY_SECOND)
    ran(page, EVERY_SECOND)
    run_cell(page, CHARTED)
    ran(page, CHARTED)
    figure = f".jp-Notebook .jp-Cell >> nth={CHARTED} >> .js-plotly-plot"
    page.wait_for_selector(figure, timeout=60_000)
    shot(page, artifacts, CHARTED, "host-cpu")
    assert layout(page, CHARTED) == ["header", "status", "chart", "output"]
    # Where the last host-CPU sample is along its axis: 0 at its start, 1 at its end.
    at = page.eval_on_selector(
        figure,
        """plot => {
            const axis = plot._fullLayout.xaxis3;
            const cpu = plot._fullData.find(t => t.name === 'CPU %');
            const [lo, hi] = axis.range.map(axis.r2l);
            return (axis.d2l(cpu.x[cpu.x.length - 1]) - lo) / (hi - lo);
        }""",
    )
    assert 0.95 < at < 1, f"the last sample is at {at:.0%} of the axis"
