"""Log retention: the logs of jobs that ended more than N days ago are removed.

The job record stays (``air get`` says its logs expired). Pruning runs when a Jupyter
server starts and when a job's supervisor starts, on a thread of its own, so it never
holds up a submission.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import threading
import time

from .store import JobStore

log = logging.getLogger(__name__)

DEFAULT_DAYS = 60.0


def retention_days() -> float:
    """``$AIR_LOG_RETENTION_DAYS`` (default 60): the setting for kernels and the CLI.

    A value that is not a number of days >= 0 keeps every log (infinity), with a warning:
    it is read where a job starts, which a housekeeping setting must not fail, and when
    what was meant cannot be told (``-1`` often means "forever") deleting nothing is
    the one choice that cannot lose logs."""
    raw = os.environ.get("AIR_LOG_RETENTION_DAYS")
    if not raw:
        return DEFAULT_DAYS
    try:
        return check_days(float(raw))
    except ValueError:
        log.warning(
            "AIR_LOG_RETENTION_DAYS=%r is not a number of days >= 0: keeping every log", raw
        )
        return math.inf


def check_days(days: float) -> float:
    """``days`` if it is a retention (a number >= 0, infinity: keep all); else ValueError."""
    if not days >= 0:  # NaN too
        raise ValueError(f"log retention must be a number of days >= 0, got {days}")
    return days


def prune(store: JobStore, days: float, now: float | None = None) -> list[str]:
    """Remove the logs of jobs that ended before ``now - days``; the ids pruned."""
    cutoff = (time.time() if now is None else now) - check_days(days) * 86400
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
