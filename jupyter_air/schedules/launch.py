"""A task of a schedule run as a job, through the one submission path.

The job is the schedule owner's, with the schedule's grants (and the workload's own),
its MLflow runs in the task's experiment (else the workload's, else the schedule's,
else ``/Users/<owner>/<schedule name>``), tagged with the schedule, the run, the task
and the scheduled time. The experiment is named by an ``ExperimentRef``: the job's
supervisor makes it and the run, so the scheduler never imports MLflow.
"""

from __future__ import annotations

import dataclasses
import sys
from datetime import UTC, datetime
from pathlib import Path

from ..identity import Identity
from ..jobs.permissions import merged
from ..jobs.request import Defaults, JobRequest, Program
from ..jobs.service import JobService
from ..jobs.spec import JobKind
from ..jobs.store import JobStore
from ..jobs.workload_file import Submission, WorkloadFile
from ..redact import redact
from ..tracking import probe
from ..tracking.targets import ExperimentRef, current_tracking_uri
from .model import Schedule, ScheduleRun, TaskSpec

#: The environment a notebook task's job gives the notebook runner.
NOTEBOOK_ENV = "AIR_SCHEDULE_EXPERIMENT"


class Launcher:
    """``tick.Launch`` for real: submits a task's job into ``jobs``, or starts a sweep
    task's sweep (``sweep_task``)."""

    def __init__(self, jobs: JobStore) -> None:
        self.jobs = jobs

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
        tracking_uri = spec.tracking_uri or current_tracking_uri()
        if task.sweep is not None:
            from .sweep_task import start

            return start(self.jobs, schedule, task, tracking_uri, tags)
        if task.notebook is not None:
            request = notebook_request(schedule, task, experiment, tracking_uri)
        else:
            submission = WorkloadFile.model_validate({**fields, "experiment_name": experiment})
            tags["air.command"] = redact(submission.command)
            request = JobRequest(
                submission,
                Program(
                    JobKind.COMMAND,
                    command=submission.argv,
                    background=True,  # nobody's kernel: the job outlives the scheduler
                    working_dir=submission.working_dir,
                    run_name=submission.mlflow_run_name or f"{spec.name}.{task.task_key}",
                ),
                ExperimentRef(tracking_uri, experiment, submission.mlflow_artifact_location),
                schedule.owner,
                defaults=Defaults(nproc_per_node=submission.compute.nproc_per_node),
                grants=merged([*spec.grants, *submission.grants]),
            )
        request = dataclasses.replace(request, notebook=task.notebook_path, tags=tags)
        try:
            started = JobService(self.jobs, Identity(schedule.owner)).start(request)
        except probe.Unreachable as err:
            # A server that does not answer fails the task at once, in one line, with
            # nothing started (as ``air run`` refuses), rather than a job failing a minute
            # later on MLflow's retries.
            raise probe.Unreachable(
                f"{err}; the task's job was not started (a task with 'tracking: deferred' "
                "runs anyway, and gets its run once the server answers)"
            ) from None
        return started.job.id


def notebook_request(
    schedule: Schedule, task: TaskSpec, experiment: str, tracking_uri: str
) -> JobRequest:
    """One rank running ``notebook_task`` on the snapshot, beside the original notebook,
    with the schedule's grants."""
    where = Path(task.notebook_path or ".").parent
    return JobRequest(
        Submission.model_validate({"env": {NOTEBOOK_ENV: experiment}}),
        Program(
            JobKind.COMMAND,
            command=[
                sys.executable,
                "-m",
                "jupyter_air.schedules.notebook_task",
                schedule.id,
                task.task_key,
            ],
            background=True,
            working_dir=str(where) if where.is_dir() else None,
            run_name=f"{schedule.spec.name}.{task.task_key}",
        ),
        ExperimentRef(tracking_uri, experiment),
        schedule.owner,
        defaults=Defaults(nproc_per_node=1),
        grants=schedule.spec.grants,
    )
