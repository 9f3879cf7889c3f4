"""Log retention: the logs of jobs that ended more than N days ago are removed.

The job record stays (``air get`` says its logs expired). Pruning runs when a Jupyter
server starts and when a job's supervisor starts, on a thread of its own, so it never
holds up a submission.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time

from ..jobs.store import JobStore

log = logging.getLogger(__name__)

DEFAULT_DAYS = 60.0


def retention_days() -> float:
    """``$AIR_LOG_RETENTION_DAYS`` (default 60): the setting for kernels and the CLI."""
    raw = os.environ.get("AIR_LOG_RETENTION_DAYS")
    try:
        return float(raw) if raw else DEFAULT_DAYS
    except ValueError:
        log.warning("AIR_LOG_RETENTION_DAYS=%r is not a number: keeping %g days", raw, DEFAULT_DAYS)
        return DEFAULT_DAYS


def prune(store: JobStore, days: float, now: float | None = None) -> list[str]:
    """Remove the logs of jobs that ended before ``now - days``; the ids pruned."""
    cutoff = (time.time() if now is None else now) - days * 86400
    pruned = []
    for job in store.jobs():
        if job.done and job.ended is not None and job.ended < cutoff:
            directory = store.job_dir(job.id)
            if directory.exists():
                shutil.rmtree(directory, ignore_errors=True)
                pruned.append(job.id)
    if pruned:
        log.info("removed the logs of %d job(s) older than %g days", len(pruned), days)
    return pruned


def prune_in_background(store: JobStore, days: float) -> threading.Thread:
    thread = threading.Thread(
        target=_prune_quietly, args=(store, days), name="air-log-retention", daemon=True
    )
    thread.start()
    return thread


def _prune_quietly(store: JobStore, days: float) -> None:
    try:
        prune(store, days)
    except Exception:  # retention must never take anything else down
        log.exception("log retention failed")
