"""A running job's progress as a user sees it (issue 38, item 3), in headless chromium
against a real lab: one distributed call marks its steps (``jupyter_air.step``) against
a planned length, and its cell's status line says ``step N / 6,000 (P %), ETA hh:mm
(M min)``, the runs panel shows a bar and ``P % · ETA hh:mm`` under the running run's
name, and its job's logs view has the same line in its header. Once it ends, its status
line keeps its last step, without an ETA."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_nvml import Scenario
from tests.ui.conftest import Lab
from tests.ui.notebook_pages import (
    on_a_redrawn,
    open_notebook,
    put_notebook,
    run_cells_in_one_kernel,
)

STATUS = ".jp-air-JobStatus"
PANEL = ".jp-air-RunsPanel"
TAB = '.jp-SideBar.jp-mod-right .lm-TabBar-tab[data-id="jupyter-air-runs"]'
RUNNING = f"{PANEL} .jp-air-RunsPanel-run[data-status='RUNNING']"
LOGS_HEADER = ".jp-air-JobLogs .jp-air-JobLogs-progress"

#: 6,000 steps planned, 20 a second (5 min: it runs while the test looks), until the test
#: leaves a stop file beside its store.
CALL = """%%air_distributed -n 1 --run-name progress
import os, time
from jupyter_air import step
from jupyter_air.perf import marks

marks.current().plan(marks.Source.STEP, 6000)
stop = os.path.join(os.environ["AIR_HOME"], "stop")
for _ in range(6000):
    if os.path.exists(stop):
        break
    time.sleep(0.05)
    step(samples=8)
"""

#: The status line's progress while the job runs.
RUNNING_LINE = re.compile(r"step [\d,]+ / 6,000 \(\d+ %\), ETA \d\d:\d\d \(\d+ (s|min)\)")


@pytest.fixture(scope="module")
def server(start_lab: Callable[..., Lab], air_home: Path) -> Lab:
    lab = start_lab(
        Scenario(gpus=[]),
        env={
            "AIR_HOME": str(air_home),
            "MLFLOW_TRACKING_URI": f"sqlite:///{air_home}/mlflow.db",
            "CUDA_VISIBLE_DEVICES": "",
        },
    )
    put_notebook(lab, "progress.ipynb", ["%load_ext jupyter_air", CALL])
    return lab


@pytest.fixture(scope="module")
def page(browser: Any, server: Lab, air_home: Path) -> Iterator[Any]:
    page = open_notebook(browser, server, "progress.ipynb", "jupyterlab")
    yield page
    (air_home / "stop").touch()  # the job ends, whatever the test came to
    page.close()


def status_text(page: Any) -> str:
    return str(page.inner_text(f".jp-Notebook .jp-Cell >> nth=1 >> {STATUS}"))


def test_the_cell_the_runs_panel_and_the_logs_view_show_the_progress_and_eta(
    page: Any, server: Lab, air_home: Path, artifacts: Path
) -> None:
    run_cells_in_one_kernel(page, server, "progress.ipynb", [0, 1])
    page.wait_for_function(
        "pattern => [...document.querySelectorAll('.jp-air-JobStatus')]"
        ".some(s => new RegExp(pattern).test(s.textContent))",
        arg=RUNNING_LINE.pattern,
        timeout=180_000,
    )
    assert RUNNING_LINE.search(status_text(page)), status_text(page)
    on_a_redrawn(page.locator(STATUS).first.scroll_into_view_if_needed)
    page.screenshot(path=str(artifacts / "progress-cell.png"))

    page.click(TAB)
    shown = page.wait_for_selector(
        f"{RUNNING} .jp-air-RunsPanel-name .jp-air-RunsPanel-progress", timeout=60_000
    )
    assert re.fullmatch(r"\d+ % · ETA \d\d:\d\d", shown.inner_text()), shown.inner_text()
    bar = page.eval_on_selector(f"{RUNNING} .jp-air-RunsPanel-progressBar", "b => b.value")
    assert 0 < bar < 1
    title = shown.get_attribute("title")
    assert re.match(r"step [\d,]+ / 6,000 \(\d+ %\)", title), title
    assert "samples/s" in title
    assert "MFU: none: " in title  # no GPU: no MFU, and why
    page.screenshot(path=str(artifacts / "progress-runs-panel.png"))

    page.click(f"{RUNNING} .jp-air-RunsPanel-logs")
    header = page.wait_for_selector(LOGS_HEADER, timeout=60_000)
    assert re.match(r"step [\d,]+ / 6,000 \(\d+ %\), ETA ", header.inner_text())
    page.screenshot(path=str(artifacts / "progress-logs-header.png"))

    (air_home / "stop").touch()
    page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-air-JobStatus')]"
        ".some(s => s.textContent.startsWith('succeeded'))",
        timeout=120_000,
    )
    ended = status_text(page)
    assert re.search(r" · step [\d,]+ / 6,000 \(\d+ %\)$", ended), ended
