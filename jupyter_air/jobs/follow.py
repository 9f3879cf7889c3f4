"""Following a job's logs as they grow: the one follower of a notebook cell,
``air logs --follow`` and ``air run --watch``.

It reads with the logs view's own reader (``logs.query.read_page``, a cursor of byte
offsets; ``read_text_page`` for a terminal: the same lines as text), a whole read of
every rank log at a time, until everything written so far is read, and only then
waits: a chatty job never leaves it behind. A job's attempts are followed in turn, each
one read to its end before the next begins. Following ends with the job's outcome
(``outcome``), not with what its supervisor does after it.

While a job writes nothing, its follower asks the job store (for a later attempt, the
outcome) only when something was committed to it since its last look (SQLite's
``data_version``, a few microseconds), and at least every ``LOOK_EVERY`` seconds (a
supervisor killed outright writes nothing): a look reads the job's row and attempts
and asks whether its supervisor lives, which at every ``POLL`` cost ``air run --watch``
about 1.3 CPU seconds per minute of a quiet job, taken from its ranks; a cell's
``poll`` asked for a later attempt at each of its own.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from ..logs.query import (
    AnyPage,
    LogFilter,
    LogLine,
    Page,
    TextPage,
    read_page,
    read_text_page,
)
from ..status import AttemptStatus
from .store import Attempt, Job, JobStore

#: Seconds between two looks at a job that wrote nothing new.
POLL = 0.1
#: Seconds at most between two asks of the job store while nothing is committed to it.
LOOK_EVERY = 1.0

#: What a poll gives: lines, or their text.
_New = TypeVar("_New", list[LogLine], str)


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
        #: ``follow`` saw a later attempt: the next read that reaches this one's end
        #: moves on to it.
        self._later_seen = False
        self._changes = StoreChanges(store.path)

    def poll(self) -> list[LogLine]:
        """Every line of the current attempt complete now, in time order across ranks.
        Once a later attempt exists and this one is read out, the next poll reads it."""
        return _lines(self._read(read_page))

    def poll_text(self) -> str:
        """``poll``'s lines as a terminal shows them (``logs.text.format_line`` of each),
        made from the records without a ``LogLine`` each: what ``air logs --follow``
        and ``air run --watch`` print."""
        return _text(self._read(read_text_page))

    def _read(
        self,
        read: Callable[[Path, LogFilter, str | None, int | None], AnyPage],
        *,
        eager: bool = True,
    ) -> list[AnyPage]:
        """The pages of the current attempt up to what is complete now; then on to the
        next attempt, if there is one and this one is read out. Not ``eager`` (``follow``):
        the store is not asked here; the next attempt is taken once ``follow`` has seen
        it exist before this read began."""
        directory = self._store.attempt_dir(self._job_id, self.attempt)
        pages: list[AnyPage] = []
        while True:
            page = read(directory, self._flt, self._cursor, None)
            pages.append(page)
            moved = page.cursor != self._cursor
            self._cursor = page.cursor
            if page.at_end or not moved:  # everything, or only a record being written
                break
        read_out = page.at_end and self._retries
        if read_out and (self._later_seen or (eager and self._later_attempt_now())):
            self.attempt += 1
            self._cursor = None
            self._later_seen = False
        return pages

    def _later_attempt_now(self) -> bool:
        """Whether a later attempt exists, asked of the store only if it may have changed
        (a kernel polls a quiet job ten times a second)."""
        if not self._changes.since_last_look():
            return False
        return len(self._store.attempts(self._job_id)) > self.attempt

    def follow(
        self, stop: Callable[[], bool] = lambda: False, interval: float = POLL
    ) -> Iterator[tuple[int, list[LogLine]]]:
        """(attempt, lines) as they come, until the job ended and its logs are read (or
        ``stop()``); it waits only when nothing new was there."""
        return self._follow(lambda: _lines(self._read(read_page, eager=False)), stop, interval)

    def follow_text(
        self, stop: Callable[[], bool] = lambda: False, interval: float = POLL
    ) -> Iterator[tuple[int, str]]:
        """``follow`` with the lines as text (``poll_text``)."""
        return self._follow(lambda: _text(self._read(read_text_page, eager=False)), stop, interval)

    def _follow(
        self, poll: Callable[[], _New], stop: Callable[[], bool], interval: float
    ) -> Iterator[tuple[int, _New]]:
        ended = False
        changes = self._changes
        while not stop():
            attempt = self.attempt
            new = poll()
            if new:
                yield attempt, new
            if new or self.attempt != attempt:
                continue  # more may be there, or a retry began: read on at once
            if ended:
                return  # nothing new since the outcome was known
            if not changes.since_last_look():
                time.sleep(interval)
                continue
            # The store is asked only when a read gave nothing (a chatty job is read
            # without a look at it), and before the next read: no line written before a
            # retry began or the outcome was known is missed.
            attempts = self._store.attempts(self._job_id)
            if self._retries and len(attempts) > self.attempt and not self._later_seen:
                self._later_seen = True
                changes.look_again()  # after that read, the outcome is asked at once
                continue  # read this attempt to its end once more, then the next one
            ended = _outcome(self._store.get(self._job_id), attempts) is not None
            if not ended:
                time.sleep(interval)


class StoreChanges:
    """Whether the job store may hold news for a follower: something was committed to
    it since the last look, or that look is ``LOOK_EVERY`` seconds old. A connection of
    its own, opened at the first ask, held for the follower's life (SQLite's
    ``data_version`` counts the commits of every other connection)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._db: sqlite3.Connection | None = None
        self._version: int | None = None
        self._looked = 0.0

    def since_last_look(self) -> bool:
        """True (and the look is then counted as made) when the caller should look."""
        if self._db is None:
            self._db = sqlite3.connect(self._path, isolation_level=None)
        version = int(self._db.execute("PRAGMA data_version").fetchone()[0])
        now = time.monotonic()
        if version == self._version and now - self._looked < LOOK_EVERY:
            return False
        self._version, self._looked = version, now  # read before the look: none is missed
        return True

    def look_again(self) -> None:
        """The next ask says to look, whatever was committed."""
        self._version = None


def _lines(pages: list[Page]) -> list[LogLine]:
    return [line for page in pages for line in page.lines]


def _text(pages: list[TextPage]) -> str:
    return "".join(page.text for page in pages)


def outcome(store: JobStore, job_id: str) -> tuple[str, str | None] | None:
    """The job's status and message once its outcome is known, else None.

    That is the job's recorded end, or before it its last attempt's: a job nobody's
    kernel follows (``air run``, a schedule's) is recorded as ended only once its run's
    MLflow tail is done too, which changes nothing of the outcome and must not keep
    ``--watch`` waiting. An attempt is the last when it did not fail, or used the last
    retry; a failure the supervisor chose not to retry is known at the job's end.
    """
    job = store.get(job_id)
    return _outcome(job, [] if job.done else store.attempts(job_id))


def _outcome(job: Job, attempts: list[Attempt]) -> tuple[str, str | None] | None:
    if job.done:
        return job.status, job.message
    if attempts and _last(attempts[-1], job.spec.policy.max_retries):
        return attempts[-1].status, attempts[-1].message
    return None


def _last(attempt: Attempt, max_retries: int) -> bool:
    if attempt.ended is None:
        return False
    return attempt.status is not AttemptStatus.FAILED or attempt.attempt > max_retries
