"""What a schedule run's notifications say: the schedule, the scheduled time, how the run
ended and each task's outcome, with the first failed task's last lines and links.

Posted by the process whose tick ended the run (or recorded the time skipped), under a
key naming the run and its end: a second scheduler, or one restarted, posts nothing
twice; a repaired run that ends again is told again. The courier sends them, so the
scheduler's loop never waits for a mail server.
"""

from __future__ import annotations

from datetime import datetime

from ..jobs.notices import failing_lines, links
from ..jobs.store import JobStore, UnknownJob
from ..notify import courier
from ..notify.message import Link, Message, duration
from ..notify.outbox import Notice
from ..notify.settings import AirNotify, load
from ..notify.targets import Event
from .model import RunStatus, Schedule, ScheduleRun, TaskStatus
from .store import ScheduleStore

RUN_EVENT = {
    RunStatus.SUCCEEDED: Event.SUCCESS,
    RunStatus.FAILED: Event.FAILURE,
    RunStatus.CANCELLED: Event.CANCELLED,
    RunStatus.SKIPPED: Event.SKIPPED,
}
_LEVEL = {Event.SUCCESS: "success", Event.FAILURE: "error"}


def post_runs(store: ScheduleStore, run_ids: list[int]) -> None:
    """Tell each run's schedule's targets how it ended (never raises: a notification
    must not stop the scheduler)."""
    import logging

    settings: AirNotify | None = None
    for run_id in run_ids:
        try:
            run = store.run(run_id)
            schedule = store.get(run.schedule_id)
            event = RUN_EVENT.get(run.status)
            chosen = [
                (i, t) for i, t in enumerate(schedule.spec.notify) if event and t.wants(event)
            ]
            if not chosen or event is None:
                continue
            settings = settings or load()
            message = run_message(store.jobs, schedule, run, event, settings)
            courier.send(
                store.jobs.outbox,
                [
                    Notice(
                        # a repaired run ends again, later: a new notice
                        f"schedule-run:{run.id}:end:{round((run.ended or 0) * 1000)}#{i}",
                        schedule.owner,
                        target,
                        message,
                        schedule_id=schedule.id,
                    )
                    for i, target in chosen
                ],
                settings,
                try_now=False,  # the courier sends: the tick loop never waits on a server
            )
        except Exception:
            logging.getLogger(__name__).exception("notification of schedule run %s", run_id)


def run_message(
    jobs: JobStore, schedule: Schedule, run: ScheduleRun, event: Event, settings: AirNotify
) -> Message:
    when = datetime.fromtimestamp(run.scheduled_time).strftime("%Y-%m-%d %H:%M")
    word = {Event.SKIPPED: "skipped"}.get(event, run.status.value.lower())
    title = f"schedule {schedule.name}: run {run.id} ({when}) {word}"
    if run.message:
        title += f": {run.message}"
    facts = [("Schedule", schedule.name), ("Owner", schedule.owner), ("Run", f"{run.id}")]
    facts.append(("Scheduled", when))
    if run.ended is not None and event is not Event.SKIPPED:
        facts.append(("Duration", duration(run.ended - run.created)))
    for task in run.tasks:
        its_job = f", job {task.job_id}" if task.job_id else ""
        its_job += f", sweep {task.sweep_id}" if task.sweep_id else ""
        said = task.message if task.status is not TaskStatus.SUCCEEDED else None
        outcome = task.status.value + its_job + (f": {said}" if said else "")
        facts.append((f"Task {task.task_key}", outcome))
    failed = next(
        (t for t in run.tasks if t.status is TaskStatus.FAILED and t.job_id is not None), None
    )
    lines: list[str] = []
    found: list[Link] = []
    command = None
    if failed is not None and failed.job_id is not None:
        try:
            job = jobs.get(failed.job_id)
            attempts = jobs.attempts(job.id)
            last = attempts[-1] if attempts else None
            lines = failing_lines(jobs, job, last)
            found = links(job, last, settings)
            command = f"air logs {job.id}"
        except UnknownJob:
            pass
    return Message(
        event=event,
        title=title,
        level=_LEVEL.get(event, "warning"),
        owner=schedule.owner,
        facts=tuple(facts),
        lines=tuple(lines),
        links=tuple(found),
        command=command,
        job_id=failed.job_id if failed is not None else None,
        schedule_id=schedule.id,
    )
