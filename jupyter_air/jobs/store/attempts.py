"""The job store's rows of attempts: each try of a job, its MLflow run and how it ended."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, replace

from ...job_dir import AttemptDir
from ...status import AttemptStatus
from .records import Job, job_of, orphaned
from .tables import Tables


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


class AttemptRows(Tables):
    """The job store's part that holds the jobs' attempts."""

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
        attempts = _attempts(rows, orphaned(job_of(job)) if job is not None else None)
        return self._with_late_runs(job_id, attempts)

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
