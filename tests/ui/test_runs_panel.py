"""The "Experiment runs" panel as a user sees it, in headless chromium against a real lab.

One notebook makes three distributed calls (real jobs, each a rank logging a param and a
loss curve to its MLflow run); the last one fails. The panel beside the notebook lists
the three runs with their statuses, each with its job and its cell; comparing the two
that finished overlays both loss curves and shows the param that differs. A second
notebook runs the same cell twice under one run name, as a sweep does: their comparison
keeps the two runs apart in the legend and opens on the user's metric, not MLflow's
system metrics (which every run also has).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.fake_nvml import Scenario
from tests.mlflow_store import fresh_store
from tests.ui.conftest import Lab
from tests.ui.notebook_pages import on_a_redrawn, open_notebook, put_notebook, run_calls
from tests.waits import until

PANEL = ".jp-air-RunsPanel"
ROWS = f"{PANEL} .jp-air-RunsPanel-run"
TAB = '.jp-SideBar.jp-mod-right .lm-TabBar-tab[data-id="jupyter-air-runs"]'
CHART = f"{PANEL} .jp-air-RunsPanel-chart.js-plotly-plot"


def call(name: str, lr: str, fail: bool = False) -> str:
    ending = 'raise RuntimeError("diverged")' if fail else 'print("done")'
    return f"""%%air_distributed -n 1 --run-name {name}
import os
from mlflow import MlflowClient
from jupyter_air import log_metrics
MlflowClient().log_param(os.environ["MLFLOW_RUN_ID"], "lr", "{lr}")
for step in range(4):
    log_metrics({{"loss": {lr} / (step + 1)}}, step=step)
{ending}
"""


def sweep_call(lr: str) -> str:
    """A run named like its sibling; its metric sorts after MLflow's `system/...` ones."""
    return f"""%%air_distributed -n 1 --run-name sweep
import os
from mlflow import MlflowClient
from jupyter_air import log_metrics
MlflowClient().log_param(os.environ["MLFLOW_RUN_ID"], "lr", "{lr}")
for step in range(3):
    log_metrics({{"train_loss": {lr} / (step + 1)}}, step=step)
"""


#: Run name -> status the panel shows.
EXPECTED = {"lr-small": "finished", "lr-bad": "failed", "lr-big": "finished"}


@pytest.fixture(scope="module")
def server(
    start_lab: Callable[..., Lab],
    air_home: Path,
    tmp_path_factory: pytest.TempPathFactory,
    mlflow_template: Path,
) -> Lab:
    lab = start_lab(
        Scenario(gpus=[]),
        env={
            "AIR_HOME": str(air_home),
            "MLFLOW_TRACKING_URI": f"sqlite:///{air_home}/mlflow.db",
            "CUDA_VISIBLE_DEVICES": "",
        },
    )
    put_notebook(
        lab,
        "train.ipynb",
        [
            "%load_ext jupyter_air",
            call("lr-small", "0.1"),
            call("lr-big", "0.2"),
            # last: after an error the kernel drops the cells queued behind it
            call("lr-bad", "0.5", fail=True),
        ],
    )
    put_notebook(
        lab, "sweep.ipynb", ["%load_ext jupyter_air", sweep_call("0.1"), sweep_call("0.3")]
    )
    old_project = tmp_path_factory.mktemp("old-project")
    fresh_store(mlflow_template, old_project)
    old_project_store(air_home, old_project)
    return lab


def old_project_store(air_home: Path, directory: Path) -> None:
    """A store a job of this user used before (a project's own ``mlflow.db`` in
    ``directory``, migrated), with a run in its experiment for train.ipynb."""
    from mlflow import MlflowClient

    from jupyter_air.identity import mlflow_user
    from jupyter_air.jobs.store import JobStore
    from jupyter_air.tracking.stores import register_store
    from jupyter_air.tracking.targets import default_experiment_name
    from tests.factories import job_spec

    uri = f"sqlite:///{directory}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment(default_experiment_name(mlflow_user(), "train.ipynb"))
    run = client.create_run(experiment, run_name="from-last-month")
    client.set_terminated(run.info.run_id)
    spec = job_spec(kind="command", tracking_uri=uri, experiment_id=experiment)
    JobStore(air_home).create(spec, "20261101-090000-aaaaaa")
    register_store(uri, air_home)


@pytest.fixture(scope="module")
def page(browser: Any, server: Lab) -> Iterator[Any]:
    page = open_notebook(browser, server, "train.ipynb", "jupyterlab")
    run_calls(page, [0, 1, 2, 3])
    yield page
    page.close()


#: What the panel shows at the sidebar's width: the heads of the table's columns in view
#: (not cut by the sidebar's edge), and the search box's and its neighbours' boxes.
PANEL_LAYOUT = """panel => {
    const edge = panel.parentElement.getBoundingClientRect().right;
    const box = e => {
        const r = e.getBoundingClientRect();
        return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width};
    };
    return {
        edge,
        width: panel.getBoundingClientRect().width,
        heads: [...panel.querySelectorAll('.jp-air-RunsPanel-table th')]
            .filter(th => th.getBoundingClientRect().right <= edge + 0.5)
            .map(th => getComputedStyle(th, '::before').content.replace(/^"(.*)"$/, '$1')
                       .replace(/^none$/, '') || th.textContent),
        search: box(panel.querySelector('.jp-air-RunsPanel-search')),
        others: [...panel.querySelectorAll(
            '.jp-air-RunsPanel-statusFilter, .jp-air-RunsPanel-refresh')].map(box),
    };
}"""


#: The cells a narrow sidebar must show, row by row (status, name, duration, attempt and
#: primary metric), and those cut by the panel's edges.
CELLS_IN_VIEW = """panel => {
    const edges = panel.parentElement.getBoundingClientRect();
    const inside = c => {
        const r = c.getBoundingClientRect();
        return r.width > 0 && r.left >= edges.left - 0.5 && r.right <= edges.right + 0.5;
    };
    const names = ['runStatus', 'label', 'duration', 'attempt', 'primary'];
    const cells = [...panel.querySelectorAll('.jp-air-RunsPanel-run')]
        .map(r => names.map(n => r.querySelector('.jp-air-RunsPanel-' + n)));
    return {
        rows: cells.map(row => row.map(c => c.textContent)),
        cut: cells.flat().filter(c => !inside(c)).map(c => c.className),
    };
}"""


def overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["left"] < b["right"]
        and b["left"] < a["right"]
        and a["top"] < b["bottom"]
        and b["top"] < a["bottom"]
    )


def statuses(page: Any) -> dict[str, str]:
    return dict(
        page.eval_on_selector_all(
            ROWS,
            "rows => rows.map(r => [r.querySelector('.jp-air-RunsPanel-name a').textContent,"
            " r.querySelector('.jp-air-RunsPanel-runStatus').textContent])",
        )
    )


def test_the_three_calls_appear_with_their_statuses_jobs_and_cells(
    page: Any, artifacts: Path
) -> None:
    page.click(TAB)
    page.wait_for_selector(PANEL, state="visible")
    deadline = 240_000
    page.wait_for_function(
        "n => document.querySelectorAll("
        "'.jp-air-RunsPanel-run .jp-air-RunsPanel-runStatus.jp-mod-finished,"
        " .jp-air-RunsPanel-run .jp-air-RunsPanel-runStatus.jp-mod-failed').length >= n",
        arg=3,
        timeout=deadline,
    )
    assert statuses(page) == EXPECTED
    assert page.locator(f"{ROWS} .jp-air-RunsPanel-logs").count() == 3
    # Each run was tagged with its cell's id: the notebook holds all three.
    assert page.locator(f"{ROWS} .jp-air-RunsPanel-cell").count() == 3
    link = page.get_attribute(f"{ROWS} >> nth=0 >> .jp-air-RunsPanel-name a", "href")
    assert "/jupyter-air/mlflow/" in link
    assert "/runs/" in link
    # Every time is 24-hour, whatever the browser's locale: a run of today shows its time
    # (its day too, past midnight), its whole date and time is the tooltip.
    starts = page.eval_on_selector_all(
        f"{ROWS} .jp-air-RunsPanel-start", "cells => cells.map(c => [c.textContent, c.title])"
    )
    for shown, whole in starts:
        assert re.fullmatch(r"(\d\d-\d\d \d\d:\d\d|\d\d:\d\d:\d\d)", shown), starts
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", whole), starts
    # Newest first (a frontend that changed its kernel runs some calls again, see
    # ``run_calls``: the order is the runs' starts', not always the cells').
    wholes = [whole for _, whole in starts]
    assert wholes == sorted(wholes, reverse=True), starts
    # At the sidebar's default width (250 px) each run's status, name, duration, attempt
    # and primary metric (the user's loss) are in view, a resumed retry's too (`2 ↻`, the
    # step it resumed at is its tooltip); the table scrolls sideways for the rest. The
    # search box has a line of its own, clear of the status filter and Refresh.
    layout = page.eval_on_selector(PANEL, PANEL_LAYOUT)
    assert layout["width"] <= 260, layout
    assert layout["heads"][:6] == ["", "Status", "Run", "Dur.", "Att.", "loss"], layout
    shown = page.eval_on_selector(PANEL, CELLS_IN_VIEW)
    assert shown["cut"] == [], shown
    assert sorted(row[:2] + row[3:] for row in shown["rows"]) == [
        ["failed", "lr-bad", "1", "0.125"],
        ["finished", "lr-big", "1", "0.05"],
        ["finished", "lr-small", "1", "0.025"],
    ], shown
    assert all(re.fullmatch(r"[\d.]+(ms|s|min)", row[2]) for row in shown["rows"]), shown
    resumed = page.eval_on_selector(
        PANEL,
        """panel => {
            const span = (cls, text) => Object.assign(
                document.createElement('span'), {className: cls, textContent: text});
            const cell = panel.querySelector('.jp-air-RunsPanel-attempt');
            const before = [...cell.childNodes];
            const mark = span('jp-air-RunsPanel-resumed', ' ↻');
            mark.append(span('jp-air-RunsPanel-resumedStep', ' 400'));
            cell.replaceChildren('2', mark);
            const edge = panel.parentElement.getBoundingClientRect().right;
            const right = panel.querySelector('.jp-air-RunsPanel-primary')
                .getBoundingClientRect().right;
            cell.replaceChildren(...before);
            return right <= edge + 0.5;
        }""",
    )
    assert resumed, "a resumed retry's attempt pushes the metric out of view"
    search = layout["search"]
    assert search["width"] >= 120, layout
    assert search["right"] <= layout["edge"], layout
    assert not any(overlap(search, other) for other in layout["others"]), layout
    page.screenshot(path=str(artifacts / "runs-panel.png"))
    on_a_redrawn(
        lambda: page.locator(PANEL).screenshot(path=str(artifacts / "runs-panel-sidebar.png"))
    )
    # Scrolled to its last column, the table keeps the runs' names in view.
    wrap = f"{PANEL} .jp-air-RunsPanel-tableWrap"
    page.eval_on_selector(wrap, "w => { w.scrollLeft = w.scrollWidth; }")
    names = page.eval_on_selector(
        wrap,
        "w => [...w.querySelectorAll('.jp-air-RunsPanel-name')]"
        ".every(n => n.getBoundingClientRect().left >= w.getBoundingClientRect().left - 0.5)",
    )
    page.screenshot(path=str(artifacts / "runs-panel-scrolled.png"))
    page.eval_on_selector(wrap, "w => { w.scrollLeft = 0; }")
    assert names, "the runs' names scroll out of view"
    # the failed run's cell: the notebook's last cell becomes the active one
    link = page.locator(ROWS).filter(has_text="lr-bad").locator(".jp-air-RunsPanel-cell")

    def opened() -> bool:
        """Clicked again if the panel's poll redrew the row under the click."""
        link.click()
        try:
            page.wait_for_function(
                "() => document.querySelectorAll('.jp-Notebook .jp-Cell')[3]"
                ".classList.contains('jp-mod-active')",
                timeout=3_000,
            )
        except PlaywrightTimeoutError:
            return False
        return True

    until(opened, "the failed run's cell made the active one", timeout=60)


def test_comparing_two_runs_overlays_both_curves_and_shows_the_param_that_differs(
    page: Any, artifacts: Path
) -> None:
    for name in ("lr-small", "lr-big"):
        row = page.locator(ROWS).filter(has_text=name)
        row.locator(".jp-air-RunsPanel-pick").check()
    page.wait_for_selector(CHART, timeout=60_000)
    page.wait_for_function(
        "sel => (document.querySelector(sel)?.data ?? []).length === 2", arg=CHART
    )
    curves = page.eval_on_selector(
        CHART, "plot => Object.fromEntries(plot.data.map(t => [t.name, t.y]))"
    )
    assert curves == {
        "lr-small": pytest.approx([0.1, 0.05, 0.1 / 3, 0.025]),
        "lr-big": pytest.approx([0.2, 0.1, 0.2 / 3, 0.05]),
    }
    params = page.inner_text(f"{PANEL} .jp-air-RunsPanel-paramsTable")
    assert params.split() == ["Param", "that", "differs", "lr-small", "lr-big", "lr", "0.1", "0.2"]
    page.locator(f"{PANEL} .jp-air-RunsPanel-compare").scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "runs-compare.png"))


def test_the_status_filter_shows_only_the_failed_run(page: Any) -> None:
    page.select_option(f"{PANEL} .jp-air-RunsPanel-statusFilter select", "FAILED")
    page.wait_for_function(
        "() => document.querySelectorAll('.jp-air-RunsPanel-run').length === 1", timeout=30_000
    )
    assert statuses(page) == {"lr-bad": "failed"}


def test_the_store_picker_shows_the_runs_an_older_store_holds(page: Any, artifacts: Path) -> None:
    page.select_option(f"{PANEL} .jp-air-RunsPanel-statusFilter select", "")
    picker = f"{PANEL} .jp-air-RunsPanel-store select"
    page.wait_for_selector(picker, timeout=30_000)
    labels = page.eval_on_selector_all(f"{picker} option", "os => os.map(o => o.textContent)")
    assert labels[0] == "Default store"
    assert labels[1:] == ["old-project0/mlflow.db"]
    page.select_option(picker, index=1)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-air-RunsPanel-run')]"
        ".map(r => r.textContent).join() .includes('from-last-month')",
        timeout=30_000,
    )
    assert list(statuses(page)) == ["from-last-month"]
    page.screenshot(path=str(artifacts / "runs-store-picker.png"))
    page.select_option(picker, index=0)
    page.wait_for_function(
        "() => document.querySelectorAll('.jp-air-RunsPanel-run').length === 3", timeout=30_000
    )
    assert statuses(page) == EXPECTED


@pytest.fixture(scope="module")
def sweep(browser: Any, server: Lab) -> Iterator[Any]:
    """sweep.ipynb in JupyterLab with its runs panel open, once both its calls finished.
    A workspace of its own: the module's page keeps train.ipynb open in the default one."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.console_lines = []
    page.on("console", lambda m: page.console_lines.append(f"{m.type}: {m.text}"))
    page.goto(f"{server.url}lab/workspaces/sweep/tree/sweep.ipynb?token={server.token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell .cm-content", timeout=60_000)
    run_calls(page, [0, 1, 2])
    page.click(TAB)
    page.wait_for_function(
        "() => document.querySelectorAll("
        "'.jp-air-RunsPanel-run .jp-air-RunsPanel-runStatus.jp-mod-finished').length === 2",
        timeout=240_000,
    )
    yield page
    page.close()


def compare_the_sweep(page: Any) -> None:
    """Pick both sweep runs: the comparison opens on the user's metric with one legend
    entry per run, named and told apart by short id."""
    for row in range(2):
        page.locator(ROWS).nth(row).locator(".jp-air-RunsPanel-pick").check()
    page.wait_for_function(
        "sel => (document.querySelector(sel)?.data ?? []).length === 2", arg=CHART
    )
    assert page.input_value(f"{PANEL} .jp-air-RunsPanel-metric select") == "train_loss"
    names = page.eval_on_selector(CHART, "plot => plot.data.map(t => t.name)")
    ids = page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.runId)")
    assert sorted(names) == sorted(f"sweep ({run_id[:7]})" for run_id in ids)
    legend = page.eval_on_selector_all(
        f"{CHART} .legend .traces text", "items => items.map(t => t.textContent)"
    )
    assert sorted(legend) == sorted(names)


def test_system_metrics_are_one_click_away_after_the_users(sweep: Any) -> None:
    heads = f"{PANEL} .jp-air-RunsPanel-table th"
    titles = sweep.eval_on_selector_all(heads, "ths => ths.map(th => th.textContent)")
    assert "train_loss" in titles
    assert not [t for t in titles if t.startswith("system/")], titles
    sweep.click(f"{PANEL} .jp-air-RunsPanel-systemToggle")
    sweep.wait_for_function(
        "sel => [...document.querySelectorAll(sel)]"
        ".some(th => th.textContent.startsWith('system/'))",
        arg=heads,
    )
    titles = sweep.eval_on_selector_all(heads, "ths => ths.map(th => th.textContent)")
    assert titles.index("train_loss") < min(
        i for i, t in enumerate(titles) if t.startswith("system/")
    )


def test_two_runs_of_one_name_compare_apart_on_the_users_metric(
    sweep: Any, artifacts: Path
) -> None:
    compare_the_sweep(sweep)
    # By time: each run from its own first point, not the wall clock, nor the run's start
    # (made before its ranks start).
    sweep.select_option(f"{PANEL} .jp-air-RunsPanel-axis select", "time")
    sweep.wait_for_function(
        "sel => document.querySelector(sel)?.layout.xaxis.title.text"
        ".startsWith('time since first point')",
        arg=CHART,
    )
    starts = sweep.eval_on_selector(CHART, "plot => plot.data.map(t => Math.min(...t.x))")
    assert starts == [0, 0], starts
    sweep.locator(f"{PANEL} .jp-air-RunsPanel-compare").scroll_into_view_if_needed()
    sweep.screenshot(path=str(artifacts / "runs-compare-same-name.png"))


def open_from_view_menu(page: Any, *labels: str, tries: int = 3) -> None:
    """View > ... > item; the menu is rebuilt while the page's plugins still add to it,
    which detaches an item under the pointer: then close the menu and go again."""
    for attempt in range(tries):
        try:
            page.click('.lm-MenuBar-itemLabel:text-is("View")')
            for label in labels:
                page.click(f'.lm-Menu-itemLabel:text-is("{label}")', timeout=10_000)
            return
        except Exception:  # playwright's TimeoutError
            if attempt == tries - 1:
                raise
            page.keyboard.press("Escape")


def test_notebook7_shows_the_same_runs_beside_its_notebook(
    browser: Any, server: Lab, page: Any, artifacts: Path
) -> None:
    """The same server's Notebook 7 page: View > Right Sidebar opens the panel, which
    follows the page's notebook."""
    nb7 = open_notebook(browser, server, "train.ipynb", "notebook")
    try:
        open_from_view_menu(nb7, "Right Sidebar", "Show Experiment runs")
        nb7.wait_for_function(
            "() => document.querySelectorAll('#jp-right-stack .jp-air-RunsPanel-run').length === 3",
            timeout=60_000,
        )
        assert statuses(nb7) == EXPECTED
        nb7.screenshot(path=str(artifacts / "notebook7-runs-panel.png"))
    finally:
        nb7.close()


def test_notebook7_compares_two_runs_of_one_name_apart(
    browser: Any, server: Lab, sweep: Any, artifacts: Path
) -> None:
    nb7 = open_notebook(browser, server, "sweep.ipynb", "notebook")
    try:
        open_from_view_menu(nb7, "Right Sidebar", "Show Experiment runs")
        nb7.wait_for_function(
            "() => document.querySelectorAll('#jp-right-stack .jp-air-RunsPanel-run').length === 2",
            timeout=60_000,
        )
        compare_the_sweep(nb7)
        nb7.screenshot(path=str(artifacts / "notebook7-runs-compare-same-name.png"))
    finally:
        nb7.close()
