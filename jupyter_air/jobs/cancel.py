"""Cancelling a job: the kernel, ``air cancel`` and the server ask its supervisor to stop
every rank, then may wait for the job's end."""

from __future__ import annotations

import os
import signal
import time

from .store import Job, JobStore


class Elsewhere(RuntimeError):
    """The job's supervisor runs on another machine sharing this job store."""


def cancel(store: JobStore, job_id: str) -> bool:
    """Ask the job's supervisor to stop every rank. False if it already ended."""
    job = store.get(job_id)
    if job.done or job.supervisor_pid is None:
        return False
    if not job.supervised_here:
        raise Elsewhere(f"job {job_id} is supervised on {job.supervisor_host}: cancel it there")
    try:
        os.kill(job.supervisor_pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    return True


def wait(store: JobStore, job_id: str, timeout: float) -> Job:
    """The job once it ended, or as it is after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    job = store.get(job_id)
    while not job.done and time.monotonic() < deadline:
        time.sleep(0.05)
        job = store.get(job_id)
    return job
