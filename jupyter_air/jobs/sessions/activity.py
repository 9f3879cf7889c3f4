"""Whether a running warm session is in a cell or idle, and since when, for those outside
the kernel that show its GPUs (the GPU panel).

A session keeps its ranks, and the GPUs they hold, between cells. One that runs no cell
holds them for nothing until its idle timeout stops it: on a shared machine the costliest
waste there is, so it is shown as such, with how long it has been idle and when it stops.
What the kernel knows of its cells comes from ``session_cells.latest``; its idle timeout
from the job's ``IDLE_TIMEOUT_TAG``, when the kernel recorded one.
"""

from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass
from typing import Any

from ...job_dir import JobDir
from ...status import JobStatus
from ..spec import JobKind
from ..store import Job, JobStore
from . import cells as session_cells

#: The job's tag (and its runs') holding the session's ``--idle-timeout`` in seconds
#: ("0": it never stops on its own). Absent: not known.
IDLE_TIMEOUT_TAG = "air.session_idle_timeout_s"


class Activity(enum.StrEnum):
    """What a running session's ranks are doing."""

    IDLE = "idle"  # no cell runs: the GPUs are held for nothing
    RUNNING = "running"  # a cell runs


@dataclass(frozen=True)
class SessionActivity:
    """A running session's activity, as the GPU API sends it (``owner.session``)."""

    activity: Activity
    #: Idle: when its latest cell ended (or it started, before its first); running: when
    #: the running cell started. Unix seconds.
    since: float
    #: The running cell, or the latest that ended (None before the first cell).
    cell: int | None
    #: Seconds without a cell after which the session stops; 0: never; None: not known.
    idle_timeout_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "activity": self.activity.value}


def idle_timeout_of(job: Job) -> float | None:
    """The session's idle timeout in seconds, as its job recorded it (None: unknown)."""
    try:
        seconds = float(job.spec.tracking.tags[IDLE_TIMEOUT_TAG])
    except (KeyError, ValueError):
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def activity_of(store: JobStore, job: Job) -> SessionActivity | None:
    """The activity of ``job`` if it is a running session, else None."""
    if job.spec.kind is not JobKind.SESSION or job.status is not JobStatus.RUNNING:
        return None
    timeout = idle_timeout_of(job)
    latest = session_cells.latest(JobDir(store.job_dir(job.id)))
    if latest is None:  # no cell yet: idle since the session started
        return SessionActivity(Activity.IDLE, job.started or job.created, None, timeout)
    if not _written_by_a_kernel(latest):
        return None  # nothing to say
    if latest.ended is None:
        return SessionActivity(Activity.RUNNING, latest.started, latest.cell, timeout)
    return SessionActivity(Activity.IDLE, latest.ended, latest.cell, timeout)


def _written_by_a_kernel(cell: session_cells.LatestCell) -> bool:
    """Whether the file holds what a kernel writes: a cell number and finite times."""

    def is_time(value: object) -> bool:
        return isinstance(value, (int, float)) and math.isfinite(value)

    return (
        isinstance(cell.cell, int)
        and is_time(cell.started)
        and (cell.ended is None or is_time(cell.ended))
    )
