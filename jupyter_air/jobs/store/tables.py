"""What every part of the job store works on: its database and its jobs' folders."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from ...job_dir import JobDir
from ...sqlite_store import Database, immediate
from .records import JOB_ID, UnknownJob


class Tables:
    """The base of each part of ``JobStore``: one connection per call, one short
    transaction per write."""

    home: Path
    db: Database

    def _connect(self) -> AbstractContextManager[sqlite3.Connection]:
        return self.db.connect()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as db, immediate(db):
            yield db

    def job_dir(self, job_id: str) -> Path:
        if not JOB_ID.fullmatch(job_id):
            raise UnknownJob(job_id)
        return JobDir.under(self.home, job_id).path

    def attempt_dir(self, job_id: str, attempt: int) -> Path:
        return JobDir(self.job_dir(job_id)).attempt(attempt).path
