"""One store for all of a user's runs, as a user meets it: with no tracking URI set, a
notebook's cell, an ``air run`` job started from another directory and a schedule fired
from a third all land in ``AIR_HOME/mlflow.db``; the runs panel beside the notebook finds
all three through its experiment picker, and ``air list`` lists all three jobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.jobs import cancel
from jupyter_air.jobs.store import JobStore
from jupyter_air.schedules.scheduler import stop
from tests.fake_nvml import Scenario
from tests.ui.conftest import Lab
from tests.ui.notebook_pages import open_notebook, put_notebook, run_calls
from tests.waits import until

PANEL = ".jp-air-RunsPanel"
TAB = '.jp-SideBar.jp-mod-right .lm-TabBar-tab[data-id="jupyter-air-runs"]'
PICKER = f"{PANEL} .jp-air-RunsPanel-experiment select"
CELL = "%%air_distributed -n 1 --run-name from-the-notebook\nprint('trained')"
WORKLOAD = (
    "command: {python} -c \"print('cli')\"\nexperiment_name: cli\nmlflow_run_name: from-air-run\n"
)
SCHEDULE = """\
name: nightly
experiment_name: nightly
schedule: {{cron: "0 3 * * *", pause_status: PAUSED}}
tasks:
  - task_key: train
    workload: {{command: {python} -c "print('night')", mlflow_run_name: from-a-schedule}}
"""


@pytest.fixture(scope="module")
def home(air_home: Path) -> Iterator[Path]:
    yield air_home
    stop(air_home)
    jobs = JobStore(air_home)
    for job in jobs.jobs(active_only=True):
        cancel.cancel(jobs, job.id)
        cancel.wait(jobs, job.id, 60)


def user_env(home: Path) -> dict[str, str]:
    """A user's environment with no tracking setting at all."""
    env = {**os.environ, "AIR_HOME": str(home), "CUDA_VISIBLE_DEVICES": ""}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


@pytest.fixture(scope="module")
def lab(start_lab: Callable[..., Lab], home: Path) -> Lab:
    with pytest.MonkeyPatch.context() as patch:  # the lab starts from this environment
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        lab = start_lab(Scenario(gpus=[]), env=user_env(home))
    put_notebook(lab, "train.ipynb", ["%load_ext jupyter_air", CELL])
    return lab


def air(home: Path, cwd: Path, *args: str) -> Any:
    result = subprocess.run(
        [sys.executable, "-m", "jupyter_air.cli", *args, "--output", "json"],
        capture_output=True,
        text=True,
        timeout=180,
        env=user_env(home),
        cwd=cwd,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_cell_air_run_and_a_schedule_from_three_directories_show_in_one_runs_panel(
    browser: Any, lab: Lab, home: Path, tmp_path: Path, artifacts: Path
) -> None:
    cli_dir, schedule_dir = tmp_path / "project", tmp_path / "schedules"
    for directory in (cli_dir, schedule_dir):
        directory.mkdir()
    (cli_dir / "w.yaml").write_text(WORKLOAD.format(python=sys.executable))
    air(home, cli_dir, "run", "-f", "w.yaml")
    (schedule_dir / "s.yaml").write_text(SCHEDULE.format(python=sys.executable))
    air(home, schedule_dir, "schedule", "create", "-f", "s.yaml")
    air(home, schedule_dir, "schedule", "run-now", "nightly")

    page = open_notebook(browser, lab, "train.ipynb", "jupyterlab")
    run_calls(page, [0, 1])
    jobs = JobStore(home)
    until(lambda: len(jobs.jobs()) == 3, "three jobs", timeout=240)
    until(lambda: not jobs.jobs(active_only=True), "every job ended", timeout=240)
    assert len(air(home, tmp_path, "list", "--all-status")) == 3
    for directory in (cli_dir, schedule_dir, lab.log_path.parent / "root"):  # the notebook's
        assert not (directory / "mlflow.db").exists(), directory

    page.click(TAB)
    # The server's first MLflow read imports MLflow and opens the store: seconds on a quiet
    # machine, over a minute beside two busy loops (seen: no picker after 60 s, no error).
    page.wait_for_selector(PICKER, timeout=180_000)
    # The picker's list is read again while shown (every 30 s): an experiment the
    # supervisors made after the panel first read it comes.
    page.wait_for_function(
        "() => ['cli', 'nightly'].every(name => [...document.querySelectorAll("
        f"'{PICKER} option')].some(o => o.textContent === name))",
        timeout=90_000,
    )
    names = page.eval_on_selector_all(f"{PICKER} option", "os => os.map(o => o.textContent)")
    assert any(name.endswith("/train") for name in names), names
    assert page.locator(f"{PANEL} .jp-air-RunsPanel-store").count() == 0, "one store: no picker"
    for experiment, run in [
        (next(n for n in names if n.endswith("/train")), "from-the-notebook"),
        ("cli", "from-air-run"),
        ("nightly", "from-a-schedule"),
    ]:
        page.select_option(PICKER, label=experiment)
        page.wait_for_function(
            "r => [...document.querySelectorAll('.jp-air-RunsPanel-run')]"
            ".some(row => row.textContent.includes(r))",
            arg=run,
            timeout=30_000,
        )
        if run == "from-a-schedule":
            page.screenshot(path=str(artifacts / "runs-panel-one-store.png"))
    page.close()
