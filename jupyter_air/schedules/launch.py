"""A task of a schedule run as a job, through the one submission path.

The job is the schedule owner's, with the schedule's grants (and the workload's own),
its MLflow runs in the task's experiment (else the workload's, else the schedule's,
else ``/Users/<owner>/<schedule name>``), tagged with the schedule, the run, the task
and the scheduled time. The experiment is named by an ``ExperimentRef``: the job's
supervisor makes it and the run, so the scheduler never imports MLflow.
"""

from __future__ import annotations

import importlib
import sys
from datetime import UTC, datetime

from ..jobs.permissions import merged, parse_grant
from ..jobs.spec import Workload
from ..jobs.store import JobStore
from ..jobs.submit import submit
from ..redact import redact
from ..tracking.targets import ExperimentRef, current_tracking_uri
from .model import Schedule, ScheduleRun, TaskSpec

#: The environment a notebook task's job gives the notebook runner.
NOTEBOOK_ENV = "AIR_SCHEDULE_EXPERIMENT"


class Launcher:
    """``tick.Launch`` for real: submits a task's job into ``jobs``."""

    def __init__(self, jobs: JobStore) -> None:
        self.jobs = jobs
        # Loaded now, not at the first fire: building its pydantic models took 0.3 s
        # (more under load) of the first fire's latency. Every later fire holds it anyway.
        importlib.import_module("jupyter_air.jobs.workload_file")

    def __call__(self, schedule: Schedule, run: ScheduleRun, task: TaskSpec) -> str:
        spec = schedule.spec
        fields = task.workload or {}
        experiment = (
            task.experiment_name
            or fields.get("experiment_name")
            or spec.experiment_name
            or f"/Users/{schedule.owner}/{spec.name}"
        )
        tags = {
            "air.schedule": spec.name,
            "air.schedule_id": schedule.id,
            "air.schedule_run": str(run.id),
            "air.task_key": task.task_key,
            "air.scheduled_time": datetime.fromtimestamp(run.scheduled_time, UTC).isoformat(),
        }
        if task.notebook is not None:
            workload = notebook_workload(schedule, task, experiment)
        else:
            workload = command_workload(fields, experiment, f"{spec.name}.{task.task_key}")
            tags["air.command"] = redact(fields["command"])
        grants = merged([*spec.grants, *(parse_grant(g) for g in fields.get("permissions", []))])
        target = ExperimentRef(
            spec.tracking_uri or current_tracking_uri(),
            experiment,
            fields.get("mlflow_artifact_location"),
        )
        submitted = submit(
            self.jobs,
            workload,
            target,
            owner=schedule.owner,
            grants=grants,
            notebook=task.notebook_path,
            user=schedule.owner,
            extra_tags=tags,
        )
        return submitted.job.id


def command_workload(fields: dict[str, object], experiment: str, run_name: str) -> Workload:
    """What ``air run -f`` submits for these workload-file fields."""
    from ..jobs.workload_file import WorkloadFile

    spec = WorkloadFile.model_validate({**fields, "experiment_name": experiment})
    return Workload(
        kind="command",
        command=spec.argv,
        nproc_per_node=spec.compute.nproc_per_node,
        nnodes=spec.compute.nnodes,
        backend=spec.backend,
        ray_address=spec.ray_address,
        max_retries=spec.max_retries,
        env=spec.env,
        background=True,  # nobody's kernel: the job outlives the scheduler
        working_dir=spec.working_dir,
        run_name=spec.mlflow_run_name or run_name,
    )


def notebook_workload(schedule: Schedule, task: TaskSpec, experiment: str) -> Workload:
    """One rank running ``notebook_task`` on the snapshot, beside the original notebook."""
    from pathlib import Path

    where = Path(task.notebook_path or ".").parent
    return Workload(
        kind="command",
        command=[
            sys.executable,
            "-m",
            "jupyter_air.schedules.notebook_task",
            schedule.id,
            task.task_key,
        ],
        background=True,
        working_dir=str(where) if where.is_dir() else None,
        env={NOTEBOOK_ENV: experiment},
        run_name=f"{schedule.spec.name}.{task.task_key}",
    )
