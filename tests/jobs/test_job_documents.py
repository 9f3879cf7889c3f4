"""A job's document shows its outcome as soon as its last attempt settles it: what
``air run --watch`` printed at the end is what ``air get`` shows next, ``finishing`` while
the supervisor ends the MLflow run and attaches the logs."""

from __future__ import annotations

import os

import pytest

from jupyter_air import cli
from jupyter_air.identity import os_identity
from jupyter_air.jobs.documents import job_document
from jupyter_air.jobs.store import JobStore
from tests.factories import job_spec


def running_job(store: JobStore, max_retries: int = 0) -> str:
    """A job whose supervisor (this process) is alive, with attempt 1 running."""
    job = store.create(job_spec("command", command=["true"], max_retries=max_retries))
    store.update(job.id, status="RUNNING", supervisor_pid=os.getpid())
    store.start_attempt(job.id, 1, "run-1")
    return job.id


def test_a_settled_outcome_shows_at_once_finishing_until_the_end_is_recorded(
    store: JobStore,
) -> None:
    job_id = running_job(store)
    doc = job_document(store, store.get(job_id), os_identity())
    assert (doc["status"], doc["finishing"]) == ("RUNNING", False)

    store.end_attempt(job_id, 1, "SUCCEEDED", [0, 0])
    doc = job_document(store, store.get(job_id), os_identity())
    assert (doc["status"], doc["finishing"], doc["ended"]) == ("SUCCEEDED", True, None)

    store.update(job_id, status="SUCCEEDED", ended=123.0)
    doc = job_document(store, store.get(job_id), os_identity())
    assert (doc["status"], doc["finishing"], doc["ended"]) == ("SUCCEEDED", False, 123.0)


def test_a_failed_attempt_with_a_retry_left_is_not_the_outcome(store: JobStore) -> None:
    job_id = running_job(store, max_retries=1)
    store.end_attempt(job_id, 1, "FAILED", [1, 0], failed_rank=0, message="rank 0 exited 1")
    doc = job_document(store, store.get(job_id), os_identity())
    assert (doc["status"], doc["finishing"]) == ("RUNNING", False)

    store.start_attempt(job_id, 2, "run-2")
    store.end_attempt(job_id, 2, "FAILED", [1, 0], failed_rank=0, message="rank 0 exited 1")
    doc = job_document(store, store.get(job_id), os_identity())
    assert (doc["status"], doc["message"], doc["finishing"]) == (
        "FAILED",
        "rank 0 exited 1",
        True,
    )


def test_air_get_says_the_outcome_and_that_the_run_is_being_finished(
    store: JobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = running_job(store)
    store.end_attempt(job_id, 1, "SUCCEEDED", [0, 0])
    assert cli.main(["get", job_id]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == f"Job {job_id}: SUCCEEDED (finishing: ending its MLflow run, attaching logs)"
