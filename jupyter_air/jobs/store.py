"""The job store: jobs and their attempts in one SQLite database (WAL).

SQLite is on every machine and lets many readers (the server, the CLI, several
kernels) work beside one writer at a time; each write is one short transaction.
"""

from __future__ import annotations

import getpass
import json
import re
import secrets
import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..paths import air_home
from ..procs import alive
from .spec import Workload

JOB_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")  # what new_job_id() makes
ACTIVE = ("PENDING", "RUNNING")

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    created REAL NOT NULL,
    owner TEXT NOT NULL,
    status TEXT NOT NULL,
    workload TEXT NOT NULL,
    supervisor_pid INTEGER,
    supervisor_host TEXT,
    started REAL,
    ended REAL,
    message TEXT
);
CREATE TABLE IF NOT EXISTS attempts (
    job_id TEXT NOT NULL REFERENCES jobs(id),
    attempt INTEGER NOT NULL,
    status TEXT NOT NULL,
    run_id TEXT,
    started REAL NOT NULL,
    ended REAL,
    exit_codes TEXT,
    failed_rank INTEGER,
    message TEXT,
    PRIMARY KEY (job_id, attempt)
);
"""


@dataclass(frozen=True)
class Attempt:
    job_id: str
    attempt: int
    status: str
    run_id: str | None
    started: float
    ended: float | None
    exit_codes: list[int | None] | None
    failed_rank: int | None
    message: str | None


@dataclass(frozen=True)
class Job:
    id: str
    created: float
    owner: str
    status: str
    workload: Workload
    supervisor_pid: int | None
    supervisor_host: str | None
    started: float | None
    ended: float | None
    message: str | None

    @property
    def done(self) -> bool:
        return self.status not in ACTIVE

    @property
    def supervised_here(self) -> bool:
        """Whether the supervisor's pid means something on this machine (a store on a
        shared disk may hold jobs of several machines)."""
        return self.supervisor_host in (None, socket.gethostname())


class UnknownJob(KeyError):
    """No job has this id."""


class JobStore:
    """Jobs and attempts; every method is one short transaction."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = home or air_home()
        self.path = self.home / "jobs.db"
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")  # a property of the file: set once
            db.executescript(SCHEMA)
            columns = {row["name"] for row in db.execute("PRAGMA table_info(jobs)")}
            if "supervisor_host" not in columns:  # a store made by an earlier version
                db.execute("ALTER TABLE jobs ADD COLUMN supervisor_host TEXT")

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        # The timeout is SQLite's busy timeout: writers wait for each other, never fail.
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            db.row_factory = sqlite3.Row
            yield db
        finally:
            db.close()

    def job_dir(self, job_id: str) -> Path:
        if not JOB_ID.fullmatch(job_id):
            raise UnknownJob(job_id)
        return self.home / "jobs" / job_id

    def attempt_dir(self, job_id: str, attempt: int) -> Path:
        return self.job_dir(job_id) / f"attempt_{attempt}"

    # -- jobs ------------------------------------------------------------------------

    def create(self, workload: Workload, job_id: str | None = None) -> Job:
        job_id = job_id or new_job_id()
        now = time.time()
        self.job_dir(job_id).mkdir(parents=True)
        with self._connect() as db:
            db.execute(
                "INSERT INTO jobs (id, created, owner, status, workload) VALUES (?, ?, ?, ?, ?)",
                (job_id, now, _owner(), "PENDING", workload.to_json()),
            )
        return self.get(job_id)

    def get(self, job_id: str) -> Job:
        with self._connect() as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise UnknownJob(job_id)
        return self._settled(_job(row))

    def jobs(self, active_only: bool = False, limit: int | None = None) -> list[Job]:
        query = "SELECT * FROM jobs"
        if active_only:
            query += f" WHERE status IN {ACTIVE!r}"
        query += " ORDER BY created DESC"
        if limit is not None:
            query += f" LIMIT {int(limit)}"
        with self._connect() as db:
            rows = db.execute(query).fetchall()
        found = [self._settled(_job(row)) for row in rows]
        return [job for job in found if not (active_only and job.done)]

    def _settled(self, job: Job) -> Job:
        """A job whose supervisor is gone without recording its end (killed outright, out
        of memory) failed: its ranks went with the supervisor, so it must not stay in
        the lists of running jobs. Only a still-active row is changed, so a supervisor
        that did record its end in the meantime keeps its word."""
        pid = job.supervisor_pid
        if job.done or pid is None or not job.supervised_here:
            return job
        if alive(pid, started_by=job.started):
            return job
        now, message = time.time(), f"its supervisor (pid {pid}) ended without recording the end"
        with self._connect() as db:
            db.execute(
                f"UPDATE jobs SET status = 'FAILED', ended = ?, message = ? "
                f"WHERE id = ? AND status IN {ACTIVE!r}",
                (now, message, job.id),
            )
            db.execute(
                "UPDATE attempts SET status = 'FAILED', ended = ?, message = ? "
                "WHERE job_id = ? AND status = 'RUNNING'",
                (now, message, job.id),
            )
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job.id,)).fetchone()
        return _job(row)

    def update(self, job_id: str, **fields: Any) -> None:
        if not fields or not set(fields) <= {
            "status",
            "supervisor_pid",
            "supervisor_host",
            "started",
            "ended",
            "message",
        }:
            raise ValueError(f"cannot update job fields {sorted(fields)}")
        columns = ", ".join(f"{name} = ?" for name in fields)
        with self._connect() as db:
            db.execute(f"UPDATE jobs SET {columns} WHERE id = ?", (*fields.values(), job_id))

    # -- attempts --------------------------------------------------------------------

    def start_attempt(self, job_id: str, attempt: int, run_id: str | None) -> None:
        with self._connect() as db:
            db.execute(
                "INSERT INTO attempts (job_id, attempt, status, run_id, started) "
                "VALUES (?, ?, 'RUNNING', ?, ?)",
                (job_id, attempt, run_id, time.time()),
            )

    def end_attempt(
        self,
        job_id: str,
        attempt: int,
        status: str,
        exit_codes: list[int | None],
        failed_rank: int | None = None,
        message: str | None = None,
    ) -> None:
        with self._connect() as db:
            db.execute(
                "UPDATE attempts SET status = ?, ended = ?, exit_codes = ?, failed_rank = ?, "
                "message = ? WHERE job_id = ? AND attempt = ?",
                (
                    status,
                    time.time(),
                    json.dumps(exit_codes),
                    failed_rank,
                    message,
                    job_id,
                    attempt,
                ),
            )

    def attempts(self, job_id: str) -> list[Attempt]:
        with self._connect() as db:
            rows = db.execute(
                "SELECT * FROM attempts WHERE job_id = ? ORDER BY attempt", (job_id,)
            ).fetchall()
        return [
            Attempt(
                job_id=row["job_id"],
                attempt=row["attempt"],
                status=row["status"],
                run_id=row["run_id"],
                started=row["started"],
                ended=row["ended"],
                exit_codes=json.loads(row["exit_codes"]) if row["exit_codes"] else None,
                failed_rank=row["failed_rank"],
                message=row["message"],
            )
            for row in rows
        ]


def new_job_id() -> str:
    """Readable, sortable by time, unique: ``20261129-083012-a1b2c3``."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def _job(row: sqlite3.Row) -> Job:
    return Job(
        id=row["id"],
        created=row["created"],
        owner=row["owner"],
        status=row["status"],
        workload=Workload.from_json(row["workload"]),
        supervisor_pid=row["supervisor_pid"],
        supervisor_host=row["supervisor_host"],
        started=row["started"],
        ended=row["ended"],
        message=row["message"],
    )


def _owner() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
