"""A sweep as a schedule's task: each firing starts a new sweep through the sweeps
service, as ``air sweep -f`` would, with its own checks (capacity, grants, tracking,
storage); the task's run records the sweep's id and ends as the sweep does.

The sweep is the schedule owner's, with the schedule's grants beside the sweep's own,
in the task's experiment (else the sweep's, else the schedule's, else
``/Users/<owner>/<schedule name>``). Its driver runs it, detached, so the scheduler
only reads its status at each look. A sweep that completed with a best trial is
SUCCEEDED; one in which no trial completed, or that failed, FAILED; one stopped
(``air sweep stop``), CANCELLED. The sweeps package (Optuna) is imported only here, and
only when a schedule has a sweep task: the scheduler stays light otherwise.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..identity import Identity
from ..jobs.permissions import merged
from ..jobs.store import JobStore
from .model import Schedule, ScheduleSpec, TaskSpec, TaskStatus
from .schedule_file import ScheduleFileError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ..sweeps.store import Sweep, SweepStore
    from ..sweeps.sweep_file import SweepFile


def sweep_of(spec: ScheduleSpec, owner: str, task: TaskSpec) -> SweepFile:
    """The sweep a firing of ``task`` starts: its fields, its experiment resolved, the
    schedule's grants added to its own."""
    from ..sweeps.sweep_file import SweepFile

    fields: dict[str, Any] = dict(task.sweep or {})
    fields["experiment_name"] = (
        task.experiment_name
        or fields.get("experiment_name")
        or spec.experiment_name
        or f"/Users/{owner}/{spec.name}"
    )
    sweep = SweepFile.model_validate(fields)
    grants = merged([*spec.grants, *sweep.grants])
    return sweep.model_copy(update={"permissions": [str(g) for g in grants]})


def check(jobs: JobStore, who: Identity, spec: ScheduleSpec) -> None:
    """Each sweep task as the sweeps service would refuse it now, short of reaching
    anything: ``ScheduleFileError`` in one line naming the task and the field."""
    from ..jobs.service import Refused
    from ..sweeps.service import SweepService

    for i, task in enumerate(spec.tasks):
        if task.sweep is None:
            continue
        try:
            SweepService(jobs, who).check(sweep_of(spec, who.name, task))
        except Refused as err:
            field = f"{err.field}: " if err.field else ""
            raise ScheduleFileError(f"tasks.{i} ({task.task_key}): sweep: {field}{err}") from None


def start(
    jobs: JobStore,
    schedule: Schedule,
    task: TaskSpec,
    tracking_uri: str,
    tags: Mapping[str, str],
) -> str:
    """A new sweep of the task, started: its id; ``tags`` (the firing's) go on its run
    and on each trial's, as on a workload task's. What refuses it raises, in one line."""
    from ..jobs.service import Refused
    from ..sweeps.service import SweepService

    sweep = sweep_of(schedule.spec, schedule.owner, task)
    service = SweepService(jobs, Identity(schedule.owner))
    try:
        started, _ = service.create(
            sweep, Path(sweep.working_dir), tracking_uri, schedule.owner, tags=tags
        )
    except Refused as err:
        field = f"{err.field}: " if err.field else ""
        raise ValueError(f"sweep: {field}{err}") from None
    return started.id


def outcome(home: Path, sweep_id: str) -> tuple[TaskStatus, str | None] | None:
    """How the task's sweep ended; None while it runs."""
    from sqlalchemy.exc import SQLAlchemyError

    from ..sweeps.storage import BadStorage
    from ..sweeps.store import SweepStatus, UnknownSweep, best_of

    store = _store(home)
    try:
        sweep = store.get(sweep_id)
    except UnknownSweep:
        return TaskStatus.FAILED, f"its sweep {sweep_id} is gone"
    if sweep.status.active:
        return None
    if sweep.status is SweepStatus.STOPPED:
        return TaskStatus.CANCELLED, f"sweep {sweep_id} was stopped"
    if sweep.status is SweepStatus.FAILED:
        return TaskStatus.FAILED, f"sweep {sweep_id} failed: {sweep.message or 'no reason given'}"
    try:
        best = best_of(sweep, store.trials(sweep_id))
    except (BadStorage, SQLAlchemyError) as err:  # its storage: down now, looked at again
        log.warning("sweep %s: its trials could not be read: %s", sweep_id, _said(sweep, err))
        return None
    if best is None:
        return TaskStatus.FAILED, f"no trial of sweep {sweep_id} completed"
    metric = sweep.spec.objective.metric
    return TaskStatus.SUCCEEDED, f"best: trial {best.number}, {metric} {best.value:g}"


def _said(sweep: Sweep, err: Exception) -> str:
    from ..sweeps.storage import said

    return str(err) if sweep.spec.storage is None else said(sweep.spec.storage, err)


@functools.cache
def _store(home: Path) -> SweepStore:
    """One store of the sweeps per AIR_HOME for the scheduler's life (it looks at its
    sweep tasks every half second)."""
    from ..sweeps.store import SweepStore

    return SweepStore(home)
