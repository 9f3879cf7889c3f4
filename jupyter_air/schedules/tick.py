"""One pass of the scheduler: record what is due, submit the tasks that may start, end
the runs whose tasks all ended. Idempotent: any number of processes may tick one
store at once (a restarted scheduler, a second machine, a server's backstop) and each
scheduled time fires once, each task is submitted once (see ``store``).

The clock is a parameter, so tests drive it; ``launch`` is how a task becomes a job.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from graphlib import TopologicalSorter

from ..jobs.store import UnknownJob
from ..procs import alive
from .cron import Cron
from .model import (
    MISSED,
    CatchUp,
    RunIf,
    RunStatus,
    Schedule,
    ScheduleRun,
    TaskRun,
    TaskSpec,
    TaskStatus,
)
from .store import Fired, ScheduleStore

log = logging.getLogger(__name__)

#: Missed times recorded one by one (SKIPPED); earlier ones are counted in a message.
MISSED_KEPT = 100
#: A time handled this late, at most, is on time (less for crons firing more often).
ON_TIME = 60.0

#: Submits one task of one run as a job; returns the job's id (a sweep task: its sweep's).
#: Raises to fail the task.
Launch = Callable[[Schedule, ScheduleRun, TaskSpec], str]


@dataclass
class TickResult:
    started: list[int] = field(default_factory=list)  # run ids fired
    skipped: list[int] = field(default_factory=list)  # run ids recorded SKIPPED
    submitted: list[str] = field(default_factory=list)  # job ids
    sweeps: list[str] = field(default_factory=list)  # sweep ids (sweep tasks)
    ended: list[int] = field(default_factory=list)  # run ids that ended in this pass


def tick(
    store: ScheduleStore, launch: Launch, now: float, claimer: str | None = None
) -> TickResult:
    """Fire what is due at ``now``, then move every active run on."""
    result = TickResult()
    with store.held():
        with store.batch():
            for schedule in store.due(now):
                fired = fire_due(store, schedule, now)
                if fired is not None:
                    result.started += fired.started
                    result.skipped += fired.skipped
        advance(store, launch, now, claimer or this_process(), result)
    return result


def fire_due(store: ScheduleStore, schedule: Schedule, now: float) -> Fired | None:
    """Record the schedule's times up to ``now``: the one that fires, RUNNING; the missed
    ones SKIPPED as ``catch_up`` says. None when another process recorded them first."""
    cron = schedule_cron(schedule)
    times, dropped = cron.times_between(schedule.handled_through, now, MISSED_KEPT + 1)
    next_due = cron.next_after(max(now, times[-1] if times else now))
    if not times:
        return store.record_due(schedule, schedule.handled_through, next_due, [], now)
    latest = times[-1]
    on_time = now - latest <= min(ON_TIME, ((next_due or latest + 2 * ON_TIME) - latest) / 2)
    fires = on_time or schedule.spec.catch_up is CatchUp.LATEST
    runs: list[tuple[float, RunStatus, str | None]] = []
    for i, t in enumerate(times):
        if t == latest and fires:
            runs.append((t, RunStatus.RUNNING, None))
            continue
        message = MISSED
        if i == 0 and dropped:
            message += f" (and {dropped} earlier time{'s' if dropped > 1 else ''} not listed)"
        runs.append((t, RunStatus.SKIPPED, message))
    return store.record_due(schedule, latest, next_due, runs, now)


def schedule_cron(schedule: Schedule) -> Cron:
    from .cron import Dialect, parse

    spec = schedule.spec
    return parse(spec.cron, Dialect(spec.dialect), spec.timezone)


def advance(
    store: ScheduleStore, launch: Launch, now: float, claimer: str, result: TickResult
) -> None:
    """Every active run, in passes. A pass records in one transaction what the jobs say,
    the tasks SKIPPED by ``run_if``, the runs that ended and the tasks this process
    claims; then submits the claimed tasks (outside any transaction: a submission writes
    the job store) and records their jobs in a second one. A submission that failed
    brings another pass, so what follows it is settled in the same tick."""
    while True:
        claimed = _settle(store, now, claimer, result)
        if not claimed:
            return
        outcomes: list[tuple[int, str, str | None, str | None, bool]] = []
        for schedule, run, task in claimed:
            sweep = task.sweep is not None
            try:
                submitted = launch(schedule, run, task)
            except Exception as err:  # any failure to submit fails the task, says why
                log.warning(
                    "schedule %s run %s task %s: %s", schedule.id, run.id, task.task_key, err
                )
                outcomes.append((run.id, task.task_key, None, f"could not submit: {err}", sweep))
                continue
            outcomes.append((run.id, task.task_key, submitted, None, sweep))
            (result.sweeps if sweep else result.submitted).append(submitted)
        with store.batch():
            for run_id, key, started, message, sweep in outcomes:
                store.set_task(
                    run_id,
                    key,
                    TaskStatus.FAILED if started is None else TaskStatus.RUNNING,
                    job_id=None if sweep else started,
                    sweep_id=started if sweep else None,
                    message=message,
                )
        if all(started is not None for _, _, started, _, _ in outcomes):
            return


def _settle(
    store: ScheduleStore, now: float, claimer: str, result: TickResult
) -> list[tuple[Schedule, ScheduleRun, TaskSpec]]:
    """One transaction over the active runs; the tasks claimed for submission."""
    schedules: dict[str, Schedule] = {}
    claimed: list[tuple[Schedule, ScheduleRun, TaskSpec]] = []
    with store.batch():
        for run in store.active_runs():
            schedule = schedules.get(run.schedule_id) or store.get(run.schedule_id)
            schedules[schedule.id] = schedule
            claimed += _settle_run(store, schedule, run, now, claimer, result)
    return claimed


def _settle_run(
    store: ScheduleStore,
    schedule: Schedule,
    run: ScheduleRun,
    now: float,
    claimer: str,
    result: TickResult,
) -> list[tuple[Schedule, ScheduleRun, TaskSpec]]:
    specs = {t.task_key: t for t in schedule.spec.tasks}
    tasks = {t.task_key: t for t in run.tasks}
    for key, task in list(tasks.items()):
        status, message = _refreshed(store, task, key in specs)
        if status is not task.status and store.set_task(
            run.id, key, status, message=message, only_if=task.status
        ):
            tasks[key] = replace(task, status=status, message=message)
    claimed = []
    graph = {k: [d for d in specs[k].depends_on if d in tasks] for k in tasks if k in specs}
    for key in TopologicalSorter(graph).static_order():
        task = tasks[key]
        upstream = [tasks[d] for d in graph[key]]
        if task.status is not TaskStatus.PENDING or not all(u.status.done for u in upstream):
            continue
        skip = _skip_reason(specs[key].run_if, upstream)
        if skip is not None:
            if store.set_task(run.id, key, TaskStatus.SKIPPED, message=skip, only_if=task.status):
                tasks[key] = replace(task, status=TaskStatus.SKIPPED, message=skip)
        elif store.claim(run.id, key, claimer):  # else another scheduler took it
            tasks[key] = replace(task, status=TaskStatus.SUBMITTING)
            claimed.append((schedule, run, specs[key]))
    if all(t.status.done for t in tasks.values()):
        outcome, message = _outcome(list(tasks.values()))
        store.end_run(run.id, outcome, message, now)
        result.ended.append(run.id)
    return claimed


def _refreshed(store: ScheduleStore, task: TaskRun, known: bool) -> tuple[TaskStatus, str | None]:
    """A task's status as its job or its sweep (or its claimer) now says."""
    if not known and not task.status.done and task.status is not TaskStatus.RUNNING:
        return TaskStatus.SKIPPED, "removed from the schedule by an update"
    if task.status is TaskStatus.SUBMITTING and not _claimer_alive(task.claimed_by):
        return TaskStatus.FAILED, "the scheduler submitting it stopped before it was submitted"
    if task.status is TaskStatus.RUNNING and task.sweep_id is not None:
        from .sweep_task import outcome

        ended = outcome(store.jobs.home, task.sweep_id)
        return (task.status, task.message) if ended is None else ended
    if task.status is not TaskStatus.RUNNING or task.job_id is None:
        return task.status, task.message
    try:
        job = store.jobs.get(task.job_id)
    except UnknownJob:
        return TaskStatus.FAILED, f"its job {task.job_id} is gone"
    if not job.done:
        return task.status, task.message
    try:
        status = TaskStatus(job.status)
    except ValueError:
        status = TaskStatus.FAILED
    return status, job.message


def _skip_reason(run_if: RunIf, upstream: list[TaskRun]) -> str | None:
    """Why a task whose upstream tasks all ended does not run; None when it runs."""
    if run_if is RunIf.ALL_DONE:
        return None
    bad = (
        [u for u in upstream if u.status is not TaskStatus.SUCCEEDED]
        if run_if is RunIf.ALL_SUCCESS
        else [u for u in upstream if u.status in (TaskStatus.FAILED, TaskStatus.CANCELLED)]
    )
    if not bad:
        return None
    said = ", ".join(f"{u.task_key} {u.status.value}" for u in bad)
    return f"run_if {run_if.value}: {said}"


def _outcome(tasks: list[TaskRun]) -> tuple[RunStatus, str | None]:
    failed = [t.task_key for t in tasks if t.status is TaskStatus.FAILED]
    if failed:
        return RunStatus.FAILED, f"failed: {', '.join(failed)}"
    cancelled = [t.task_key for t in tasks if t.status is TaskStatus.CANCELLED]
    if cancelled:
        return RunStatus.CANCELLED, f"cancelled: {', '.join(cancelled)}"
    return RunStatus.SUCCEEDED, None


def this_process() -> str:
    """This process as a claimer: its host, pid and start time (a reused pid is not it)."""
    import psutil

    return f"{socket.gethostname()}:{os.getpid()}:{psutil.Process().create_time()}"


def _claimer_alive(claimer: str | None) -> bool:
    """Whether the process that claimed a task may still submit it. One on another
    machine sharing the store cannot be seen from here: it is taken to be alive."""
    if not claimer:
        return False
    host, pid, started = claimer.rsplit(":", 2) if claimer.count(":") >= 2 else ("", "", "")
    if host != socket.gethostname():
        return bool(host)
    try:
        return alive(int(pid), started_by=float(started))
    except ValueError:
        return False
