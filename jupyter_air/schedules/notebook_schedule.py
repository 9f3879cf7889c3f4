"""A schedule of one notebook from a few fields: what ``%air_schedule --cron`` and the
"Schedule this notebook" form make, as a schedule file would say it. The form may give
the whole task graph instead (the notebook's task and others, in a schedule file's words).

The fields are a Unix (5 fields) or Quartz (6 or 7, seconds first) cron, its time zone,
the ranks (defined as ``nproc_per_node`` in each run's parameters cell, for the notebook's
``%%air_distributed -n {nproc_per_node}``), and the experiment. The notebook is read now:
the schedule runs that snapshot, never the kernel's state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .model import ScheduleSpec
from .schedule_file import ScheduleFileError
from .service import Schedules

#: The one task's key.
TASK_KEY = "notebook"

#: The variable the run's parameters cell defines with the ranks asked for: the
#: notebook's cells use it as ``%%air_distributed -n {nproc_per_node}``.
RANKS_PARAMETER = "nproc_per_node"

#: Most ranks a schedule's form asks for (the job's own checks follow at each run).
MAX_RANKS = 1024


def notebook_spec(
    schedules: Schedules,
    notebook: Path,
    *,
    cron: str,
    name: str | None = None,
    timezone: str = "UTC",
    nproc_per_node: int = 1,
    experiment: str | None = None,
    tasks: Sequence[Mapping[str, Any]] = (),
) -> ScheduleSpec:
    """The checked schedule (``ScheduleFileError`` / ``CronError`` in one line otherwise).

    ``tasks``, when given, are the schedule's tasks as a schedule file says them (paths
    relative to the notebook's folder, or absolute), in place of the notebook's one task.
    """
    quartz = len(cron.split()) in (6, 7)
    if not 1 <= nproc_per_node <= MAX_RANKS:
        raise ScheduleFileError(f"ranks must be between 1 and {MAX_RANKS}, got {nproc_per_node}")
    one = {
        "task_key": TASK_KEY,
        "notebook": notebook.name,
        "parameters": {RANKS_PARAMETER: nproc_per_node},
    }
    doc: dict[str, Any] = {
        "name": name or notebook.stem,
        "schedule": {
            "quartz_cron_expression" if quartz else "cron": cron,
            "timezone_id": timezone,
        },
        "tasks": [dict(t) for t in tasks] or [one],
    }
    if experiment:
        doc["experiment_name"] = experiment
    return schedules.parse(doc, notebook.parent)
