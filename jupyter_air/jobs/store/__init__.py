"""The job store: jobs, their attempts, grants and notifications in one SQLite database.

``jobs.db`` of AIR_HOME, opened as ``sqlite_store.Database`` opens every store of ours
(private, WAL on a local disk, the rollback journal on a network file system). The
schedules keep their tables in the same file (``schedules.store``), so a task's job
and its run are read in one query.

``JobStore`` is made of one part per thing it holds, each a module of this package:
the jobs (``jobs``), their attempts (``attempts``), their grants (``grants``), whom
they tell (``targets``) and the record of jobs whose supervisor died (``settle``).
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from ...paths import air_home, private_dir
from ...sqlite_store import Database, StoreError
from . import schema
from .attempts import Attempt, AttemptRows
from .grants import GrantRows
from .jobs import JobRows
from .records import ACTIVE_SQL, JOB_ID, Job, JobEnded, UnknownJob, new_job_id, orphaned
from .settle import Settling, settle_periodically
from .targets import Targets

__all__ = [
    "ACTIVE_SQL",
    "JOB_ID",
    "Attempt",
    "Job",
    "JobEnded",
    "JobStore",
    "StoreError",
    "UnknownJob",
    "new_job_id",
    "orphaned",
    "settle_periodically",
]


class JobStore(JobRows, AttemptRows, GrantRows, Targets, Settling):
    """Jobs and what they hold; every method is one short transaction.

    ``busy_timeout`` is how long a call waits for another process's write lock:
    writers (supervisors) wait long rather than fail; a server answering requests
    gives up sooner (``sqlite3.OperationalError``, "database is locked").
    """

    def __init__(self, home: Path | None = None, *, busy_timeout: float = 30.0) -> None:
        self.home = air_home() if home is None else private_dir(home)
        self.db = Database(self.home / "jobs.db", busy_timeout)
        self.path = self.db.path
        with self.db.connect() as db:
            schema.create(db)  # also brings a store of an earlier version to this one

    @property
    def wal(self) -> bool:
        """Whether the database is in WAL mode (its commits then skip the fsync)."""
        return self.db.wal

    @wal.setter
    def wal(self, wal: bool) -> None:
        """False: later connections keep SQLite's ``synchronous=FULL`` (a benchmark's
        comparison)."""
        self.db.wal = wal

    def close(self) -> None:
        """Let go of the idle connection now rather than when the store is dropped; calls
        still work (each with a connection of its own, which may then be the last)."""
        self.db.close()

    def connect(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """A connection to this store's database, for modules that keep tables of their
        own in it (schedules): the same file, modes, journal and lock waits."""
        return self._connect()
