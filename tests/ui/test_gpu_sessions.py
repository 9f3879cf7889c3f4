"""Warm sessions in the GPU resources panel, in headless chromium against a real lab: one
session idle on GPU 0 (waste, shown as such), another running a cell on GPU 1.

The sessions are made in the job store as their kernels leave them (a running session
job, its latest-cell file, its idle timeout recorded with the job); each rank is a
process carrying its job's id, holding memory on a GPU of the fake driver.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.job_dir import JobDir
from jupyter_air.jobs.sessions import cells as session_cells
from jupyter_air.jobs.sessions.activity import IDLE_TIMEOUT_TAG
from jupyter_air.jobs.sessions.cells import LatestCell
from jupyter_air.jobs.store import JobStore
from tests.factories import job_spec
from tests.fake_nvml import FakeGpu, Scenario
from tests.ui.conftest import Lab
from tests.ui.test_gpu_panel import PANEL, PANEL_TAB, card, open_lab

GIB = 1024**3


def running_session(store: JobStore, latest: LatestCell) -> str:
    job = store.create(job_spec("session", nproc_per_node=1, tags={IDLE_TIMEOUT_TAG: "1800"}))
    store.update(job.id, status="RUNNING", started=latest.started - 60)
    store.start_attempt(job.id, 1, None)
    session_cells.set_latest(JobDir(store.job_dir(job.id)), latest)
    return job.id


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """AIR_HOME with two running sessions: the first idle for 12 min since its cell 3,
    the second in its cell 4."""
    air_home = tmp_path_factory.mktemp("air")
    store = JobStore(air_home)
    now = time.time()
    idle = running_session(store, LatestCell(3, "run3", now - 13 * 60, ended=now - 12 * 60 - 5))
    busy = running_session(store, LatestCell(4, "run4", now - 20))
    return air_home, idle, busy


@pytest.fixture(scope="module")
def ranks(sessions: tuple[Path, str, str]) -> Iterator[list[subprocess.Popen[bytes]]]:
    """One rank per session, as the node agent starts them (with the job's id)."""
    started = [
        subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"],
            env={**os.environ, "AIR_JOB_ID": job, "RANK": "0"},
        )
        for job in sessions[1:]
    ]
    yield started
    for rank in started:
        rank.kill()
        rank.wait()


@pytest.fixture(scope="module")
def page(
    browser: Any,
    start_lab: Callable[..., Lab],
    sessions: tuple[Path, str, str],
    ranks: list[subprocess.Popen[bytes]],
) -> Iterator[Any]:
    idle_rank, busy_rank = ranks
    h100 = "NVIDIA H100 80GB HBM3"
    lab = start_lab(
        Scenario(
            gpus=[
                FakeGpu(
                    name=h100, util=0, mem_used=30 * GIB, processes=[(idle_rank.pid, 30 * GIB)]
                ),
                FakeGpu(
                    name=h100, util=97, mem_used=60 * GIB, processes=[(busy_rank.pid, 60 * GIB)]
                ),
            ]
        ),
        env={"AIR_HOME": str(sessions[0])},
    )
    page = open_lab(browser, lab)
    page.click(PANEL_TAB)
    page.wait_for_selector(f"{PANEL} {card(1)} .jp-air-GpuCard-process")
    yield page
    page.close()


def owner_text(page: Any, gpu: int) -> str:
    return str(page.text_content(f"{card(gpu)} .jp-air-GpuCard-process .jp-air-col-owner"))


def test_an_idle_session_stands_out_with_how_long_and_when_it_stops(
    page: Any, sessions: tuple[Path, str, str], artifacts: Path
) -> None:
    _, idle, _ = sessions
    badge = page.wait_for_selector(f"{card(0)} .jp-air-GpuCard-session.jp-mod-idleSession")
    short = idle.rsplit("-", 1)[1]
    assert badge.text_content() == f"session {short} idle 12 min (stops after 30 min)"
    assert f"air cancel {idle}" in badge.get_attribute("title")
    assert owner_text(page, 0) == f"session {idle} · idle 12 min (stops after 30 min)"
    row = page.query_selector(f"{card(0)} .jp-air-GpuCard-process")
    assert row.get_attribute("data-session") == "idle"
    # Drawn in the theme's warning colour: the card's border and the row's text.
    warn = page.evaluate(
        "() => getComputedStyle(document.body).getPropertyValue('--jp-warn-color1').trim()"
    )
    border = page.eval_on_selector(card(0), "c => getComputedStyle(c).borderTopColor")
    assert border == page.evaluate(
        "w => { const d = document.createElement('div'); d.style.color = w;"
        " document.body.append(d); const c = getComputedStyle(d).color; d.remove(); return c }",
        warn,
    )
    page.screenshot(path=str(artifacts / "gpu-panel-idle-session.png"))


def test_a_session_in_a_cell_says_which_and_is_not_flagged(
    page: Any, sessions: tuple[Path, str, str]
) -> None:
    _, _, busy = sessions
    assert owner_text(page, 1) == f"session {busy} · running cell 4"
    badge = page.text_content(f"{card(1)} .jp-air-GpuCard-session")
    assert badge == f"session {busy.rsplit('-', 1)[1]} running cell 4"
    assert page.query_selector(f"{card(1)} .jp-air-GpuCard-session.jp-mod-idleSession") is None
    row = page.query_selector(f"{card(1)} .jp-air-GpuCard-process")
    assert row.get_attribute("data-session") == "running"
    assert "jp-mod-idleSession" not in (page.get_attribute(card(1), "class") or "")


def test_the_idle_session_shows_as_running_once_its_next_cell_starts(
    page: Any, sessions: tuple[Path, str, str]
) -> None:
    air_home, idle, _ = sessions
    files = JobDir(JobStore(air_home).job_dir(idle))
    session_cells.set_latest(files, LatestCell(4, "run4", time.time()))
    page.click(".jp-air-GpuPanel-refresh")
    page.wait_for_selector(
        f"{card(0)} .jp-air-GpuCard-session.jp-mod-idleSession", state="detached"
    )
    assert owner_text(page, 0) == f"session {idle} · running cell 4"
