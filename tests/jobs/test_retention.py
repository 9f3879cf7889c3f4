"""Log retention: expired logs go, the job record stays and says so."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from jupyter_air.identity import os_identity
from jupyter_air.jobs.documents import job_document
from jupyter_air.jobs.retention import prune, retention_days
from jupyter_air.jobs.store import JobStore
from tests.factories import job_spec

DAY = 86400.0


def ended_job(store: JobStore, ended: float | None, status: str = "SUCCEEDED") -> str:
    job = store.create(job_spec("command", command=["true"]))
    (store.attempt_dir(job.id, 1) / "logs" / "node_0").mkdir(parents=True)
    (store.attempt_dir(job.id, 1) / "logs" / "node_0" / "rank_0.log").write_text("1\tOI\thi\n")
    store.update(job.id, status=status, ended=ended)
    return job.id


def test_logs_older_than_the_retention_are_removed_and_the_record_says_so(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    now = 1_800_000_000.0
    old = ended_job(store, now - 61 * DAY)
    recent = ended_job(store, now - 59 * DAY)
    running = ended_job(store, None, status="RUNNING")
    assert prune(store, 60, now=now) == [old]
    assert not store.job_dir(old).exists()
    assert store.job_dir(recent).exists()
    assert store.job_dir(running).exists()
    assert job_document(store, store.get(old), os_identity())["logs_expired"] is True
    assert job_document(store, store.get(recent), os_identity())["logs_expired"] is False
    assert store.get(old).status == "SUCCEEDED"
    assert prune(store, 60, now=now) == [], "nothing twice"


def test_the_retention_setting_for_kernels_and_the_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIR_LOG_RETENTION_DAYS", raising=False)
    assert retention_days() == 60
    monkeypatch.setenv("AIR_LOG_RETENTION_DAYS", "7")
    assert retention_days() == 7
    monkeypatch.setenv("AIR_LOG_RETENTION_DAYS", "a week")
    assert retention_days() == math.inf, "what was meant cannot be told: keep every log"
