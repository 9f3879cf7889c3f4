"""The Profile action of the logs view (issue 38, item 5), in headless chromium against a
real lab and a real 2-rank gloo job: a click profiles the ranks' next 3 steps; the view
shows each rank's compute / communication / idle split, the top operators and a link to
the merged trace; the cell header's ``profile`` link (``logs_url(profile=True)``) starts
one too."""

from __future__ import annotations

import gzip
import json
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs import cancel
from jupyter_air.jobs.store import JobStore
from jupyter_air.jobs.submit import start_job
from jupyter_air.perf import profiles
from jupyter_air.tracking.ui_links import logs_url
from tests.factories import job_spec
from tests.fake_nvml import Scenario
from tests.perf.profile_job import TRAIN
from tests.ui.conftest import Lab
from tests.ui.test_job_logs import new_experiment, open_page
from tests.waits import until

PANEL = ".jp-air-JobProfile"

pytestmark = [pytest.mark.browser, pytest.mark.heavy, pytest.mark.slow]


@pytest.fixture(scope="module")
def lab(start_lab: Callable[..., Lab], air_home: Path) -> Lab:
    return start_lab(Scenario(gpus=[]), env={"AIR_HOME": str(air_home)})


@pytest.fixture(scope="module")
def job(air_home: Path, lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A 2-rank job that marks its steps until ``stop`` appears in its folder."""
    here = tmp_path_factory.mktemp("work")
    store = JobStore(air_home)
    uri, experiment_id = new_experiment(air_home)
    spec = job_spec(
        kind="command",
        command=[sys.executable, "-c", TRAIN],
        nproc_per_node=2,
        background=True,
        working_dir=str(here),
        tracking_uri=uri,
        experiment_id=experiment_id,
        run_name="profile-ui",
    )
    job = start_job(store, spec, None)
    marks = AttemptDir(store.attempt_dir(job.id, 1)).perf / "rank-1.jsonl"
    until(lambda: marks.exists(), f"job {job.id}'s first steps", 180)
    yield job.id
    (here / "stop").touch()
    cancel.wait(store, job.id, 60)
    cancel.cancel(store, job.id)
    cancel.wait(store, job.id, 30)


@pytest.fixture
def page(browser: Any, lab: Lab, job: str) -> Iterator[Any]:
    page = open_page(browser, lab, f"&air-job={job}")
    yield page
    page.context.close()


def test_the_profile_action_shows_each_ranks_split_and_the_merged_trace(
    page: Any, lab: Lab, artifacts: Path
) -> None:
    if True:
        page.wait_for_selector(f"{PANEL} .jp-air-JobProfile-start:enabled", timeout=60_000)
        page.fill(f"{PANEL} .jp-air-JobProfile-steps", "3")
        page.click(f"{PANEL} .jp-air-JobProfile-start")
        page.wait_for_selector(f"{PANEL} .jp-air-JobProfile-ranks", timeout=120_000)
        status = page.text_content(f"{PANEL} .jp-air-JobProfile-status")
        assert status == "Profile of 3 steps on 2 ranks"
        ranks = page.locator(f"{PANEL} .jp-air-JobProfile-ranks tbody tr").all_text_contents()
        assert len(ranks) == 2
        assert all(" %" in row for row in ranks)
        operators = page.locator(f"{PANEL} .jp-air-JobProfile-operators tbody tr")
        assert 0 < operators.count() <= 10
        assert "aten::" in " ".join(operators.all_text_contents())
        assert "Kept on the run under profile/" in page.text_content(PANEL)
        page.screenshot(path=str(artifacts / "job-logs-profile.png"))

        href = page.get_attribute(f"{PANEL} .jp-air-JobProfile-trace", "href")
        assert href is not None
        with urllib.request.urlopen(
            urllib.request.Request(href, headers={"Authorization": f"token {lab.token}"}),
            timeout=30,
        ) as answer:
            merged = json.loads(gzip.decompress(answer.read()))
        assert {e["pid"] for e in merged["traceEvents"]} == {0, 1}


def test_the_cells_profile_link_opens_the_view_on_a_profile_taken_now(
    browser: Any,
    lab: Lab,
    job: str,
    air_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The link a cell's header shows, as the kernel of this lab makes it."""
    info = {"pid": lab.process.pid, "url": lab.url, "base_url": "/"}
    (tmp_path / "jpserver-lab.json").write_text(json.dumps(info))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    link = logs_url(job, profile=True, environ={"JPY_PARENT_PID": str(lab.process.pid)})
    assert link == f"/lab?air-job={job}&air-profile=1"
    page = open_page(browser, lab, "&" + link.split("?", 1)[1])
    try:
        page.wait_for_function(
            "s => document.querySelector(s)?.textContent === 'Profile of 5 steps on 2 ranks'",
            arg=f"{PANEL} .jp-air-JobProfile-status",
            timeout=120_000,
        )
        assert "air-profile" not in page.url, "the address bar forgets the route"
        found = profiles.of_job(JobStore(air_home).job_dir(job))
        assert [p.steps for p in found] == [3, 5]
    finally:
        page.context.close()
