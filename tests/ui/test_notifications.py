"""A job's JupyterLab notification as its owner sees it, in headless chromium against a
real lab: ``air run -f`` submits a background job whose workload file asks for a
``jupyterlab`` notification on failure; its one rank prints a line and exits 1; the
supervisor posts the notification, and the open tab shows it as JupyterLab's own."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fake_nvml import Scenario
from tests.ui.conftest import Lab

GPU_TAB = '.jp-SideBar.jp-mod-right .lm-TabBar-tab[data-id="jupyter-air-gpu"]'
TOAST = ".Toastify__toast"
LONG_POLL = "/jupyter-air/notifications?after="

TRAIN = """\
import sys
print("loading the data", flush=True)
print("ValueError: bad batch 17", file=sys.stderr, flush=True)
sys.exit(1)
"""


@pytest.fixture(scope="module")
def lab(start_lab: Callable[..., Lab], air_home: Path) -> Lab:
    return start_lab(Scenario(gpus=[]), env={"AIR_HOME": str(air_home)})


@pytest.fixture
def page(browser: Any, lab: Lab) -> Iterator[Any]:
    """A lab page whose notifications poll is waiting: it knows where to start."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.console_lines = []
    page.on("console", lambda m: page.console_lines.append(f"{m.type}: {m.text}"))
    with page.expect_request(lambda r: LONG_POLL in r.url, timeout=60_000):
        page.goto(f"{lab.url}lab?token={lab.token}")
    page.wait_for_selector(GPU_TAB, timeout=60_000)
    yield page
    context.close()


def air_run(workdir: Path, lab: Lab, air_home: Path) -> str:
    """``air run -f w.yaml`` in ``workdir``, as the lab's user in a terminal; the job id."""
    (workdir / "train.py").write_text(TRAIN)
    (workdir / "w.yaml").write_text(
        yaml.safe_dump(
            {
                "experiment_name": "notify-ui",
                "command": f"{sys.executable} train.py",
                "compute": {"nproc_per_node": 1},
                "notify": [{"jupyterlab": True, "on": ["failure"]}],
            }
        )
    )
    env = {
        **os.environ,
        "AIR_HOME": str(air_home),
        "MLFLOW_TRACKING_URI": f"sqlite:///{air_home}/mlflow.db",
        "AIR_LAB_URL": lab.url,  # the links of the message
        "JUPYTER_CONFIG_DIR": str(workdir / "config"),  # no user's notify defaults
        "JUPYTER_RUNTIME_DIR": str(workdir / "runtime"),
    }
    submitted = subprocess.run(
        [sys.executable, "-m", "jupyter_air.cli", "run", "-f", "w.yaml"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.split()[1]


def test_a_failed_jobs_notification_shows_and_opens_its_logs_and_run(
    page: Any, lab: Lab, air_home: Path, tmp_path: Path
) -> None:
    # The run's page is answered here: the test looks at where it leads, not at MLflow.
    page.context.route(
        "**/jupyter-air/mlflow/**", lambda route: route.fulfill(body="the run's page")
    )
    job_id = air_run(tmp_path, lab, air_home)

    toast = page.locator(TOAST).filter(has_text=f"air job {job_id}")
    toast.wait_for(timeout=120_000)
    text = toast.locator(".jp-toast-message").inner_text()
    assert text.startswith(f"air job {job_id} (")
    assert "failed: rank 0 exited with code 1" in text
    assert text.rstrip().endswith("ValueError: bad batch 17"), "the failing rank's last line"
    assert "Toastify__toast--error" in (toast.get_attribute("class") or "")
    page.wait_for_function(  # slid in: the whole toast in view
        """() => [...document.querySelectorAll('.Toastify__toast')].every(
            t => t.getBoundingClientRect().right <= window.innerWidth)""",
        timeout=10_000,
    )
    page.screenshot(path=str(tmp_path / "notification.png"))
    assert page.locator(TOAST).count() == 1, "shown once"

    # "MLflow run": the run's page in a new browser tab; the toast stays.
    with page.context.expect_page(timeout=30_000) as opened:
        toast.get_by_role("button", name="MLflow run").click()
    run_page = opened.value
    run_page.wait_for_load_state()
    assert run_page.url.startswith(f"{lab.url}jupyter-air/mlflow/")
    assert "#/experiments/" in run_page.url
    run_page.close()
    assert toast.is_visible()

    # "Logs": the job's logs view, here; the toast closes.
    toast.get_by_role("button", name="Logs").click()
    view = page.locator(f'.jp-air-JobLogs[data-job-id="{job_id}"]')
    view.wait_for(timeout=30_000)
    current = page.get_attribute(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current", "title")
    assert job_id in (current or "")  # the tab's tooltip: "Job logs — <run name> (<job id>)"
    page.locator(".jp-air-JobLogs-text", has_text="ValueError: bad batch 17").wait_for(
        timeout=30_000
    )
    toast.wait_for(state="detached", timeout=10_000)
    page.screenshot(path=str(tmp_path / "notification-logs.png"))
