"""The job store: jobs and their attempts in one SQLite database.

SQLite is on every machine and lets many readers (the server, the CLI, several
kernels) work beside one writer at a time; each write is one short transaction.
On a local disk the database is in WAL mode, where readers never wait for the writer.
WAL needs memory shared by every process using the file, which a network file system
does not give: there the store keeps SQLite's rollback journal.

In WAL mode commits use ``synchronous=NORMAL``: no fsync per commit (only at a
checkpoint). SQLite documents it as consistent in WAL mode and durable across any
application crash; only a power loss or OS crash may roll back the last transactions,
which also ends every job they described. A full fsync per commit cost a trivial job
about 0.17 s on a loaded disk. The rollback journal keeps the default ``FULL``, which
SQLite needs there to be safe from corruption on power loss.

Reads never write: a job whose supervisor died without recording its end reads as
FAILED, and ``settle`` records that, as a step of its own (a thread of the server, a
command of the CLI), so that no request waits for the write lock.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import re
import secrets
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..identity import Identity, os_user
from ..job_dir import AttemptDir, JobDir
from ..notify.outbox import SCHEMA as OUTBOX_SCHEMA
from ..notify.outbox import Outbox
from ..notify.targets import Target
from ..notify.targets import from_json as target_from_json
from ..paths import air_home, make_private, on_network_filesystem, private_dir, tighten
from ..procs import alive
from ..status import ACTIVE, AttemptStatus, JobStatus
from .permissions import Grant, JobAccess, Level, OwnerOnly, Principal, check_change, merged
from .spec import JobSpec

JOB_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")  # what new_job_id() makes
#: The SQL list of the active states.
ACTIVE_SQL = "(" + ", ".join(f"'{s}'" for s in sorted(ACTIVE)) + ")"

log = logging.getLogger(__name__)

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
CREATE TABLE IF NOT EXISTS grants (
    job_id TEXT NOT NULL REFERENCES jobs(id),
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    level TEXT NOT NULL,
    PRIMARY KEY (job_id, kind, name)
);
CREATE INDEX IF NOT EXISTS grants_by_principal ON grants (kind, name, job_id);
CREATE TABLE IF NOT EXISTS job_targets (
    job_id TEXT NOT NULL REFERENCES jobs(id),
    position INTEGER NOT NULL,
    target TEXT NOT NULL,
    added REAL NOT NULL,
    PRIMARY KEY (job_id, position)
);
"""


@dataclass(frozen=True)
class Attempt:
    job_id: str
    attempt: int
    status: AttemptStatus
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
    status: JobStatus
    spec: JobSpec
    supervisor_pid: int | None
    supervisor_host: str | None
    started: float | None
    ended: float | None
    message: str | None
    #: The MLflow experiment's id: the spec's, or the one its supervisor made for a job
    #: submitted with the experiment's name only.
    experiment_id: str | None = None
    #: The job whose process submitted this one (a scheduled notebook's task for the
    #: notebook's cells), if it is the same owner's.
    parent_id: str | None = None
    #: Read as failed: active in the database, but its supervisor died unrecorded.
    supervisor_gone: bool = False

    @property
    def done(self) -> bool:
        return not self.status.active

    @property
    def supervised_here(self) -> bool:
        """Whether the supervisor's pid means something on this machine (a store on a
        shared disk may hold jobs of several machines)."""
        return self.supervisor_host in (None, socket.gethostname())


class UnknownJob(KeyError):
    """No job has this id."""


class JobEnded(RuntimeError):
    """The job already ended: what was asked applies to a job that runs."""


class StoreError(RuntimeError):
    """The database cannot be used safely where it is."""


class JobStore:
    """Jobs and attempts; every method is one short transaction.

    ``busy_timeout`` is how long a call waits for another process's write lock:
    writers (supervisors) wait long rather than fail; a server answering requests
    gives up sooner (``sqlite3.OperationalError``, "database is locked").
    """

    def __init__(self, home: Path | None = None, *, busy_timeout: float = 30.0) -> None:
        self.home = air_home() if home is None else private_dir(home)
        self.path = self.home / "jobs.db"
        self.busy_timeout = busy_timeout
        self.wal = False  # known after the journal mode is settled below
        new = not self.path.exists() or self.path.stat().st_size == 0
        make_private(self.path)  # SQLite gives its -wal and -shm files the same mode
        for sidecar in ("jobs.db-wal", "jobs.db-shm", "jobs.db-journal"):
            tighten(self.home / sidecar)
        with self._connect() as db:
            self.wal = self._journal_mode(db, new) == "wal"
            db.executescript(SCHEMA)  # also adds the grants table to an earlier store
            db.executescript(OUTBOX_SCHEMA)
            _migrate(db)
        # Held open, unused, for the store's life in WAL mode. When the last connection to
        # a WAL database closes, SQLite checkpoints (syncing, even with NORMAL) and deletes
        # the WAL, and the next open re-creates it: with a connection per call and no other
        # open, every call paid that (about 5 ms on a quiet disk, against 0.1 ms). With this
        # one open, no call's close is the last; the WAL is checkpointed as it fills.
        self._keeper: weakref.finalize[[], JobStore] | None = None
        if self.wal:
            keeper = sqlite3.connect(self.path, check_same_thread=False)
            keeper.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the file
            self._keeper = weakref.finalize(self, keeper.close)

    def close(self) -> None:
        """Let go of the idle connection now rather than when the store is dropped; calls
        still work (each with a connection of its own, which may then be the last)."""
        if self._keeper is not None:
            self._keeper()

    def _journal_mode(self, db: sqlite3.Connection, new: bool) -> str:
        """WAL for a new database on a local disk; the rollback journal on a network file
        system, where a WAL database (made by an earlier version) is switched. A
        database in rollback mode stays so: another machine may reach it over the network.
        The mode the database is in, after this."""
        network = on_network_filesystem(self.home)
        mode = str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        if network is None:
            if new:
                mode = str(db.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
            return mode
        if mode != "wal":
            return mode
        try:
            mode = db.execute("PRAGMA journal_mode=DELETE").fetchone()[0].lower()
        except sqlite3.OperationalError as err:
            mode = str(err)
        if mode != "delete":
            raise StoreError(
                f"{self.path} is on a network file system ({network}) in WAL mode, which "
                f"corrupts it there, and could not be switched to a rollback journal "
                f"({mode}): stop every process using it (Jupyter servers, kernels, air "
                f"commands, on every machine) and try again"
            )
        log.warning("%s is on %s: switched from WAL to a rollback journal", self.path, network)
        return mode

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        try:
            db.row_factory = sqlite3.Row
            if self.wal:
                db.execute("PRAGMA synchronous=NORMAL")  # per connection; see the docstring
            yield db
        finally:
            db.close()

    def connect(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """A connection to this store's database, for modules that keep tables of their
        own in it (schedules): the same file, modes, journal and lock waits."""
        return self._connect()

    @property
    def outbox(self) -> Outbox:
        """The notifications sent (or to send) of this store's jobs and schedules."""
        return Outbox(self.path, self.busy_timeout)

    def job_dir(self, job_id: str) -> Path:
        if not JOB_ID.fullmatch(job_id):
            raise UnknownJob(job_id)
        return JobDir.under(self.home, job_id).path

    def attempt_dir(self, job_id: str, attempt: int) -> Path:
        return JobDir(self.job_dir(job_id)).attempt(attempt).path

    # -- jobs ------------------------------------------------------------------------

    def create(
        self,
        spec: JobSpec,
        job_id: str | None = None,
        *,
        owner: str | None = None,
        grants: tuple[Grant, ...] = (),
        parent_id: str | None = None,
    ) -> Job:
        """Record a new job, owned by ``owner`` (default: the OS user), with its grants,
        as a child of ``parent_id`` if that is a job of the same owner: a parent comes
        from the submitting process's environment, which anyone can set, so a job
        never appears under someone else's. A child has its parent's grants too: who
        may view a scheduled notebook's task may view the jobs of its cells."""
        job_id = job_id or new_job_id()
        owner = owner or os_user()
        check_change(owner, grants, ())
        now = time.time()
        self.job_dir(job_id).mkdir(mode=0o700, parents=True)
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            if parent_id is not None:
                row = db.execute("SELECT owner FROM jobs WHERE id = ?", (parent_id,)).fetchone()
                parent_id = parent_id if row is not None and row["owner"] == owner else None
            if parent_id is not None:
                grants = merged([*_access(db, parent_id).grants, *grants])
            db.execute(
                "INSERT INTO jobs (id, created, owner, status, workload, experiment_id, "
                "parent_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    job_id,
                    now,
                    owner,
                    JobStatus.PENDING,
                    spec.to_json(),
                    spec.tracking.experiment_id,
                    parent_id,
                ),
            )
            _put_grants(db, job_id, grants)
            db.execute("COMMIT")
        return self.get(job_id)

    def get(self, job_id: str) -> Job:
        with self._connect() as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise UnknownJob(job_id)
        return _seen(_job(row))

    def jobs(
        self,
        active_only: bool = False,
        limit: int | None = None,
        visible_to: Identity | None = None,
    ) -> list[Job]:
        """Newest first; with ``visible_to``, only the jobs that identity may view (it
        owns them or holds a grant, itself or through a group), chosen in SQL. Active
        jobs whose supervisor died are not active: read past them to fill ``limit``."""
        where: list[str] = []
        params: list[str] = []
        if active_only:
            where.append(f"status IN {ACTIVE_SQL}")
        if visible_to is not None:
            sql, params = _visible(visible_to)
            where.append(sql)
        query = "SELECT * FROM jobs"
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY created DESC"
        if limit is None:
            with self._connect() as db:
                rows = db.execute(query, params).fetchall()
            found = [_seen(_job(row)) for row in rows]
            return [job for job in found if not (active_only and job.done)]
        found = []
        with self._connect() as db:
            for offset in itertools.count(0, int(limit)):
                rows = db.execute(f"{query} LIMIT {int(limit)} OFFSET {offset}", params).fetchall()
                jobs = [_seen(_job(row)) for row in rows]
                found += [job for job in jobs if not (active_only and job.done)]
                if len(rows) < limit or len(found) >= limit:
                    return found[:limit]
        raise AssertionError("unreachable")

    def count(self, visible_to: Identity | None = None) -> int:
        """How many jobs there are (that ``visible_to`` may view), whatever their state."""
        sql, params = _visible(visible_to) if visible_to is not None else ("1", [])
        with self._connect() as db:
            return int(db.execute(f"SELECT count(*) FROM jobs WHERE {sql}", params).fetchone()[0])

    def visible_ids(self, who: Identity, ids: set[str]) -> set[str]:
        """Which of these jobs ``who`` may view (unknown ids are not)."""
        if not ids:
            return set()
        sql, params = _visible(who)
        marks = ", ".join("?" * len(ids))
        with self._connect() as db:
            rows = db.execute(
                f"SELECT id FROM jobs WHERE id IN ({marks}) AND {sql}", [*ids, *params]
            ).fetchall()
        return {row["id"] for row in rows}

    def access(self, job_id: str) -> JobAccess:
        """The job's owner and grants."""
        with self._connect() as db:
            return _access(db, job_id)

    def experiment_levels(
        self, tracking_uri: str, experiment_id: str, principals: set[Principal]
    ) -> dict[Principal, Level]:
        """The highest level each principal holds on any job tracked in this experiment
        (absent: none). MLflow keeps one permission per user and experiment, and many
        jobs share an experiment, so this is what the experiment should give them."""
        if not principals:
            return {}
        with self._connect() as db:
            rows = db.execute(
                "SELECT g.kind, g.name, g.level FROM grants g JOIN jobs j ON j.id = g.job_id "
                "WHERE json_extract(j.workload, '$.tracking.tracking_uri') = ? "
                "AND j.experiment_id = ?",
                (tracking_uri, experiment_id),
            ).fetchall()
        levels: dict[Principal, Level] = {}
        for row in rows:
            principal, level = Principal(row["kind"], row["name"]), Level[row["level"]]
            if principal in principals and level > levels.get(principal, 0):
                levels[principal] = level
        return levels

    def change_access(
        self,
        job_id: str,
        who: Identity,
        grants: tuple[Grant, ...] = (),
        revoke: tuple[Principal, ...] = (),
    ) -> JobAccess:
        """Grant (replacing a principal's level) and revoke, if ``who`` holds CAN_MANAGE:
        the check and the change are one transaction, so a concurrent revoke of ``who``'s
        own grant cannot slip between them."""
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                before = _access(db, job_id)
                before.require(who, Level.CAN_MANAGE)
                check_change(before.owner, grants, revoke)
                for p in revoke:
                    db.execute(
                        "DELETE FROM grants WHERE job_id = ? AND kind = ? AND name = ?",
                        (job_id, p.kind, p.name),
                    )
                _put_grants(db, job_id, grants)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            after = _access(db, job_id)
            db.execute("COMMIT")
        return after

    def settle(self) -> list[str]:
        """Record as FAILED the jobs that read so (``orphaned``); the ids recorded.

        Reads already show them failed; the record makes it last: the end time stays,
        a pid reused later is not taken for the supervisor, and other machines sharing
        the store see it. Only a still-active row is changed, so a supervisor that did
        record its end in the meantime keeps its word.
        """
        with self._connect() as db:
            rows = db.execute(f"SELECT * FROM jobs WHERE status IN {ACTIVE_SQL}").fetchall()
        found = [(job.id, message) for job in map(_job, rows) if (message := orphaned(job))]
        if not found:
            return []
        now = time.time()
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            for job_id, message in found:
                db.execute(
                    f"UPDATE jobs SET status = ?, ended = ?, message = ? "
                    f"WHERE id = ? AND status IN {ACTIVE_SQL}",
                    (JobStatus.FAILED, now, message, job_id),
                )
                db.execute(
                    "UPDATE attempts SET status = ?, ended = ?, message = ? "
                    "WHERE job_id = ? AND status = ?",
                    (AttemptStatus.FAILED, now, message, job_id, AttemptStatus.RUNNING),
                )
            db.execute("COMMIT")
        ids = [job_id for job_id, _ in found]
        from .notices import post_settled  # the notices read the store: imported late

        post_settled(self, ids)
        return ids

    def update(self, job_id: str, **fields: Any) -> None:
        """Change a job's state fields (a status is a ``JobStatus``)."""
        if "status" in fields:
            fields["status"] = JobStatus(fields["status"])
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

    def targets(self, job_id: str) -> tuple[Target, ...]:
        """Whom the job tells: its spec's targets, then those its owner added since."""
        with self._connect() as db:
            row = db.execute("SELECT workload FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise UnknownJob(job_id)
            added = db.execute(
                "SELECT target FROM job_targets WHERE job_id = ? ORDER BY position", (job_id,)
            ).fetchall()
        spec = JobSpec.from_json(row["workload"])
        return spec.notify + tuple(target_from_json(json.loads(r["target"])) for r in added)

    def add_targets(self, job_id: str, who: Identity, targets: tuple[Target, ...]) -> None:
        """Add targets to a job that runs, if ``who`` owns it: a grant shows a job, it does
        not send the job's lines where the grantee chooses."""
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(
                    "SELECT owner, status, workload FROM jobs WHERE id = ?", (job_id,)
                ).fetchone()
                if row is None:
                    raise UnknownJob(job_id)
                if row["owner"] != who.name:
                    raise OwnerOnly(job_id, row["owner"], "add a notification to it")
                if not JobStatus(row["status"]).active:
                    raise JobEnded(f"job {job_id} already ended ({row['status'].lower()})")
                first = len(JobSpec.from_json(row["workload"]).notify) + int(
                    db.execute(
                        "SELECT count(*) FROM job_targets WHERE job_id = ?", (job_id,)
                    ).fetchone()[0]
                )
                now = time.time()
                db.executemany(
                    "INSERT INTO job_targets (job_id, position, target, added) VALUES (?, ?, ?, ?)",
                    [
                        (job_id, first + i, json.dumps(t.to_json()), now)
                        for i, t in enumerate(targets)
                    ],
                )
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def set_experiment(self, job_id: str, experiment_id: str) -> None:
        """The MLflow experiment a job submitted by name only was given (by its supervisor);
        the spec stays as submitted."""
        with self._connect() as db:
            db.execute("UPDATE jobs SET experiment_id = ? WHERE id = ?", (experiment_id, job_id))

    # -- attempts --------------------------------------------------------------------

    def start_attempt(self, job_id: str, attempt: int, run_id: str | None) -> None:
        with self._connect() as db:
            db.execute(
                "INSERT INTO attempts (job_id, attempt, status, run_id, started) "
                "VALUES (?, ?, ?, ?, ?)",
                (job_id, attempt, AttemptStatus.RUNNING, run_id, time.time()),
            )

    def set_attempt_run(self, job_id: str, attempt: int, run_id: str) -> None:
        """The run of an attempt that started without one (``tracking: deferred`` while
        its server did not answer), made once it did."""
        with self._connect() as db:
            db.execute(
                "UPDATE attempts SET run_id = ? "
                "WHERE job_id = ? AND attempt = ? AND run_id IS NULL",
                (run_id, job_id, attempt),
            )

    def end_attempt(
        self,
        job_id: str,
        attempt: int,
        status: AttemptStatus,
        exit_codes: list[int | None],
        failed_rank: int | None = None,
        message: str | None = None,
    ) -> None:
        with self._connect() as db:
            db.execute(
                "UPDATE attempts SET status = ?, ended = ?, exit_codes = ?, failed_rank = ?, "
                "message = ? WHERE job_id = ? AND attempt = ?",
                (
                    AttemptStatus(status),
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
            job = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
            rows = db.execute(
                "SELECT * FROM attempts WHERE job_id = ? ORDER BY attempt", (job_id,)
            ).fetchall()
        attempts = _attempts(rows, orphaned(_job(job)) if job is not None else None)
        return self._with_late_runs(job_id, attempts)

    def _with_late_runs(self, job_id: str, attempts: list[Attempt]) -> list[Attempt]:
        """Attempts that ran without a run (``tracking: deferred``) get the one their
        tail process made since, recorded here as they are first read (the tail process
        writes it beside the attempt: it knows nothing of this store)."""
        adopted = []
        for a in attempts:
            made = None
            if a.run_id is None:
                made = AttemptDir(self.attempt_dir(job_id, a.attempt)).read_late_run()
            if made is not None:
                run_id, experiment_id = made
                self.set_attempt_run(job_id, a.attempt, run_id)
                if experiment_id:
                    with self._connect() as db:
                        db.execute(
                            "UPDATE jobs SET experiment_id = ? "
                            "WHERE id = ? AND experiment_id IS NULL",
                            (experiment_id, job_id),
                        )
                a = replace(a, run_id=run_id)
            adopted.append(a)
        return adopted

    def children(self, job_ids: list[str], visible_to: Identity) -> dict[str, list[str]]:
        """The jobs each of these jobs started that ``visible_to`` may view, oldest first,
        in one query (a page of jobs)."""
        found: dict[str, list[str]] = {job_id: [] for job_id in job_ids}
        if not job_ids:
            return found
        sql, params = _visible(visible_to)
        marks = ", ".join("?" * len(job_ids))
        with self._connect() as db:
            rows = db.execute(
                f"SELECT id, parent_id FROM jobs WHERE parent_id IN ({marks}) AND {sql} "
                "ORDER BY created",
                [*job_ids, *params],
            ).fetchall()
        for row in rows:
            found[row["parent_id"]].append(row["id"])
        return found

    def attempts_of(self, jobs: list[Job]) -> dict[str, list[Attempt]]:
        """The attempts of each of these jobs (as read), in one query: a page of jobs."""
        if not jobs:
            return {}
        marks = ", ".join("?" * len(jobs))
        with self._connect() as db:
            rows = db.execute(
                f"SELECT * FROM attempts WHERE job_id IN ({marks}) ORDER BY job_id, attempt",
                [job.id for job in jobs],
            ).fetchall()
        by_job: dict[str, list[sqlite3.Row]] = {job.id: [] for job in jobs}
        for row in rows:
            by_job[row["job_id"]].append(row)
        # A job read as failed (its supervisor gone) has its running attempt failed too.
        return {
            job.id: self._with_late_runs(
                job.id, _attempts(by_job[job.id], job.message if job.supervisor_gone else None)
            )
            for job in jobs
        }


def _attempts(rows: list[sqlite3.Row], orphan_message: str | None) -> list[Attempt]:
    """Attempt rows; a running one failed with ``orphan_message`` (its supervisor gone)."""
    found = [
        Attempt(
            job_id=row["job_id"],
            attempt=row["attempt"],
            status=AttemptStatus(row["status"]),
            run_id=row["run_id"],
            started=row["started"],
            ended=row["ended"],
            exit_codes=json.loads(row["exit_codes"]) if row["exit_codes"] else None,
            failed_rank=row["failed_rank"],
            message=row["message"],
        )
        for row in rows
    ]
    if orphan_message is None:
        return found
    return [
        replace(a, status=AttemptStatus.FAILED, message=orphan_message)
        if a.status is AttemptStatus.RUNNING
        else a
        for a in found
    ]


def settle_periodically(store: JobStore, interval: float, stop: threading.Event) -> None:
    """``store.settle()`` now and every ``interval`` seconds until ``stop`` is set, on a
    thread of its own: a locked database delays this thread, nothing else."""

    def loop() -> None:
        while True:
            try:
                store.settle()
            except sqlite3.Error as err:
                log.warning("could not record the jobs whose supervisor died: %s", err)
            if stop.wait(interval):
                return

    threading.Thread(target=loop, name="air-settle", daemon=True).start()


def orphaned(job: Job) -> str | None:
    """Why an active job failed if its supervisor is gone without recording its end
    (killed outright, out of memory): its ranks went with the supervisor, so it must
    not stay in the lists of running jobs. None while it is not so, or when the
    supervisor runs on another machine (whose pids mean nothing here)."""
    pid = job.supervisor_pid
    if job.done or pid is None or not job.supervised_here:
        return None
    if alive(pid, started_by=job.started):
        return None
    return f"its supervisor (pid {pid}) ended without recording the end"


def _seen(job: Job) -> Job:
    """The job as it is: failed if ``orphaned`` (its end time is unknown until settled)."""
    message = orphaned(job)
    if message is None:
        return job
    return replace(job, status=JobStatus.FAILED, message=message, supervisor_gone=True)


def new_job_id() -> str:
    """Readable, sortable by time, unique: ``20261129-083012-a1b2c3``."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def _job(row: sqlite3.Row) -> Job:
    spec = JobSpec.from_json(row["workload"])
    return Job(
        id=row["id"],
        created=row["created"],
        owner=row["owner"],
        status=JobStatus(row["status"]),
        spec=spec,
        supervisor_pid=row["supervisor_pid"],
        supervisor_host=row["supervisor_host"],
        started=row["started"],
        ended=row["ended"],
        message=row["message"],
        experiment_id=row["experiment_id"] or spec.tracking.experiment_id,
        parent_id=row["parent_id"],
    )


def _migrate(db: sqlite3.Connection) -> None:
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
    db.execute("BEGIN IMMEDIATE")
    for row in flat:
        spec = JobSpec.from_json(row["workload"])
        db.execute(
            "UPDATE jobs SET workload = ?, experiment_id = ? WHERE id = ?",
            (spec.to_json(), spec.tracking.experiment_id, row["id"]),
        )
    db.execute("COMMIT")


def _visible(who: Identity) -> tuple[str, list[str]]:
    """The SQL condition on ``jobs`` (and its parameters) of the jobs ``who`` may view:
    owned, or granted to them or to one of their groups (any level includes CAN_VIEW)."""
    groups = sorted(who.groups)
    sql = (
        "(owner = ? OR id IN (SELECT job_id FROM grants WHERE kind = 'user' AND name = ?"
        " UNION SELECT job_id FROM grants WHERE kind = 'group' AND name IN "
        f"({', '.join('?' * len(groups))})))"
    )
    return sql, [who.name, who.name, *groups]


def _access(db: sqlite3.Connection, job_id: str) -> JobAccess:
    row = db.execute("SELECT owner FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        raise UnknownJob(job_id)
    grants = db.execute(
        "SELECT kind, name, level FROM grants WHERE job_id = ? ORDER BY kind DESC, name",
        (job_id,),
    ).fetchall()
    return JobAccess(
        job_id,
        row["owner"],
        tuple(Grant(Principal(g["kind"], g["name"]), Level[g["level"]]) for g in grants),
    )


def _put_grants(db: sqlite3.Connection, job_id: str, grants: tuple[Grant, ...]) -> None:
    db.executemany(
        "INSERT OR REPLACE INTO grants (job_id, kind, name, level) VALUES (?, ?, ?, ?)",
        [(job_id, g.principal.kind, g.principal.name, g.level.name) for g in grants],
    )
