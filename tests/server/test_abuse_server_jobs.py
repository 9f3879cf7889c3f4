"""The jobs routes against a job store locked by another process, jobs whose supervisor
died, and secrets in what they show (issue 10, items 2 and 12)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_air.jobs.store import JobStore
from tests.factories import job_spec
from tests.jobs.test_job_store import orphan, recorded_status
from tests.waits import until_async

HOLD = 10.0  # seconds another process holds the lock at most (the test releases it sooner)


@pytest.fixture
def lock_holder(store: JobStore) -> Iterator[Any]:
    """``hold(kind)``: another process takes the database's lock (``BEGIN IMMEDIATE`` or
    ``EXCLUSIVE``) until the returned event is set, or HOLD seconds."""
    release = threading.Event()
    threads = []

    def hold(kind: str) -> threading.Event:
        locked = threading.Event()

        def run() -> None:
            with closing(sqlite3.connect(store.path, isolation_level=None)) as db:
                db.execute(f"BEGIN {kind}")
                locked.set()
                release.wait(HOLD)
                db.execute("ROLLBACK")

        threads.append(threading.Thread(target=run, daemon=True))
        threads[-1].start()
        assert locked.wait(5)
        return release

    yield hold
    release.set()
    for thread in threads:
        thread.join()


@pytest.fixture
def rollback_journal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The store (the test's and the server's) on a network file system: SQLite's rollback
    journal, where readers wait for the writer's lock."""
    from jupyter_air import paths

    monkeypatch.setattr(paths, "filesystem_type", lambda path: "nfs4")


async def test_a_locked_job_store_holds_up_its_requests_not_the_server(
    rollback_journal: None, jp_fetch: Any, store: JobStore, lock_holder: Any
) -> None:
    job = store.create(job_spec("command", command=["true"]))
    assert not store.wal
    release = lock_holder("EXCLUSIVE")
    started = time.monotonic()
    listing = asyncio.ensure_future(jp_fetch("jupyter-air", "jobs", params={"all": "1"}))
    await asyncio.sleep(0.5)  # the listing is waiting for the lock
    await jp_fetch("api", "status")
    took = time.monotonic() - started
    assert took < 0.5 + 2.0, f"GET api/status took {took - 0.5:.1f} s while the store was locked"

    with pytest.raises(HTTPClientError) as refused:
        await listing
    assert refused.value.code == 503
    assert refused.value.response is not None
    error = json.loads(refused.value.response.body)["error"]
    assert "the job store is busy (database is locked): try again" in error["message"]
    assert time.monotonic() - started < HOLD, "answered before the lock went"

    release.set()
    answer = json.loads((await jp_fetch("jupyter-air", "jobs", params={"all": "1"})).body)
    assert [j["id"] for j in answer["jobs"]] == [job.id]


async def test_reading_a_job_whose_supervisor_died_writes_nothing(
    jp_fetch: Any, store: JobStore, lock_holder: Any
) -> None:
    job_id = orphan(store)
    lock_holder("IMMEDIATE")  # another process is writing
    started = time.monotonic()
    doc = json.loads((await jp_fetch("jupyter-air", "jobs", job_id)).body)
    active = json.loads((await jp_fetch("jupyter-air", "jobs")).body)["jobs"]
    assert time.monotonic() - started < HOLD, "the reads waited for the writer"
    assert doc["status"] == "FAILED"
    assert doc["message"].endswith("ended without recording the end")
    assert doc["attempts"][0]["status"] == "FAILED"
    assert active == []
    assert recorded_status(store, job_id) == "RUNNING"


@pytest.fixture
def orphaned_before_start(store: JobStore) -> str:
    return orphan(store)


async def test_the_server_records_jobs_whose_supervisor_died_on_a_thread_of_its_own(
    orphaned_before_start: str, jp_serverapp: Any, store: JobStore
) -> None:
    await jp_serverapp.extension_manager.start_all_extensions()  # what serving starts with
    await until_async(
        lambda: recorded_status(store, orphaned_before_start) == "FAILED",
        "the dead supervisor's job recorded FAILED after the server started",
        10,
        step=0.1,
    )
    assert store.get(orphaned_before_start).ended is not None


async def test_job_documents_show_no_credentials(jp_fetch: Any, store: JobStore) -> None:
    workload = job_spec(
        kind="command",
        command=["python", "train.py", "--token", "s3cret"],
        env={"HF_TOKEN": "envs3cret"},
        tracking_uri="https://alice:s3cret@mlflow.internal/",
        experiment_id="7",
    )
    job = store.create(workload)
    store.start_attempt(job.id, 1, "run1")
    store.update(job.id, message="cannot reach https://alice:s3cret@mlflow.internal/api")
    one = (await jp_fetch("jupyter-air", "jobs", job.id)).body.decode()
    listing = (await jp_fetch("jupyter-air", "jobs")).body.decode()
    for body in (one, listing):
        assert job.id in body
        assert "s3cret" not in body
    doc = json.loads(one)
    assert doc["tracking_uri"] == "https://***@mlflow.internal/"
    assert (
        doc["attempts"][0]["run_url"]
        == "https://mlflow.internal/#/experiments/7/runs/run1?workflowType=machine_learning"
    )
    assert "env" not in doc
