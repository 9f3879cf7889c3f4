"""What a schedule, a schedule run and a task run are: the states and records every
other module of ``schedules`` speaks in."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..jobs.permissions import Grant
from ..notify.targets import Target, from_json


class PauseStatus(enum.StrEnum):
    UNPAUSED = "UNPAUSED"
    PAUSED = "PAUSED"


class CatchUp(enum.StrEnum):
    """What a restarted scheduler does with the times it missed."""

    LATEST = "latest"  # fire the latest missed time once; the others SKIPPED
    NONE = "none"  # every missed time SKIPPED


class RunIf(enum.StrEnum):
    """When a task runs, given how the tasks it depends on ended."""

    ALL_SUCCESS = "ALL_SUCCESS"  # all succeeded
    ALL_DONE = "ALL_DONE"  # all ended, however
    NONE_FAILED = "NONE_FAILED"  # none failed (some may have been skipped)


class RunStatus(enum.StrEnum):
    """A schedule run: RUNNING while a task is pending or running, then its outcome."""

    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"

    @property
    def done(self) -> bool:
        return self is not RunStatus.RUNNING


class TaskStatus(enum.StrEnum):
    """A task of a run: PENDING until its upstream tasks end, SUBMITTING while a scheduler
    holds it, RUNNING once its job exists, then the job's outcome or SKIPPED (run_if)."""

    PENDING = "PENDING"
    SUBMITTING = "SUBMITTING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"

    @property
    def done(self) -> bool:
        return self in (
            TaskStatus.SUCCEEDED,
            TaskStatus.FAILED,
            TaskStatus.CANCELLED,
            TaskStatus.SKIPPED,
        )


class Trigger(enum.StrEnum):
    """Why a schedule run exists."""

    CRON = "CRON"
    RUN_NOW = "RUN_NOW"


MISSED = "missed while the scheduler was down"


@dataclass(frozen=True)
class TaskSpec:
    """One task as stored: what runs (a workload's fields, a notebook's snapshot, or a
    sweep's fields) and when. ``workload`` holds the validated fields of a workload file
    plus an absolute ``working_dir``, and ``sweep`` those of a sweep file (each firing
    starts a new sweep of them); a notebook task's ``notebook`` is its snapshot (the
    .ipynb JSON)."""

    task_key: str
    depends_on: tuple[str, ...] = ()
    run_if: RunIf = RunIf.ALL_SUCCESS
    experiment_name: str | None = None
    workload: dict[str, Any] | None = None
    notebook: str | None = None
    notebook_path: str | None = None  # where the snapshot was taken from (shown only)
    parameters: dict[str, Any] = field(default_factory=dict)
    sweep: dict[str, Any] | None = None

    @property
    def kind(self) -> str:
        """What it runs: workload, notebook or sweep."""
        if self.notebook is not None:
            return "notebook"
        return "sweep" if self.sweep is not None else "workload"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "depends_on": list(self.depends_on)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TaskSpec:
        return cls(
            **{**doc, "depends_on": tuple(doc["depends_on"]), "run_if": RunIf(doc["run_if"])}
        )


@dataclass(frozen=True)
class ScheduleSpec:
    """A validated schedule file, its workload files and notebooks read in."""

    name: str
    cron: str
    dialect: str  # cron.Dialect
    timezone: str
    pause_status: PauseStatus
    max_concurrent_runs: int
    catch_up: CatchUp
    tasks: tuple[TaskSpec, ...]
    experiment_name: str | None = None
    grants: tuple[Grant, ...] = ()
    #: The MLflow tracking store, as the creating process resolved it (its cwd, its env).
    tracking_uri: str | None = None
    #: Whom its runs' ends and skipped times are told to (``notify.targets``).
    notify: tuple[Target, ...] = ()

    def to_json(self) -> str:
        doc = {
            **{k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("tasks",)},
            "tasks": [t.to_json() for t in self.tasks],
            "grants": [str(g) for g in self.grants],
            "notify": [t.to_json() for t in self.notify],
        }
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ScheduleSpec:
        from ..jobs.permissions import parse_grant

        doc = json.loads(text)
        return cls(
            **{
                **doc,
                "pause_status": PauseStatus(doc["pause_status"]),
                "catch_up": CatchUp(doc["catch_up"]),
                "tasks": tuple(TaskSpec.from_json(t) for t in doc["tasks"]),
                "grants": tuple(parse_grant(g) for g in doc["grants"]),
                "notify": tuple(from_json(t) for t in doc.get("notify", ())),
            }
        )

    def task(self, key: str) -> TaskSpec:
        return next(t for t in self.tasks if t.task_key == key)


@dataclass(frozen=True)
class Schedule:
    """A stored schedule. ``handled_through`` is the latest scheduled time already
    handled (fired or recorded SKIPPED); ``next_due`` the next one, None when paused."""

    id: str
    owner: str
    spec: ScheduleSpec
    created: float
    updated: float
    handled_through: float
    next_due: float | None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def paused(self) -> bool:
        return self.spec.pause_status is PauseStatus.PAUSED


@dataclass(frozen=True)
class TaskRun:
    """A task of one schedule run; ``job_id`` once submitted, or ``sweep_id`` for a sweep
    task once its sweep started (a repair starts a new one and keeps the earlier ones in
    ``previous_job_ids`` / ``previous_sweep_ids``)."""

    run_id: int
    task_key: str
    status: TaskStatus
    job_id: str | None
    message: str | None
    previous_job_ids: tuple[str, ...] = ()
    claimed_by: str | None = None  # who submits it: "host:pid:start time"
    sweep_id: str | None = None
    previous_sweep_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class ScheduleRun:
    id: int
    schedule_id: str
    scheduled_time: float
    trigger: Trigger
    status: RunStatus
    created: float
    ended: float | None
    message: str | None
    tasks: tuple[TaskRun, ...] = ()
