"""Following a job's logs as they grow: the one follower of a notebook cell,
``air logs --follow`` and ``air run --watch``.

It reads with the logs view's own reader (``logs.query.read_page``, a cursor of byte
offsets), a whole read of every rank log at a time, until everything written so far is
read, and only then waits: a chatty job never leaves it behind. A job's attempts are
followed in turn, each one read to its end before the next begins. Following ends
with the job's outcome (``outcome``), not with what its supervisor does after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from ..logs.query import LogFilter, LogLine, read_page
from .outcome import Outcome
from .store import Attempt, JobStore

#: Seconds between two looks at a job that wrote nothing new.
POLL = 0.1


class LogFollower:
    """The lines of a job's logs not read yet, from attempt ``attempt`` on (or only
    that attempt, without ``retries``), from ``cursor`` (a page's) or the start."""

    def __init__(
        self,
        store: JobStore,
        job_id: str,
        flt: LogFilter | None = None,
        attempt: int = 1,
        *,
        retries: bool = True,
        cursor: str | None = None,
    ) -> None:
        self._store, self._job_id = store, job_id
        self._flt = flt or LogFilter()
        self._retries = retries
        self._cursor = cursor
        #: The attempt the next ``poll`` reads.
        self.attempt = attempt

    def poll(self) -> list[LogLine]:
        """Every line of the current attempt complete now, in time order across ranks.
        Once a later attempt exists and this one is read out, the next poll reads it."""
        directory = self._store.attempt_dir(self._job_id, self.attempt)
        lines: list[LogLine] = []
        while True:
            page = read_page(directory, self._flt, self._cursor, limit=None)
            lines += page.lines
            moved = page.cursor != self._cursor
            self._cursor = page.cursor
            if page.at_end or not moved:  # everything, or only a record being written
                break
        if page.at_end and self._retries and self._later_attempt():
            self.attempt += 1
            self._cursor = None
        return lines

    def _later_attempt(self) -> bool:
        return len(self._store.attempts(self._job_id)) > self.attempt

    def follow(
        self, stop: Callable[[], bool] = lambda: False, interval: float = POLL
    ) -> Iterator[tuple[int, list[LogLine]]]:
        """(attempt, lines) as they come, until the job ended and its logs are read (or
        ``stop()``); it waits only when nothing new was there."""
        while not stop():
            # Asked before reading: no line written before the end is missed.
            ended = outcome(self._store, self._job_id) is not None
            attempt = self.attempt
            lines = self.poll()
            if lines:
                yield attempt, lines
            if self.attempt != attempt:
                continue  # a retry began: read it at once
            if ended and not lines:
                return
            if not lines:
                time.sleep(interval)


def outcome(store: JobStore, job_id: str) -> tuple[str, str | None] | None:
    """The job's status and message once its outcome is known, else None.

    That is the job's recorded end, or before it its last attempt's: a job nobody's
    kernel follows (``air run``, a schedule's) is recorded as ended only once its run's
    MLflow tail is done too, which changes nothing of the outcome and must not keep
    ``--watch`` waiting. An attempt is the last when it did not fail, or used the last
    retry; a failure the supervisor chose not to retry is known at the job's end.
    """
    job = store.get(job_id)
    if job.done:
        return job.status, job.message
    attempts = store.attempts(job_id)
    if attempts and _last(attempts[-1], job.workload.max_retries):
        return attempts[-1].status, attempts[-1].message
    return None


def _last(attempt: Attempt, max_retries: int) -> bool:
    if attempt.ended is None:
        return False
    return attempt.status != Outcome.FAILED or attempt.attempt > max_retries
