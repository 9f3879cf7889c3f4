"""The job store's rows of jobs: recorded, read (as ``seen``), listed, changed."""

from __future__ import annotations

import itertools
import time
from typing import Any

from ...identity import Identity, os_user
from ...status import JobStatus
from ..permissions import Grant, check_change, merged
from ..spec import JobSpec
from .grants import JOB_GRANTS, job_access
from .records import ACTIVE_SQL, Job, UnknownJob, job_of, new_job_id, seen
from .tables import Tables

#: The fields of a job that change as it runs (``update``).
STATE_FIELDS = frozenset(
    {"status", "supervisor_pid", "supervisor_host", "started", "ended", "message"}
)


class JobRows(Tables):
    """The job store's part that holds the jobs themselves."""

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
        with self._write() as db:
            if parent_id is not None:
                row = db.execute("SELECT owner FROM jobs WHERE id = ?", (parent_id,)).fetchone()
                parent_id = parent_id if row is not None and row["owner"] == owner else None
            if parent_id is not None:
                grants = merged([*job_access(db, parent_id).grants, *grants])
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
            JOB_GRANTS.put(db, job_id, grants)
        return self.get(job_id)

    def get(self, job_id: str) -> Job:
        with self._connect() as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise UnknownJob(job_id)
        return seen(job_of(row))

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
            sql, params = JOB_GRANTS.visible(visible_to)
            where.append(sql)
        query = "SELECT * FROM jobs"
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY created DESC"
        if limit is None:
            with self._connect() as db:
                rows = db.execute(query, params).fetchall()
            found = [seen(job_of(row)) for row in rows]
            return [job for job in found if not (active_only and job.done)]
        found = []
        with self._connect() as db:
            for offset in itertools.count(0, int(limit)):
                rows = db.execute(f"{query} LIMIT {int(limit)} OFFSET {offset}", params).fetchall()
                jobs = [seen(job_of(row)) for row in rows]
                found += [job for job in jobs if not (active_only and job.done)]
                if len(rows) < limit or len(found) >= limit:
                    return found[:limit]
        raise AssertionError("unreachable")

    def count(self, visible_to: Identity | None = None) -> int:
        """How many jobs there are (that ``visible_to`` may view), whatever their state."""
        sql, params = JOB_GRANTS.visible(visible_to) if visible_to is not None else ("1", [])
        with self._connect() as db:
            return int(db.execute(f"SELECT count(*) FROM jobs WHERE {sql}", params).fetchone()[0])

    def visible_ids(self, who: Identity, ids: set[str]) -> set[str]:
        """Which of these jobs ``who`` may view (unknown ids are not)."""
        if not ids:
            return set()
        sql, params = JOB_GRANTS.visible(who)
        marks = ", ".join("?" * len(ids))
        with self._connect() as db:
            rows = db.execute(
                f"SELECT id FROM jobs WHERE id IN ({marks}) AND {sql}", [*ids, *params]
            ).fetchall()
        return {row["id"] for row in rows}

    def children(self, job_ids: list[str], visible_to: Identity) -> dict[str, list[str]]:
        """The jobs each of these jobs started that ``visible_to`` may view, oldest first,
        in one query (a page of jobs)."""
        found: dict[str, list[str]] = {job_id: [] for job_id in job_ids}
        if not job_ids:
            return found
        sql, params = JOB_GRANTS.visible(visible_to)
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

    def update(self, job_id: str, **fields: Any) -> None:
        """Change a job's state fields (a status is a ``JobStatus``)."""
        if "status" in fields:
            fields["status"] = JobStatus(fields["status"])
        if not fields or not set(fields) <= STATE_FIELDS:
            raise ValueError(f"cannot update job fields {sorted(fields)}")
        columns = ", ".join(f"{name} = ?" for name in fields)
        with self._connect() as db:
            db.execute(f"UPDATE jobs SET {columns} WHERE id = ?", (*fields.values(), job_id))

    def set_experiment(self, job_id: str, experiment_id: str) -> None:
        """The MLflow experiment a job submitted by name only was given (by its supervisor);
        the spec stays as submitted."""
        with self._connect() as db:
            db.execute("UPDATE jobs SET experiment_id = ? WHERE id = ?", (experiment_id, job_id))
