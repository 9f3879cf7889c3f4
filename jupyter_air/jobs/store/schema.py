"""The job store's tables, and how a store made by an earlier version is brought to them.

Each statement is ``IF NOT EXISTS``: a new store gets every table, an earlier one the
tables it lacks; ``migrate`` adds the columns it lacks.
"""

from __future__ import annotations

import sqlite3

from ...notify.outbox import SCHEMA as OUTBOX_SCHEMA
from ...sqlite_store import immediate
from ..spec import JobSpec
from .grants import JOB_GRANTS

SCHEMA = f"""
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
    message TEXT,
    experiment_id TEXT,
    parent_id TEXT
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
{JOB_GRANTS.schema}
CREATE INDEX IF NOT EXISTS grants_by_principal ON grants (kind, name, job_id);
CREATE TABLE IF NOT EXISTS job_targets (
    job_id TEXT NOT NULL REFERENCES jobs(id),
    position INTEGER NOT NULL,
    target TEXT NOT NULL,
    added REAL NOT NULL,
    PRIMARY KEY (job_id, position)
);
"""


def create(db: sqlite3.Connection) -> None:
    """Every table, of a new store or one made by an earlier version."""
    db.executescript(SCHEMA)
    db.executescript(OUTBOX_SCHEMA)  # the notifications of its jobs and schedules
    migrate(db)


def migrate(db: sqlite3.Connection) -> None:
    """Bring a store made by an earlier version to this schema: its columns, and its
    jobs' flat workloads as nested specs (their experiment's id in its column)."""
    columns = {row["name"] for row in db.execute("PRAGMA table_info(jobs)")}
    for column in ("supervisor_host", "experiment_id", "parent_id"):
        if column not in columns:
            db.execute(f"ALTER TABLE jobs ADD COLUMN {column} TEXT")
    db.execute("CREATE INDEX IF NOT EXISTS jobs_by_parent ON jobs (parent_id)")
    flat = db.execute(
        "SELECT id, workload FROM jobs WHERE json_extract(workload, '$.program') IS NULL"
    ).fetchall()
    if not flat:
        return
    with immediate(db):
        for row in flat:
            spec = JobSpec.from_json(row["workload"])
            db.execute(
                "UPDATE jobs SET workload = ?, experiment_id = ? WHERE id = ?",
                (spec.to_json(), spec.tracking.experiment_id, row["id"]),
            )
