"""A sweep as a user sees it in JupyterLab (issue 40, item 5), in headless chromium.

One ``%%air_sweep`` cell runs three quick 1-rank trials, one at a time, of a toy
objective whose best is x = 2; the trial of x = 1 fails after logging its points. While
it runs, the cell's live table shows a running trial; at its end, the sweep completed
with the best marked. Beside the notebook, the runs panel shows the sweep as one row
(its state, its trials, its best objective), its trials under it once opened (their
states, parameters and objectives), and its compare button overlays the trials' curves.
"""

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

pytestmark = [pytest.mark.heavy, pytest.mark.slow]

NOTEBOOK = "sweep.ipynb"
SWEEP_CELL = """%%air_sweep --trials 3 --sampler grid --minimize loss --space 'x: int(0, 2)'
import time
from jupyter_air import log_metrics, params

x = params()["x"]
for step in range(3):
    time.sleep(1)
    log_metrics({"loss": (x - 2) ** 2 + 1 / (step + 1)}, step=step)
if x == 1:
    raise ValueError("x = 1 diverged")
"""
#: The cell's one display of the sweep.
TABLE = ".jp-Notebook .jp-Cell >> nth=1 >> .jp-air-Sweep"
PANEL = ".jp-air-RunsPanel"
TAB = '.jp-SideBar.jp-mod-right .lm-TabBar-tab[data-id="jupyter-air-runs"]'
SWEEP_ROW = f"{PANEL} tr.jp-air-RunsPanel-sweep"
TRIAL_ROWS = f"{PANEL} tr.jp-air-RunsPanel-trial"
CHART = f"{PANEL} .jp-air-RunsPanel-chart.js-plotly-plot"
#: What of the sweep's and its trials' rows the sidebar's right edge cuts.
CUT = """panel => {
    const edge = panel.parentElement.getBoundingClientRect().right;
    return [...panel.querySelectorAll('.jp-air-RunsPanel-sweepSummary, '
        + '.jp-air-RunsPanel-trialLine, .jp-air-RunsPanel-duration')]
        .filter(e => e.getBoundingClientRect().right > edge + 0.5)
        .map(e => e.className + ': ' + e.textContent);
}"""
#: The sweep's display in the cell; whether it says what a pattern (the argument) matches.
SWEEP_DISPLAY = (
    "document.querySelectorAll('.jp-Notebook .jp-Cell')[1]?.querySelector('.jp-air-Sweep')"
)
SWEEP_SAYS = f"pattern => new RegExp(pattern).test(({SWEEP_DISPLAY})?.textContent ?? '')"


def trial_rows(page: Any, selector: str) -> list[list[str]]:
    """The cell's table of trials: its rows' cells, then the row's tooltip (why a trial
    failed)."""
    return [
        [cell.strip() for cell in row]
        for row in page.eval_on_selector_all(
            selector, "rows => rows.map(r => [...[...r.cells].map(c => c.textContent), r.title])"
        )
    ]


@pytest.fixture
def lab(start_lab: Callable[..., Lab], air_home: Path) -> Lab:
    """A lab whose user has an MLflow store already (``air_home``: the sweep's driver and
    its first trial's supervisor would both migrate a new one at once)."""
    lab = start_lab(
        Scenario(gpus=[]),
        env={
            "AIR_HOME": str(air_home),
            "MLFLOW_TRACKING_URI": f"sqlite:///{air_home}/mlflow.db",
            "CUDA_VISIBLE_DEVICES": "",
        },
    )
    put_notebook(lab, NOTEBOOK, ["%load_ext jupyter_air", SWEEP_CELL])
    return lab


@pytest.fixture
def page(browser: Any, lab: Lab) -> Iterator[Any]:
    page = open_notebook(browser, lab, NOTEBOOK, "jupyterlab")
    yield page
    page.close()


def test_a_sweeps_trials_live_in_its_cell_and_under_its_run_in_the_runs_panel(
    lab: Lab, page: Any, artifacts: Path
) -> None:
    run_cells_in_one_kernel(page, lab, NOTEBOOK, [0, 1])

    # While it runs: the live table has a running trial, its parameter shown.
    page.wait_for_function(
        f"() => [...({SWEEP_DISPLAY})?.querySelectorAll('tbody tr') ?? []]"
        ".some(row => row.cells[1].textContent === 'RUNNING')",
        timeout=240_000,
    )
    running = trial_rows(page, f"{TABLE} .jp-air-SweepTrials tbody tr")
    assert any(row[1] == "RUNNING" and row[2] in "012" for row in running), running
    on_a_redrawn(
        lambda: page.locator(TABLE).screenshot(path=str(artifacts / "sweep-cell-running.png"))
    )

    page.wait_for_function(SWEEP_SAYS, arg="COMPLETED: 3 of 3 trials ended", timeout=300_000)
    line = page.locator(f"{TABLE} > div").first.text_content() or ""
    done = {row[2]: row for row in trial_rows(page, f"{TABLE} .jp-air-SweepTrials tbody tr")}
    assert "best loss = 0.3333 (trial" in line, (line, done)
    assert {x: row[1] for x, row in done.items()} == {
        "0": "COMPLETE",
        "1": "FAIL",
        "2": "COMPLETE",
    }, done
    assert done["2"][3] == "0.3333 ★", done
    assert done["0"][3] == "4.333", done
    on_a_redrawn(
        lambda: page.locator(TABLE).screenshot(path=str(artifacts / "sweep-cell-done.png"))
    )

    # The runs panel: the sweep is one row, its trials under it once opened.
    page.click(TAB)
    page.wait_for_selector(SWEEP_ROW, state="visible", timeout=120_000)
    page.wait_for_function(
        "sel => document.querySelector(sel)?.dataset.status === 'COMPLETED'",
        arg=SWEEP_ROW,
        timeout=60_000,
    )
    sweep = page.locator(SWEEP_ROW)
    assert sweep.locator(".jp-air-RunsPanel-runStatus").text_content() == "completed"
    summary = sweep.locator(".jp-air-RunsPanel-sweepSummary").text_content() or ""
    assert re.fullmatch(r"3 of 3 trials · best loss 0\.3333 \(trial \d\) · compare", summary), (
        summary
    )
    status = page.locator(f"{PANEL} .jp-air-RunsPanel-status").text_content() or ""
    assert status.startswith("4 runs · 1 sweep"), status
    assert page.locator(TRIAL_ROWS).count() == 0, "its trials wait under it"
    runs_outside = page.locator(f"{PANEL} tr.jp-air-RunsPanel-run:not(.jp-air-RunsPanel-sweep)")
    assert runs_outside.count() == 0, "no trial's run is listed beside the sweep"
    on_a_redrawn(
        lambda: page.locator(PANEL).screenshot(path=str(artifacts / "sweep-runs-panel.png"))
    )

    sweep.locator(".jp-air-RunsPanel-expand").click()
    page.wait_for_function(
        "sel => document.querySelectorAll(sel).length === 3", arg=TRIAL_ROWS, timeout=10_000
    )
    trials = page.eval_on_selector_all(
        TRIAL_ROWS,
        "rows => rows.map(r => [r.querySelector('.jp-air-RunsPanel-runStatus').textContent,"
        " r.querySelector('.jp-air-RunsPanel-trialLine').textContent])",
    )
    by_x = {re.match(r"x=(\d)", line).group(1): (state, line) for state, line in trials}  # type: ignore[union-attr]
    assert by_x == {
        "0": ("complete", "x=0 · loss 4.333"),
        "1": ("fail", "x=1 · failed"),
        "2": ("complete", "x=2 · loss 0.3333 ★"),
    }, trials
    assert page.locator(f"{TRIAL_ROWS} .jp-air-RunsPanel-label").count() == 3
    # At the sidebar's default width the sweep's and its trials' lines wrap beside
    # their durations, which stay in view, as the other runs' do.
    assert page.eval_on_selector(PANEL, CUT) == [], "cut by the sidebar's edge"
    on_a_redrawn(
        lambda: page.locator(PANEL).screenshot(path=str(artifacts / "sweep-runs-panel-trials.png"))
    )

    # Its compare button overlays the trials' loss curves, the best first.
    sweep.locator(".jp-air-RunsPanel-compareTrials").click()
    page.wait_for_selector(CHART, timeout=60_000)
    page.wait_for_function(
        "sel => (document.querySelector(sel)?.data ?? []).length === 3", arg=CHART
    )
    finals = page.eval_on_selector(CHART, "plot => plot.data.map(t => t.y[t.y.length - 1])")
    assert finals[:2] == pytest.approx([1 / 3, 4 + 1 / 3]), finals
    page.locator(f"{PANEL} .jp-air-RunsPanel-compare").scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "sweep-runs-compare.png"))
