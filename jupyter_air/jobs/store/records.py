"""A job as the store gives it back, and how a read sees one whose supervisor is gone.

Reads never write: a job whose supervisor died without recording its end reads as
FAILED here, and ``JobStore.settle`` records that, as a step of its own (a thread of
the server, a command of the CLI), so that no request waits for the write lock.
"""

from __future__ import annotations

import re
import secrets
import socket
import sqlite3
import time
from dataclasses import dataclass, replace

from ...procs import alive
from ...status import ACTIVE, JobStatus
from ..spec import JobSpec

JOB_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")  # what new_job_id() makes
#: The SQL list of the active states.
ACTIVE_SQL = "(" + ", ".join(f"'{s}'" for s in sorted(ACTIVE)) + ")"


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


def new_job_id() -> str:
    """Readable, sortable by time, unique: ``20261129-083012-a1b2c3``."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def job_of(row: sqlite3.Row) -> Job:
    """A row of ``jobs`` as it is recorded."""
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


def seen(job: Job) -> Job:
    """The job as it is: failed if ``orphaned`` (its end time is unknown until settled)."""
    message = orphaned(job)
    if message is None:
        return job
    return replace(job, status=JobStatus.FAILED, message=message, supervisor_gone=True)
