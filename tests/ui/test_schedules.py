"""The Schedules view as a user meets it, in headless chromium, in JupyterLab and in
Jupyter Notebook 7: "Schedule this notebook" in the notebook's toolbar opens the form in
the right sidebar, the form previews the cron's next fire times, the saved schedule fires
(a Quartz cron with a seconds field, every 4 s) through the real per-user scheduler, its
run's task succeeds, and the task's logs open in the logs view: the notebook's outputs,
its distributed cell's job listed under the task and one click away; in JupyterLab
the task's executed notebook opens read-only from its run. The schedule is paused
once it has fired, so that the run looked at stays among the last shown. In JupyterLab the
form also makes a task graph (a command the notebook waits for)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.schedules import scheduler
from tests.fake_nvml import Scenario
from tests.ui.conftest import Lab
from tests.ui.notebook_pages import open_notebook, put_notebook

PANEL = ".jp-air-Schedules"
FORM = f"{PANEL} .jp-air-ScheduleForm"
BUTTON = '[data-command="jupyter-air:schedule-notebook"]'
EVERY_4S = "0/4 * * * * ?"


@pytest.fixture(scope="module")
def air_home(module_home: Path) -> Iterator[Path]:
    yield module_home
    scheduler.stop(module_home)  # the scheduler outlives the servers: that is its point


def start(start_lab: Callable[..., Lab], air_home: Path, app: str) -> Lab:
    lab = start_lab(
        Scenario(gpus=[]),
        settings={"jupyter-air:schedules": {"pollInterval": 1}},
        env={
            "AIR_HOME": str(air_home),
            "MLFLOW_TRACKING_URI": f"sqlite:///{air_home}/mlflow.db",
            "CUDA_VISIBLE_DEVICES": "",
        },
        app=app,
    )
    put_notebook(
        lab,
        "nightly.ipynb",
        ["print('scheduled hello')", "%%air_distributed -n 1 --run-name cell\nprint('rank hello')"],
    )
    return lab


def card(name: str) -> str:
    return f'{PANEL} .jp-air-Schedules-card[data-schedule-name="{name}"]'


def schedule_from_the_toolbar(page: Any, name: str, artifacts: Path, shot: str) -> None:
    """Open the form from the notebook's toolbar, check its preview, save."""
    page.click(f".jp-NotebookPanel-toolbar {BUTTON}")
    page.wait_for_selector(FORM, state="visible")
    assert "nightly.ipynb" in page.text_content(f"{FORM} .jp-air-ScheduleForm-title")
    page.fill(f"{FORM} .jp-air-ScheduleForm-name input", name)
    page.fill(f"{FORM} .jp-air-ScheduleForm-cron input", "61 * * * *")
    page.wait_for_selector(f"{FORM} .jp-air-ScheduleForm-preview .jp-mod-error")
    assert "minute" in page.text_content(f"{FORM} .jp-air-ScheduleForm-preview")
    assert page.is_disabled(f"{FORM} .jp-air-ScheduleForm-save")
    page.fill(f"{FORM} .jp-air-ScheduleForm-cron input", EVERY_4S)
    page.fill(f"{FORM} .jp-air-ScheduleForm-timezone input", "UTC")
    page.wait_for_function(
        "s => document.querySelectorAll(s).length === 5",
        arg=f"{FORM} .jp-air-ScheduleForm-times li",
    )
    times = page.eval_on_selector_all(
        f"{FORM} .jp-air-ScheduleForm-times li", "ns => ns.map(n => n.textContent)"
    )
    seconds = [datetime.strptime(t, "%Y-%m-%d %H:%M:%S %z").second for t in times]
    assert all(s % 4 == 0 for s in seconds), times
    assert "not this kernel's variables" in page.text_content(f"{FORM} .jp-air-ScheduleForm-note")
    page.screenshot(path=str(artifacts / f"{shot}-form.png"))
    page.click(f"{FORM} .jp-air-ScheduleForm-save")
    page.wait_for_selector(card(name), timeout=30_000)
    page.wait_for_selector(FORM, state="detached")  # the form closed


def see_it_fire(page: Any, name: str, artifacts: Path, shot: str) -> str:
    """Wait for a run, pause the schedule, wait for the run's task to succeed; its job id."""
    page.wait_for_selector(f"{card(name)} .jp-air-Schedules-run", timeout=60_000)
    page.click(f"{card(name)} .jp-air-Schedules-pause")
    page.wait_for_selector(f'{card(name)}[data-pause-status="PAUSED"]', timeout=30_000)
    done = f'{card(name)} .jp-air-Schedules-taskRun[data-status="SUCCEEDED"]'
    page.wait_for_selector(done, timeout=240_000)
    assert page.text_content(f"{card(name)} .jp-air-Schedules-task") == "notebook (nightly.ipynb)"
    assert "every 4 seconds" in page.text_content(f"{card(name)} .jp-air-Schedules-cron").lower()
    mlflow = page.get_attribute(f"{done} .jp-air-Schedules-mlflow", "href")
    assert "/jupyter-air/mlflow/" in mlflow
    # The notebook's distributed cell ran as a job of its own: under the task, with its run.
    child = f'{done} .jp-air-Schedules-child[data-status="SUCCEEDED"]'
    page.wait_for_selector(child, timeout=30_000)
    assert page.text_content(f"{child} .jp-air-Schedules-childName") == "cell"
    assert "/jupyter-air/mlflow/" in page.get_attribute(f"{child} .jp-air-Schedules-mlflow", "href")
    page.screenshot(path=str(artifacts / f"{shot}-panel.png"))
    return str(page.get_attribute(f"{done} .jp-air-Schedules-logs", "data-job-id"))


def schedule_a_task_graph(page: Any, artifacts: Path, shot: str) -> None:
    """The form again, as a graph: a command task ``prep`` that the notebook waits for;
    the saved schedule's card shows prep, then the notebook (a yearly cron: it stays put)."""
    page.click(f".jp-NotebookPanel-toolbar {BUTTON}")
    page.wait_for_selector(FORM, state="visible")
    page.fill(f"{FORM} .jp-air-ScheduleForm-name input", "nightly-graph")
    page.fill(f"{FORM} .jp-air-ScheduleForm-cron input", "0 3 1 1 *")
    page.click(f"{FORM} .jp-air-ScheduleForm-addTask button:has-text('Command task')")
    prep, notebook = f'{FORM} [aria-label="Task 2"]', f'{FORM} [aria-label="Task 1"]'
    page.fill(f'{prep} [aria-label="Task 2 key"]', "prep")
    page.fill(f'{prep} [aria-label="Task 2 command"]', "python -c pass")
    page.uncheck(f"{prep} .jp-air-ScheduleForm-after label:has-text('notebook') input")
    page.check(f"{notebook} .jp-air-ScheduleForm-after label:has-text('prep') input")
    save = f"{FORM} .jp-air-ScheduleForm-save"
    page.wait_for_function("s => !document.querySelector(s).disabled", arg=save)
    page.screenshot(path=str(artifacts / f"{shot}-graph-form.png"))
    page.click(save)
    page.wait_for_selector(card("nightly-graph"), timeout=30_000)
    stages = page.eval_on_selector_all(
        f"{card('nightly-graph')} .jp-air-Schedules-stage", "ns => ns.map(n => n.textContent)"
    )
    assert stages == ["prep", "notebook (nightly.ipynb)"]
    assert (
        page.get_attribute(f"{card('nightly-graph')} [data-task-key='prep']", "title")
        == "python -c pass"
    )
    page.screenshot(path=str(artifacts / f"{shot}-graph-panel.png"))


def open_the_executed_notebook(page: Any, lab: Lab, name: str, artifacts: Path, shot: str) -> None:
    """The task's "output" opens the notebook as the run left it, in the notebook editor:
    its outputs there, read-only, with no kernel started for it."""
    done = f'{card(name)} .jp-air-Schedules-taskRun[data-status="SUCCEEDED"]'
    page.wait_for_selector(f"{done} .jp-air-Schedules-output", timeout=60_000)
    page.click(f"{done} .jp-air-Schedules-output")
    tab = "#jp-main-dock-panel .lm-TabBar-tab.jp-mod-current .lm-TabBar-tabLabel"
    page.wait_for_function(
        "s => /^nightly\\.ipynb · run \\d+$/.test(document.querySelector(s)?.textContent ?? '')",
        arg=tab,
        timeout=60_000,
    )
    view = "#jp-main-dock-panel .jp-NotebookPanel:not(.lm-mod-hidden)"
    page.wait_for_function(
        "s => /rank hello/.test(document.querySelector(s)?.textContent ?? '')",
        arg=f"{view} .jp-Notebook",
        timeout=60_000,
    )
    page.screenshot(path=str(artifacts / f"{shot}-executed.png"))
    outputs = page.text_content(f"{view} .jp-Notebook") or ""
    assert "scheduled hello" in outputs
    assert "already loaded" not in outputs
    assert page.locator(f"{view} .jp-Cell").count() == 3  # parameters, then the notebook's
    page.click(f"{view} .jp-Cell:nth-child(2) .cm-content")  # typing in a cell changes nothing
    page.keyboard.type("zzz")
    assert "zzz" not in (page.text_content(f"{view} .jp-Notebook") or "")
    page.click(f"{tab.removesuffix(' .lm-TabBar-tabLabel')} .lm-TabBar-tabCloseIcon")
    page.wait_for_function(
        "s => document.querySelector(s)?.textContent === 'nightly.ipynb'", arg=tab
    )
    sessions = lab.api("api/sessions")
    assert not [s for s in sessions if s["path"].startswith("AirExecuted:")], sessions


def open_the_tasks_logs(page: Any, name: str, job_id: str, view: str) -> None:
    done = f'{card(name)} .jp-air-Schedules-taskRun[data-status="SUCCEEDED"]'
    page.click(f'{done} .jp-air-Schedules-logs[data-job-id="{job_id}"]')
    page.wait_for_selector(f"{view} .jp-air-JobLogs-jobId", timeout=120_000)
    assert page.text_content(f"{view} .jp-air-JobLogs-jobId") == job_id
    page.wait_for_function(
        "s => /succeeded/i.test(document.querySelector(s)?.textContent ?? '')",
        arg=f"{view} .jp-air-JobLogs-status",
        timeout=120_000,
    )
    # The task's logs are the notebook's outputs, not its kernel's start-up warnings.
    page.wait_for_function(
        "s => /rank hello/.test(document.querySelector(s)?.textContent ?? '')",
        arg=f"{view} .jp-air-JobLogs-body",
        timeout=120_000,
    )
    logs = page.text_content(f"{view} .jp-air-JobLogs-body") or ""
    assert "scheduled hello" in logs
    assert "without encryption" not in logs
    # The cell's job is one click away, and leads back to the task.
    child = page.get_attribute(
        f"{view} .jp-air-JobLogs-children .jp-air-JobLogs-jobLink", "data-job-id"
    )
    page.click(f'{view} .jp-air-JobLogs-children [data-job-id="{child}"]')
    page.wait_for_function(
        "([s, id]) => [...document.querySelectorAll(s)].some(n => n.textContent === id)",
        arg=[f"{view} .jp-air-JobLogs-jobId", child],
        timeout=120_000,
    )
    back = f'{view} .jp-air-JobLogs-parent [data-job-id="{job_id}"]'
    page.wait_for_selector(back, timeout=120_000)


#: Frontend -> the schedule's name there, and where it opens a job's logs (Notebook 7's
#: main area holds the one notebook, so the logs view opens under it).
FRONTENDS = {
    "jupyterlab": ("nightly", "#jp-main-dock-panel"),
    "notebook": ("nb7", "#jp-down-stack"),
}


@pytest.fixture(params=list(FRONTENDS))
def page(
    request: pytest.FixtureRequest, browser: Any, start_lab: Callable[..., Lab], air_home: Path
) -> Iterator[Any]:
    """The notebook's page in each frontend (a fixture, so a failure keeps a screenshot)."""
    app = request.param
    lab = start(start_lab, air_home, app)
    page = open_notebook(browser, lab, "nightly.ipynb", app)
    page.app, page.lab = app, lab
    yield page
    page.close()


def test_schedule_the_notebook_from_its_toolbar_see_it_fire_and_open_its_tasks_logs(
    page: Any, artifacts: Path
) -> None:
    name, logs_area = FRONTENDS[page.app]
    shot = f"schedules-{page.app}"
    schedule_from_the_toolbar(page, name, artifacts, shot)
    assert page.query_selector(f"#jp-right-stack {PANEL}") is not None  # the right sidebar
    job_id = see_it_fire(page, name, artifacts, shot)
    if page.app == "jupyterlab":  # the same form in both: once is enough
        open_the_executed_notebook(page, page.lab, name, artifacts, shot)
        schedule_a_task_graph(page, artifacts, shot)
    open_the_tasks_logs(page, name, job_id, logs_area)
    page.screenshot(path=str(artifacts / f"{shot}-logs.png"))
