"""The states of jobs and attempts: the one place their names are spelled.

They are ``StrEnum``s, so the store, the API's JSON, the CLI and the front end all read
and write the same words (``"RUNNING"``), while code compares members, never strings.
"""

from __future__ import annotations

import enum


class JobStatus(enum.StrEnum):
    """A job's state: PENDING until its supervisor starts, RUNNING, then its outcome."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def active(self) -> bool:
        return self in ACTIVE


#: The states of a job that has not ended.
ACTIVE = frozenset({JobStatus.PENDING, JobStatus.RUNNING})


class AttemptStatus(enum.StrEnum):
    """An attempt's state: RUNNING from its start, then its outcome."""

    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class Outcome(enum.StrEnum):
    """How an attempt, and so a job, ended: the states both share at their end."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def job_status(self) -> JobStatus:
        return JobStatus(self.value)

    @property
    def attempt_status(self) -> AttemptStatus:
        return AttemptStatus(self.value)
