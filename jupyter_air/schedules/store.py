"""Schedules, their runs and their tasks: tables in the job store's database.

The same file as the jobs (opened as ``sqlite_store.Database`` opens it), so a task's
job and its run are read in one query; a schedule's grants are kept as a job's are.
Each method is one short transaction. Two rules make firing idempotent: a run's
``(schedule_id, scheduled_time, trigger)`` is UNIQUE and is written in the same
transaction that moves the schedule's ``handled_through`` (conditioned on its old
value); a task is submitted only by the process whose ``claim`` moved it from PENDING
to SUBMITTING.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from ..identity import Identity
from ..jobs.permissions import JobAccess
from ..jobs.store import JobStore
from ..jobs.store.grants import GrantTable
from ..sqlite_store import immediate
from .model import (
    RunStatus,
    Schedule,
    ScheduleRun,
    ScheduleSpec,
    TaskRun,
    TaskStatus,
    Trigger,
)

GRANTS = GrantTable("schedule_grants", key="schedule_id", of="schedules")

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS schedules (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    spec TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    handled_through REAL NOT NULL,
    next_due REAL,
    UNIQUE (owner, name)
);
CREATE INDEX IF NOT EXISTS schedules_by_due ON schedules (next_due);
{GRANTS.schema}
CREATE TABLE IF NOT EXISTS schedule_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    schedule_id TEXT NOT NULL,
    scheduled_time REAL NOT NULL,
    trigger TEXT NOT NULL,
    status TEXT NOT NULL,
    created REAL NOT NULL,
    ended REAL,
    message TEXT,
    UNIQUE (schedule_id, scheduled_time, trigger)
);
CREATE INDEX IF NOT EXISTS schedule_runs_by_status ON schedule_runs (status, schedule_id);
CREATE TABLE IF NOT EXISTS schedule_tasks (
    run_id INTEGER NOT NULL REFERENCES schedule_runs(id),
    task_key TEXT NOT NULL,
    status TEXT NOT NULL,
    job_id TEXT,
    message TEXT,
    claimed_by TEXT,
    previous_job_ids TEXT NOT NULL DEFAULT '[]',
    sweep_id TEXT,
    previous_sweep_ids TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (run_id, task_key)
);
"""
#: Columns a store made by an earlier version lacks: (name, declaration).
ADDED = (("sweep_id", "TEXT"), ("previous_sweep_ids", "TEXT NOT NULL DEFAULT '[]'"))

SCHEDULE_ID_BYTES = 6


class UnknownSchedule(KeyError):
    """No schedule (or schedule run) has this id."""


class NameTaken(ValueError):
    """The owner already has a schedule of this name."""


@dataclass(frozen=True)
class Fired:
    """What ``record_due`` wrote for one schedule: the runs to start and those SKIPPED."""

    started: tuple[int, ...]
    skipped: tuple[int, ...]


class ScheduleStore:
    """The schedule tables of ``jobs``'s database."""

    def __init__(self, jobs: JobStore) -> None:
        self.jobs = jobs
        self._held: sqlite3.Connection | None = None
        with jobs.connect() as db:
            db.executescript(SCHEMA)
            columns = {row["name"] for row in db.execute("PRAGMA table_info(schedule_tasks)")}
            for column, declaration in ADDED:
                if column not in columns:
                    with contextlib.suppress(sqlite3.OperationalError):  # another added it
                        db.execute(f"ALTER TABLE schedule_tasks ADD COLUMN {column} {declaration}")

    @contextmanager
    def held(self) -> Iterator[None]:
        """One connection for every call inside (a tick): each call stays its own short
        transaction, but SQLite neither reopens the file nor checkpoints the WAL at each
        close (what made a tick of 10 due schedules take a second and a half)."""
        if self._held is not None:
            yield
            return
        with self.jobs.connect() as db:
            self._held = db
            try:
                yield
            finally:
                self._held = None

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Every write inside is one transaction (one commit, one fsync): a tick records
        all its due schedules, then all its claims, then all its outcomes, so ten due
        schedules cost three commits, not forty."""
        with self.held(), self._write():
            yield

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction, or the batch's when inside one."""
        with self._connect() as db, immediate(db):
            yield db

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        if self._held is not None:
            yield self._held
        else:
            with self.jobs.connect() as db:
                yield db

    # -- schedules -------------------------------------------------------------------

    def create(self, owner: str, spec: ScheduleSpec, next_due: float | None, now: float) -> str:
        schedule_id = secrets.token_hex(SCHEDULE_ID_BYTES)
        with self._write() as db:
            try:
                db.execute(
                    "INSERT INTO schedules (id, owner, name, spec, created, updated, "
                    "handled_through, next_due) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (schedule_id, owner, spec.name, spec.to_json(), now, now, now, next_due),
                )
            except sqlite3.IntegrityError:
                raise NameTaken(spec.name) from None
            GRANTS.put(db, schedule_id, spec.grants)
        return schedule_id

    def replace(
        self, schedule_id: str, spec: ScheduleSpec, next_due: float | None, now: float
    ) -> None:
        """A new spec (an update, a pause): times up to now count as handled, so an
        update never fires what was due before it."""
        with self._write() as db:
            try:
                cursor = db.execute(
                    "UPDATE schedules SET name = ?, spec = ?, updated = ?, next_due = ?, "
                    "handled_through = MAX(handled_through, ?) WHERE id = ?",
                    (spec.name, spec.to_json(), now, next_due, now, schedule_id),
                )
            except sqlite3.IntegrityError:
                raise NameTaken(spec.name) from None
            if cursor.rowcount == 0:
                raise UnknownSchedule(schedule_id)
            GRANTS.clear(db, schedule_id)
            GRANTS.put(db, schedule_id, spec.grants)

    def delete(self, schedule_id: str) -> None:
        with self._write() as db:
            db.execute(
                "DELETE FROM schedule_tasks WHERE run_id IN "
                "(SELECT id FROM schedule_runs WHERE schedule_id = ?)",
                (schedule_id,),
            )
            db.execute("DELETE FROM schedule_runs WHERE schedule_id = ?", (schedule_id,))
            GRANTS.clear(db, schedule_id)
            if db.execute("DELETE FROM schedules WHERE id = ?", (schedule_id,)).rowcount == 0:
                raise UnknownSchedule(schedule_id)

    def get(self, schedule_id: str) -> Schedule:
        with self._connect() as db:
            row = db.execute("SELECT * FROM schedules WHERE id = ?", (schedule_id,)).fetchone()
        if row is None:
            raise UnknownSchedule(schedule_id)
        return _schedule(row)

    def find(self, owner: str, name: str) -> Schedule | None:
        with self._connect() as db:
            row = db.execute(
                "SELECT * FROM schedules WHERE owner = ? AND name = ?", (owner, name)
            ).fetchone()
        return None if row is None else _schedule(row)

    def schedules(self, visible_to: Identity | None = None) -> list[Schedule]:
        """By name; with ``visible_to``, those it owns or holds a grant on."""
        query = "SELECT * FROM schedules"
        params: list[str] = []
        if visible_to is not None:
            sql, params = GRANTS.visible(visible_to)
            query += f" WHERE {sql}"
        with self._connect() as db:
            rows = db.execute(query + " ORDER BY name, owner", params).fetchall()
        return [_schedule(row) for row in rows]

    def access(self, schedule_id: str) -> JobAccess:
        """The schedule's owner and grants (``JobAccess`` computes the levels)."""
        with self._connect() as db:
            access = GRANTS.access(db, schedule_id)
        if access is None:
            raise UnknownSchedule(schedule_id)
        return access

    def due(self, now: float) -> list[Schedule]:
        with self._connect() as db:
            rows = db.execute(
                "SELECT * FROM schedules WHERE next_due IS NOT NULL AND next_due <= ?", (now,)
            ).fetchall()
        return [_schedule(row) for row in rows]

    def next_due(self) -> float | None:
        """The earliest time any schedule is due (what the scheduler sleeps until)."""
        with self._connect() as db:
            row = db.execute("SELECT MIN(next_due) AS t FROM schedules").fetchone()
        return None if row["t"] is None else float(row["t"])

    def count(self) -> int:
        with self._connect() as db:
            return int(db.execute("SELECT COUNT(*) FROM schedules").fetchone()[0])

    # -- firing ----------------------------------------------------------------------

    def record_due(
        self,
        schedule: Schedule,
        handled_through: float,
        next_due: float | None,
        runs: Sequence[tuple[float, RunStatus, str | None]],
        now: float,
    ) -> Fired | None:
        """Record ``runs`` (scheduled time, RUNNING or SKIPPED, reason) and move the
        schedule on, if no other process did so since ``schedule`` was read (then None).
        A RUNNING run gets its tasks, PENDING; a run whose schedule already has
        ``max_concurrent_runs`` running is recorded SKIPPED instead, in this transaction."""
        with self._write() as db:
            moved = db.execute(
                "UPDATE schedules SET handled_through = ?, next_due = ? "
                "WHERE id = ? AND handled_through = ? AND updated = ?",
                (
                    handled_through,
                    next_due,
                    schedule.id,
                    schedule.handled_through,
                    schedule.updated,
                ),
            )
            if moved.rowcount == 0:
                return None  # nothing written
            active = _active_runs(db, schedule.id)
            started, skipped = [], []
            for scheduled_time, status, message in runs:
                if status is RunStatus.RUNNING and active >= schedule.spec.max_concurrent_runs:
                    status = RunStatus.SKIPPED
                    message = (
                        f"max_concurrent_runs ({schedule.spec.max_concurrent_runs}) "
                        f"{'run was' if active == 1 else 'runs were'} still running"
                    )
                run_id = _insert_run(
                    db, schedule, scheduled_time, Trigger.CRON, status, message, now
                )
                if run_id is None:
                    continue
                if status is RunStatus.RUNNING:
                    active += 1
                    started.append(run_id)
                else:
                    skipped.append(run_id)
        return Fired(tuple(started), tuple(skipped))

    def add_run_now(self, schedule: Schedule, now: float) -> int:
        """A run started by hand (run-now): not bound by max_concurrent_runs."""
        with self._write() as db:
            run_id = _insert_run(db, schedule, now, Trigger.RUN_NOW, RunStatus.RUNNING, None, now)
        if run_id is None:  # the same schedule run now twice within one clock tick
            raise ValueError(f"schedule {schedule.id} was just run now: try again")
        return run_id

    # -- runs and tasks --------------------------------------------------------------

    def run(self, run_id: int) -> ScheduleRun:
        with self._connect() as db:
            row = db.execute("SELECT * FROM schedule_runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise UnknownSchedule(str(run_id))
            return _run(row, _tasks(db, [run_id]).get(run_id, ()))

    def runs(self, schedule_id: str, limit: int = 20) -> list[ScheduleRun]:
        """Newest first."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT * FROM schedule_runs WHERE schedule_id = ? "
                "ORDER BY scheduled_time DESC, id DESC LIMIT ?",
                (schedule_id, int(limit)),
            ).fetchall()
            tasks = _tasks(db, [row["id"] for row in rows])
        return [_run(row, tasks.get(row["id"], ())) for row in rows]

    def active_runs(self) -> list[ScheduleRun]:
        with self._connect() as db:
            rows = db.execute(
                "SELECT * FROM schedule_runs WHERE status = ? ORDER BY id",
                (RunStatus.RUNNING.value,),
            ).fetchall()
            tasks = _tasks(db, [row["id"] for row in rows])
        return [_run(row, tasks.get(row["id"], ())) for row in rows]

    def claim(self, run_id: int, task_key: str, claimer: str) -> bool:
        """Move a PENDING task to SUBMITTING for ``claimer``; False if another process did."""
        with self._connect() as db:
            cursor = db.execute(
                "UPDATE schedule_tasks SET status = ?, claimed_by = ? "
                "WHERE run_id = ? AND task_key = ? AND status = ?",
                (TaskStatus.SUBMITTING, claimer, run_id, task_key, TaskStatus.PENDING),
            )
        return cursor.rowcount == 1

    def set_task(
        self,
        run_id: int,
        task_key: str,
        status: TaskStatus,
        *,
        job_id: str | None = None,
        sweep_id: str | None = None,
        message: str | None = None,
        only_if: TaskStatus | None = None,
    ) -> bool:
        """Set a task's status (and job or sweep, message); with ``only_if``, only from
        that status."""
        query = "UPDATE schedule_tasks SET status = ?, message = ?"
        params: list[object] = [status, message]
        if job_id is not None:
            query += ", job_id = ?"
            params.append(job_id)
        if sweep_id is not None:
            query += ", sweep_id = ?"
            params.append(sweep_id)
        query += " WHERE run_id = ? AND task_key = ?"
        params += [run_id, task_key]
        if only_if is not None:
            query += " AND status = ?"
            params.append(only_if)
        with self._connect() as db:
            return db.execute(query, params).rowcount == 1

    def end_run(self, run_id: int, status: RunStatus, message: str | None, now: float) -> None:
        with self._connect() as db:
            db.execute(
                "UPDATE schedule_runs SET status = ?, message = ?, ended = ? "
                "WHERE id = ? AND status = ?",
                (status, message, now, run_id, RunStatus.RUNNING),
            )

    def reopen(self, run_id: int, task_keys: Iterable[str]) -> None:
        """Repair: these tasks back to PENDING (their jobs and sweeps kept as previous),
        the run RUNNING again, in one transaction, only if the run has ended."""
        with self._write() as db:
            cursor = db.execute(
                "UPDATE schedule_runs SET status = ?, ended = NULL, message = NULL "
                "WHERE id = ? AND status != ?",
                (RunStatus.RUNNING, run_id, RunStatus.RUNNING),
            )
            if cursor.rowcount == 0:
                raise ValueError(f"schedule run {run_id} is still running")
            for key in task_keys:
                db.execute(
                    "UPDATE schedule_tasks SET status = ?, message = NULL, claimed_by = NULL, "
                    "previous_job_ids = CASE WHEN job_id IS NULL THEN previous_job_ids "
                    "ELSE json_insert(previous_job_ids, '$[#]', job_id) END, job_id = NULL, "
                    "previous_sweep_ids = CASE WHEN sweep_id IS NULL THEN previous_sweep_ids "
                    "ELSE json_insert(previous_sweep_ids, '$[#]', sweep_id) END, "
                    "sweep_id = NULL "
                    "WHERE run_id = ? AND task_key = ?",
                    (TaskStatus.PENDING, run_id, key),
                )


def _insert_run(
    db: sqlite3.Connection,
    schedule: Schedule,
    scheduled_time: float,
    trigger: Trigger,
    status: RunStatus,
    message: str | None,
    now: float,
) -> int | None:
    """A run and (when it runs) its tasks, PENDING; None if that key is already taken."""
    cursor = db.execute(
        "INSERT OR IGNORE INTO schedule_runs (schedule_id, scheduled_time, trigger, status, "
        "created, ended, message) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            schedule.id,
            scheduled_time,
            trigger,
            status,
            now,
            None if status is RunStatus.RUNNING else now,
            message,
        ),
    )
    if cursor.rowcount == 0:
        return None
    run_id = int(cursor.lastrowid or 0)
    if status is RunStatus.RUNNING:
        db.executemany(
            "INSERT INTO schedule_tasks (run_id, task_key, status) VALUES (?, ?, ?)",
            [(run_id, t.task_key, TaskStatus.PENDING) for t in schedule.spec.tasks],
        )
    return run_id


def _active_runs(db: sqlite3.Connection, schedule_id: str) -> int:
    row = db.execute(
        "SELECT COUNT(*) FROM schedule_runs WHERE schedule_id = ? AND status = ?",
        (schedule_id, RunStatus.RUNNING),
    ).fetchone()
    return int(row[0])


def _tasks(db: sqlite3.Connection, run_ids: list[int]) -> dict[int, tuple[TaskRun, ...]]:
    if not run_ids:
        return {}
    marks = ", ".join("?" * len(run_ids))
    rows = db.execute(
        f"SELECT * FROM schedule_tasks WHERE run_id IN ({marks}) ORDER BY rowid", run_ids
    ).fetchall()
    out: dict[int, list[TaskRun]] = {}
    for row in rows:
        out.setdefault(row["run_id"], []).append(
            TaskRun(
                run_id=row["run_id"],
                task_key=row["task_key"],
                status=TaskStatus(row["status"]),
                job_id=row["job_id"],
                message=row["message"],
                previous_job_ids=tuple(json.loads(row["previous_job_ids"])),
                claimed_by=row["claimed_by"],
                sweep_id=row["sweep_id"],
                previous_sweep_ids=tuple(json.loads(row["previous_sweep_ids"])),
            )
        )
    return {k: tuple(v) for k, v in out.items()}


def _run(row: sqlite3.Row, tasks: tuple[TaskRun, ...]) -> ScheduleRun:
    return ScheduleRun(
        id=row["id"],
        schedule_id=row["schedule_id"],
        scheduled_time=row["scheduled_time"],
        trigger=Trigger(row["trigger"]),
        status=RunStatus(row["status"]),
        created=row["created"],
        ended=row["ended"],
        message=row["message"],
        tasks=tasks,
    )


def _schedule(row: sqlite3.Row) -> Schedule:
    return Schedule(
        id=row["id"],
        owner=row["owner"],
        spec=ScheduleSpec.from_json(row["spec"]),
        created=row["created"],
        updated=row["updated"],
        handled_through=row["handled_through"],
        next_due=row["next_due"],
    )
