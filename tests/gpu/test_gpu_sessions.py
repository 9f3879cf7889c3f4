"""A warm session's GPU processes in the GPU API: running a cell, or idle and since when.

The session is a job of kind "session" in the store with its latest-cell file, as its
kernel leaves them; its rank is a process that carries the job's id, holding memory on
a GPU of the fake driver.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_air.job_dir import AttemptDir, JobDir
from jupyter_air.jobs.sessions import cells as session_cells
from jupyter_air.jobs.sessions.activity import (
    IDLE_TIMEOUT_TAG,
    Activity,
    SessionActivity,
    activity_of,
    idle_timeout_of,
)
from jupyter_air.jobs.sessions.cells import LatestCell
from jupyter_air.jobs.store import Job, JobStore
from tests.conftest import WriteScenario
from tests.factories import job_spec
from tests.fake_nvml import FakeGpu, Scenario
from tests.gpu.snapshots import sampler_snapshot


def running_session(store: JobStore, tags: dict[str, str] | None = None) -> Job:
    job = store.create(job_spec("session", nproc_per_node=1, tags=tags or {}))
    store.update(job.id, status="RUNNING", started=1000.0)
    store.start_attempt(job.id, 1, None)
    return store.get(job.id)


@pytest.fixture
def session(store: JobStore) -> Job:
    return running_session(store, {IDLE_TIMEOUT_TAG: "1800"})


@pytest.fixture
def rank(session: Job, scenario: WriteScenario) -> Iterator[subprocess.Popen[bytes]]:
    """The session's rank, holding 2 GiB on the only GPU."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, "AIR_JOB_ID": session.id, "RANK": "0"},
    )
    scenario(Scenario(gpus=[FakeGpu(processes=[(process.pid, 2 * 1024**3)])]))
    yield process
    process.kill()
    process.wait()


async def owner_of_the_rank(jp_fetch: Any) -> dict[str, Any]:
    answer = await jp_fetch("jupyter-air", "gpu", "sample", method="POST", body=b"")
    (process,) = json.loads(answer.body)["state"][0]["processes"]
    owner: dict[str, Any] = process["owner"]
    return owner


async def test_a_session_with_no_cell_yet_is_idle_since_it_started(
    jp_fetch: Any, session: Job, rank: Any
) -> None:
    owner = await owner_of_the_rank(jp_fetch)
    assert owner["id"] == session.id
    assert owner["session"] == {
        "activity": "idle",
        "since": 1000.0,
        "cell": None,
        "idle_timeout_s": 1800.0,
    }


async def test_a_session_in_a_cell_is_running_it_then_idle_since_its_end(
    jp_fetch: Any, session: Job, rank: Any, store: JobStore
) -> None:
    files = JobDir(store.job_dir(session.id))
    session_cells.set_latest(files, LatestCell(4, "run4", started=1200.0))
    owner = await owner_of_the_rank(jp_fetch)
    assert owner["session"] == {
        "activity": "running",
        "since": 1200.0,
        "cell": 4,
        "idle_timeout_s": 1800.0,
    }

    session_cells.set_latest(files, LatestCell(4, "run4", started=1200.0, ended=1260.5))
    owner = await owner_of_the_rank(jp_fetch)
    assert owner["session"] == {
        "activity": "idle",
        "since": 1260.5,
        "cell": 4,
        "idle_timeout_s": 1800.0,
    }


async def test_an_ended_session_and_a_job_of_another_kind_have_no_activity(
    jp_fetch: Any, session: Job, rank: Any, store: JobStore
) -> None:
    store.update(session.id, status="SUCCEEDED")
    assert "session" not in await owner_of_the_rank(jp_fetch)

    fresh = store.create(job_spec("python"))
    store.update(fresh.id, status="RUNNING", started=1000.0)
    assert activity_of(store, store.get(fresh.id)) is None


def test_the_idle_timeout_is_known_only_when_the_job_recorded_a_sane_one(
    store: JobStore,
) -> None:
    assert idle_timeout_of(running_session(store)) is None
    assert idle_timeout_of(running_session(store, {IDLE_TIMEOUT_TAG: "0"})) == 0.0  # never
    for bad in ("soon", "-5", "nan", "inf"):
        assert idle_timeout_of(running_session(store, {IDLE_TIMEOUT_TAG: bad})) is None, bad


def test_a_latest_cell_file_no_kernel_wrote_says_nothing(store: JobStore) -> None:
    """A file whose fields have the right names but not numbers is not believed."""
    job = running_session(store)
    files = JobDir(store.job_dir(job.id))
    for junk in (
        {"cell": "4", "run_id": "r", "started": 1200.0, "ended": None},
        {"cell": 4, "run_id": "r", "started": "noon", "ended": None},
        {"cell": 4, "run_id": "r", "started": 1200.0, "ended": "later"},
    ):
        files.session_cell.write_text(json.dumps(junk))
        assert activity_of(store, job) is None, junk
    files.session_cell.write_text("{cut")  # unreadable: as before any cell
    assert activity_of(store, job) == SessionActivity(Activity.IDLE, 1000.0, None, None)


async def test_a_node_of_a_multi_node_session_shows_it_idle_too(
    jp_fetch: Any, store: JobStore, scenario: WriteScenario
) -> None:
    """A node agent's processes come named by job (``owner`` in its snapshot): the node
    route adds what the session does, as the route of this server's GPUs does."""
    job = running_session(store, {IDLE_TIMEOUT_TAG: "600"})
    scenario(Scenario(gpus=[FakeGpu(processes=[(4242, 2 * 1024**3)])]))
    snapshot = sampler_snapshot()
    snapshot["state"][0]["processes"][0]["owner"] = {"kind": "job", "id": job.id, "name": None}
    AttemptDir(store.attempt_dir(job.id, 1)).write_gpu(1, snapshot)

    answer = await jp_fetch("jupyter-air", "jobs", job.id, "gpu", params={"node": 1})
    (process,) = json.loads(answer.body)["state"][0]["processes"]
    assert process["owner"]["session"] == {
        "activity": "idle",
        "since": 1000.0,
        "cell": None,
        "idle_timeout_s": 600.0,
    }
