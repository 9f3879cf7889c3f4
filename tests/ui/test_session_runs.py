"""A real warm session in the "Experiment runs" panel, in headless chromium against a real lab.

The notebook starts a two-rank session with ``%air_session start`` and runs two
``--session`` cells, each logging a param and a loss curve into its own run. The panel
beside the notebook lists the session's run, labelled as a session, with its two cells'
runs nested under it (and not the run made ahead for its next cell); comparing the two
cells' runs overlays both curves and shows the param that differs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.jobs.sessions.activity import Activity, activity_of
from jupyter_air.jobs.store import JobStore
from tests.fake_nvml import Scenario
from tests.ui.conftest import Lab
from tests.ui.notebook_pages import open_notebook, put_notebook, run_cells_in_one_kernel
from tests.ui.test_runs_panel import CHART, PANEL, ROWS, TAB


def session_cell(lr: str) -> str:
    """Rank 0 logs (only it imports MLflow: the other rank has nothing to load)."""
    return f"""%%air_distributed --session
import os
if os.environ["RANK"] == "0":
    from mlflow import MlflowClient
    from jupyter_air import log_metrics
    MlflowClient().log_param(os.environ["MLFLOW_RUN_ID"], "lr", "{lr}")
    for step in range(3):
        log_metrics({{"loss": {lr} / (step + 1)}}, step=step)
"""


CELLS = [
    "%load_ext jupyter_air",
    "%air_session start -n 2 --oversubscribe --run-name warm --idle-timeout 30",
    session_cell("0.1"),
    session_cell("0.3"),
]


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
    put_notebook(lab, "warm.ipynb", CELLS)
    return lab


@pytest.fixture(scope="module")
def page(browser: Any, server: Lab) -> Iterator[Any]:
    """warm.ipynb once its two session cells ran, its runs panel open (the session ends
    with its kernel, when the lab stops)."""
    page = open_notebook(browser, server, "warm.ipynb", "jupyterlab")
    page.click(TAB)  # first: the server loads MLflow while the session starts
    page.wait_for_selector(PANEL, state="visible")
    run_cells_in_one_kernel(page, server, "warm.ipynb", list(range(len(CELLS))))
    page.wait_for_function(
        "n => /\\[\\d+\\]/.test(document.querySelectorAll("
        "'.jp-Notebook .jp-Cell .jp-InputPrompt')[n]?.textContent ?? '')",
        arg=len(CELLS) - 1,
        timeout=120_000,
    )
    yield page
    page.close()


def rows(page: Any) -> list[dict[str, Any]]:
    return list(
        page.eval_on_selector_all(
            ROWS,
            "rows => rows.map(r => ({"
            " name: r.querySelector('.jp-air-RunsPanel-name a').textContent,"
            " kind: r.dataset.kind ?? null,"
            " status: r.dataset.status,"
            " indent: parseInt(r.querySelector('.jp-air-RunsPanel-name').style.paddingLeft),"
            " badge: r.querySelector('.jp-air-RunsPanel-kind')?.textContent ?? null,"
            " job: r.querySelector('.jp-air-RunsPanel-logs')?.textContent ?? null}))",
        )
    )


def test_the_session_run_is_labelled_with_its_two_cells_nested_under_it(
    page: Any, air_home: Path, artifacts: Path
) -> None:
    page.wait_for_function(
        "() => document.querySelectorAll("
        '\'.jp-air-RunsPanel-run[data-kind="session_cell"][data-status="FINISHED"]\')'
        ".length === 2",
        timeout=60_000,
    )
    # Nothing else: not the run the session made ahead for its next cell.
    session, *cells = rows(page)
    assert (session["name"], session["kind"], session["badge"]) == ("warm", "session", "session")
    assert session["status"] == "RUNNING"  # the session lives on between cells
    assert [cell["name"] for cell in cells] == ["cell 2", "cell 1"]  # newest first
    assert all(cell["kind"] == "session_cell" for cell in cells)
    assert all(cell["indent"] > session["indent"] for cell in cells)  # its children
    assert {cell["job"] for cell in cells} == {session["job"]}  # the session's job
    page.screenshot(path=str(artifacts / "session-runs-panel.png"))

    # The same session as the GPU panel reads it: idle since its cell 2, and its timeout.
    store = JobStore(air_home)
    activity = activity_of(store, store.get(session["job"]))
    assert activity is not None
    assert (activity.activity, activity.cell, activity.idle_timeout_s) == (
        Activity.IDLE,
        2,
        1800.0,
    )


def test_comparing_the_two_cells_overlays_both_curves_and_shows_the_lr_that_differs(
    page: Any, artifacts: Path
) -> None:
    for name in ("cell 1", "cell 2"):
        row = page.locator(f'{ROWS}[data-kind="session_cell"]').filter(has_text=name)
        row.locator(".jp-air-RunsPanel-pick").check()
    page.wait_for_function(
        "sel => (document.querySelector(sel)?.data ?? []).length === 2", arg=CHART, timeout=30_000
    )
    curves = page.eval_on_selector(
        CHART, "plot => Object.fromEntries(plot.data.map(t => [t.name, t.y]))"
    )
    assert curves == {
        "cell 1": pytest.approx([0.1, 0.05, 0.1 / 3]),
        "cell 2": pytest.approx([0.3, 0.15, 0.1]),
    }
    params = page.inner_text(f"{PANEL} .jp-air-RunsPanel-paramsTable")
    assert params.split() == [
        "Param",
        "that",
        "differs",
        "cell",
        "1",
        "cell",
        "2",
        "lr",
        "0.1",
        "0.3",
    ]
    page.locator(f"{PANEL} .jp-air-RunsPanel-compare").scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "session-runs-compare.png"))
