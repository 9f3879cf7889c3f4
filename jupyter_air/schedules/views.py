"""Schedules and their runs as JSON documents (docs/api.md, "Schedules"), for the server's
routes, ``%air_schedule`` and ``air schedule ... --output json``.

A document is what a caller sees of a schedule: its cron in words, its next fire times,
its task graph, its last runs with each task's job or sweep (and the jobs it started: a
notebook task's cells, and where it kept its executed notebook), and the caller's own
level. Fire times are ISO 8601 in the schedule's time zone, with their offset.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from ..identity import Identity
from ..jobs.documents import RunLink
from ..jobs.store import JobStore, UnknownJob
from ..redact import redact, without_userinfo
from . import executed
from .model import Schedule, ScheduleRun
from .service import Schedules

#: Runs a schedule's document shows, newest first.
LAST_RUNS = 5


def schedule_document(
    schedules: Schedules,
    schedule: Schedule,
    who: Identity,
    run_link: RunLink | None = None,
    *,
    next_count: int = 3,
) -> dict[str, Any]:
    spec = schedule.spec
    level = schedules.level(who, schedule.id)
    runs = schedules.store.runs(schedule.id, LAST_RUNS)
    return {
        "id": schedule.id,
        "name": spec.name,
        "owner": schedule.owner,
        "level": level.name if level is not None else None,
        "cron": {
            "expression": spec.cron,
            "kind": spec.dialect,
            "timezone": spec.timezone,
            "words": schedules.describe(schedule),
        },
        "pause_status": spec.pause_status.value,
        "max_concurrent_runs": spec.max_concurrent_runs,
        "catch_up": spec.catch_up.value,
        "experiment_name": spec.experiment_name,
        "next_fire_times": [t.isoformat() for t in schedules.next_fire_times(schedule, next_count)],
        "created": schedule.created,
        "updated": schedule.updated,
        "grants": [g.as_json() for g in spec.grants],
        "tasks": [
            {
                "task_key": t.task_key,
                "kind": t.kind,
                "depends_on": list(t.depends_on),
                "run_if": t.run_if.value,
                "experiment_name": t.experiment_name,
                "notebook": t.notebook_path,
                "command": _shown(str((t.workload or t.sweep or {}).get("command") or "")) or None,
                "sweep": _sweep(t.sweep) if t.sweep else None,
                "parameters": t.parameters,
            }
            for t in spec.tasks
        ],
        "last_runs": [
            run_document(schedules.jobs, run, who, run_link, spec.timezone) for run in runs
        ],
    }


def run_document(
    jobs: JobStore,
    run: ScheduleRun,
    who: Identity,
    run_link: RunLink | None = None,
    timezone: str = "UTC",
) -> dict[str, Any]:
    """``timezone``: the schedule's, in which its scheduled time is written; a task's
    ``children``: the jobs its job started that ``who`` may view."""
    task_jobs = [t.job_id for t in run.tasks if t.job_id]
    children = jobs.children(task_jobs, who)
    return {
        "id": run.id,
        "schedule_id": run.schedule_id,
        "scheduled_time": datetime.fromtimestamp(
            run.scheduled_time, ZoneInfo(timezone)
        ).isoformat(),
        "trigger": run.trigger.value,
        "status": run.status.value,
        "message": _shown(run.message),
        "created": run.created,
        "ended": run.ended,
        "tasks": [
            {
                "task_key": t.task_key,
                "status": t.status.value,
                "job_id": t.job_id,
                "previous_job_ids": list(t.previous_job_ids),
                "sweep_id": t.sweep_id,
                "previous_sweep_ids": list(t.previous_sweep_ids),
                "message": _shown(t.message),
                **(
                    _sweep_run(jobs, t.sweep_id, run_link)
                    if t.sweep_id
                    else _mlflow(jobs, t.job_id, run_link)
                ),
                "executed_notebook": _executed(jobs, t.job_id),
                "children": [
                    _child(jobs, child, run_link) for child in children.get(t.job_id or "", [])
                ],
            }
            for t in run.tasks
        ],
    }


def _child(jobs: JobStore, job_id: str, run_link: RunLink | None) -> dict[str, Any]:
    """A job a task's job started: its status, its run's name and its run."""
    job = jobs.get(job_id)
    return {
        "job_id": job_id,
        "status": job.status.value,
        "run_name": job.spec.tracking.run_name,
        **_mlflow(jobs, job_id, run_link),
    }


#: What a task with no run yet (or whose records expired) shows of one.
NO_RUN: dict[str, Any] = {"run_id": None, "experiment_id": None, "run_url": None}


def _mlflow(jobs: JobStore, job_id: str | None, run_link: RunLink | None) -> dict[str, Any]:
    """The MLflow run of the job's latest attempt that has one: its id, its experiment
    and its page (``run_url``, with ``run_link``)."""
    found = dict(NO_RUN)
    if job_id is None:
        return found
    try:
        job = jobs.get(job_id)
    except UnknownJob:
        return found  # its records expired
    attempts = [a for a in jobs.attempts(job_id) if a.run_id]
    uri, experiment_id = job.spec.tracking.tracking_uri, job.experiment_id
    if not attempts or not uri or not experiment_id:
        return found
    return _run(uri, experiment_id, attempts[-1].run_id or "", run_link)


def _sweep_run(jobs: JobStore, sweep_id: str, run_link: RunLink | None) -> dict[str, Any]:
    """A sweep task's MLflow run: its sweep's, which holds the best trial's parameters
    and has each trial's run under it."""
    from ..sweeps.store import SweepStore, UnknownSweep

    try:
        sweep = SweepStore(jobs.home).get(sweep_id)
    except UnknownSweep:
        sweep = None  # its records expired
    if sweep is None or not sweep.run_id or not sweep.experiment_id:
        return dict(NO_RUN)
    return _run(sweep.tracking_uri, sweep.experiment_id, sweep.run_id, run_link)


def _run(uri: str, experiment_id: str, run_id: str, run_link: RunLink | None) -> dict[str, Any]:
    """A run's id, its experiment and its page (``run_link``'s, no credentials in it)."""
    url = run_link(uri, experiment_id, run_id) if run_link else None
    return {
        "run_id": run_id,
        "experiment_id": experiment_id,
        "run_url": without_userinfo(url) if url else None,
    }


def _executed(jobs: JobStore, job_id: str | None) -> str | None:
    """Where a notebook task's job kept its executed notebook (its newest attempt's)."""
    found = executed.latest(jobs, job_id) if job_id else None
    return str(found.path) if found else None


def _sweep(fields: dict[str, Any]) -> dict[str, Any]:
    """What a sweep task searches: its objective, trials, parallel and where its study
    lives (a URL's password masked)."""
    from ..sweeps.storage import shown

    storage = fields.get("storage")
    return {
        "objective": {k: v for k, v in fields["objective"].items() if v},
        "trials": fields["trials"],
        "parallel": fields["parallel"],
        "storage": shown(storage) if storage else None,
    }


def _shown(text: str | None) -> str | None:
    return redact(text) if text else text
