"""Recording the end of jobs whose supervisor died without recording it.

Reads already show such a job failed (``records.seen``); this writes it, as a step of
its own, so that no read waits for the write lock.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from typing import TYPE_CHECKING, cast

from ...status import AttemptStatus, JobStatus
from .records import ACTIVE_SQL, job_of, orphaned
from .tables import Tables

if TYPE_CHECKING:
    from . import JobStore

log = logging.getLogger(__name__)


class Settling(Tables):
    """The job store's part that records what reads show of orphaned jobs."""

    def settle(self) -> list[str]:
        """Record as FAILED the jobs that read so (``orphaned``); the ids recorded.

        Reads already show them failed; the record makes it last: the end time stays,
        a pid reused later is not taken for the supervisor, and other machines sharing
        the store see it. Only a still-active row is changed, so a supervisor that did
        record its end in the meantime keeps its word.
        """
        with self._connect() as db:
            rows = db.execute(f"SELECT * FROM jobs WHERE status IN {ACTIVE_SQL}").fetchall()
        found = [(job.id, message) for job in map(job_of, rows) if (message := orphaned(job))]
        if not found:
            return []
        now = time.time()
        with self._write() as db:
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
        ids = [job_id for job_id, _ in found]
        from ..notices import post_settled  # the notices read the store: imported late

        post_settled(cast("JobStore", self), ids)  # this is a part of a JobStore
        return ids


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
