"""The schedules API the CLI, the server's routes and the magic call: every action with
its permission check, in the jobs' levels.

Who may do what: the owner holds CAN_MANAGE; a grant (``permissions:`` in the file)
gives a user or group CAN_VIEW (see the schedule, its runs and their jobs),
CAN_MANAGE_RUN (also run it now, repair a run) or CAN_MANAGE (also update, pause,
resume, delete). Bad input raises ``ScheduleFileError`` / ``CronError`` (one line,
nothing changed; a sweep task its owner could not start included); an unknown id
``UnknownSchedule``; a missing level ``ScheduleForbidden``; a name the owner already
uses ``NameTaken``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from ..identity import Identity
from ..jobs.permissions import Forbidden, Level
from ..jobs.store import JobStore
from . import cron, schedule_file
from .model import PauseStatus, RunStatus, Schedule, ScheduleRun, ScheduleSpec, TaskStatus
from .scheduler import wake
from .store import NameTaken, ScheduleStore, UnknownSchedule
from .tick import schedule_cron

__all__ = [
    "NameTaken",
    "Preview",
    "ScheduleForbidden",
    "Schedules",
    "UnknownSchedule",
    "preview",
]


class ScheduleForbidden(Forbidden):
    """The identity lacks ``needed`` on the schedule; ``owner`` can grant it."""

    def __init__(self, schedule_id: str, needed: Level, owner: str) -> None:
        super().__init__(schedule_id, needed, owner)
        self.schedule_id = schedule_id
        self.args = (
            f"You don't have {needed.name} on schedule {schedule_id}: its owner, {owner}, "
            "can grant it",
        )


@dataclass(frozen=True)
class Preview:
    """A draft cron: its dialect, its words and its next fire times (aware datetimes in
    its time zone), what the form shows before saving."""

    kind: cron.Dialect
    words: str
    next_fire_times: list[datetime]


def preview(expression: str, timezone: str = "UTC", count: int = 5) -> Preview:
    """The next ``count`` times of a draft cron; Quartz when it has 6 or 7 fields."""
    dialect = cron.Dialect.QUARTZ if len(expression.split()) in (6, 7) else cron.Dialect.UNIX
    parsed = cron.parse(expression, dialect, timezone)
    times = parsed.next_times(time.time(), max(1, min(count, 100)))
    return Preview(
        dialect,
        parsed.describe(),
        [datetime.fromtimestamp(t, parsed.tz) for t in times],
    )


class Schedules:
    """Schedules of one job store, acted on as ``who``."""

    def __init__(
        self, jobs: JobStore | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.jobs = jobs or JobStore()
        self.store = ScheduleStore(self.jobs)
        self.clock = clock  # tests move it

    # -- making and changing ---------------------------------------------------------

    def load(self, path: Path) -> ScheduleSpec:
        """A schedule file read and checked (``ScheduleFileError``), its workload files and
        notebooks read in; nothing stored yet."""
        return schedule_file.load(path)

    def parse(self, doc: dict[str, Any], base_dir: Path) -> ScheduleSpec:
        """The same from data (the magic, the form): paths relative to ``base_dir``."""
        return schedule_file.from_dict(doc, base_dir)

    def create(
        self, who: Identity, spec: ScheduleSpec, tracking_uri: str | None = None
    ) -> Schedule:
        """A new schedule owned by ``who``; ``tracking_uri`` is where its runs go (default:
        what MLflow would use in this process)."""
        from ..jobs.permissions import check_change
        from ..tracking.targets import current_tracking_uri

        check_change(who.name, spec.grants, ())
        self._check_sweeps(who.name, spec)
        spec = replace(
            spec, tracking_uri=tracking_uri or spec.tracking_uri or current_tracking_uri()
        )
        now = self.clock()
        try:
            schedule_id = self.store.create(who.name, spec, _next_due(spec, now), now)
        except NameTaken:
            raise NameTaken(f"you already have a schedule named {spec.name!r}") from None
        wake(self.jobs.home)
        return self.store.get(schedule_id)

    def update(self, who: Identity, schedule_id: str, spec: ScheduleSpec) -> Schedule:
        """Replace the schedule's definition (CAN_MANAGE); its owner, id and runs stay."""
        from ..jobs.permissions import check_change

        before = self.get(who, schedule_id, Level.CAN_MANAGE)
        check_change(before.owner, spec.grants, ())
        self._check_sweeps(before.owner, spec)
        spec = replace(spec, tracking_uri=spec.tracking_uri or before.spec.tracking_uri)
        try:
            self.store.replace(schedule_id, spec, _next_due(spec, self.clock()), self.clock())
        except NameTaken:
            raise NameTaken(f"{before.owner} already has a schedule named {spec.name!r}") from None
        wake(self.jobs.home)
        return self.store.get(schedule_id)

    def _check_sweeps(self, owner: str, spec: ScheduleSpec) -> None:
        """Its sweep tasks as their owner could start them (``sweep_task.check``): what
        would refuse one at every firing is refused now."""
        if any(t.sweep is not None for t in spec.tasks):
            from .sweep_task import check

            check(self.jobs, Identity(owner), spec)

    def pause(self, who: Identity, schedule_id: str) -> Schedule:
        return self._set_pause(who, schedule_id, PauseStatus.PAUSED)

    def resume(self, who: Identity, schedule_id: str) -> Schedule:
        """Unpause: the next time fires; the times while paused are not caught up."""
        return self._set_pause(who, schedule_id, PauseStatus.UNPAUSED)

    def delete(self, who: Identity, schedule_id: str) -> None:
        """The schedule and its runs' records go (CAN_MANAGE); jobs already started go on."""
        self.get(who, schedule_id, Level.CAN_MANAGE)
        self.store.delete(schedule_id)
        wake(self.jobs.home)

    def _set_pause(self, who: Identity, schedule_id: str, status: PauseStatus) -> Schedule:
        schedule = self.get(who, schedule_id, Level.CAN_MANAGE)
        spec = replace(schedule.spec, pause_status=status)
        self.store.replace(schedule_id, spec, _next_due(spec, self.clock()), self.clock())
        wake(self.jobs.home)
        return self.store.get(schedule_id)

    # -- reading ---------------------------------------------------------------------

    def visible(self, who: Identity) -> list[Schedule]:
        """The schedules ``who`` owns or holds a grant on, by name."""
        return self.store.schedules(visible_to=who)

    def get(self, who: Identity, schedule_id: str, needed: Level = Level.CAN_VIEW) -> Schedule:
        self.require(who, schedule_id, needed)
        return self.store.get(schedule_id)

    def find(self, who: Identity, name_or_id: str) -> Schedule:
        """By id, or by name among ``who``'s own schedules (the magic's ``pause NAME``)."""
        found = self.store.find(who.name, name_or_id)
        return found if found is not None else self.get(who, name_or_id)

    def level(self, who: Identity, schedule_id: str) -> Level | None:
        return self.store.access(schedule_id).level_of(who)

    def require(self, who: Identity, schedule_id: str, needed: Level) -> None:
        access = self.store.access(schedule_id)
        level = access.level_of(who)
        if level is None or level < needed:
            raise ScheduleForbidden(schedule_id, needed, access.owner)

    def next_fire_times(self, schedule: Schedule, count: int = 3) -> list[datetime]:
        """The next times it fires ([] while paused), in its time zone."""
        if schedule.paused:
            return []
        parsed = schedule_cron(schedule)
        return [
            datetime.fromtimestamp(t, parsed.tz) for t in parsed.next_times(self.clock(), count)
        ]

    def describe(self, schedule: Schedule) -> str:
        """Its cron in words: "At 02:30, every day (Europe/Paris)"."""
        return schedule_cron(schedule).describe()

    # -- runs ------------------------------------------------------------------------

    def runs(self, who: Identity, schedule_id: str, limit: int = 20) -> list[ScheduleRun]:
        """Newest first, each with its tasks' job ids and statuses (CAN_VIEW)."""
        self.require(who, schedule_id, Level.CAN_VIEW)
        return self.store.runs(schedule_id, limit)

    def run(self, who: Identity, run_id: int) -> ScheduleRun:
        run = self.store.run(run_id)
        self.require(who, run.schedule_id, Level.CAN_VIEW)
        return run

    def run_now(self, who: Identity, schedule_id: str) -> ScheduleRun:
        """A run now, paused or not, whatever max_concurrent_runs says (CAN_MANAGE_RUN);
        the scheduler submits its tasks (``ensure_scheduler`` first if none runs)."""
        schedule = self.get(who, schedule_id, Level.CAN_MANAGE_RUN)
        run_id = self.store.add_run_now(schedule, self.clock())
        wake(self.jobs.home)
        return self.store.run(run_id)

    def repair(
        self,
        who: Identity,
        run_id: int,
        tasks: tuple[str, ...] = (),
        rerun_all_failed: bool = True,
        rerun_dependent: bool = False,
    ) -> ScheduleRun:
        """Re-run, inside the same run, ``tasks`` and (``rerun_all_failed``) its FAILED and
        CANCELLED tasks, and the tasks SKIPPED after them; with ``rerun_dependent`` also
        every task downstream of them (even those that succeeded). CAN_MANAGE_RUN; the
        run must have ended."""
        run = self.run(who, run_id)
        schedule = self.get(who, run.schedule_id, Level.CAN_MANAGE_RUN)
        if not run.status.done:
            raise ValueError(f"schedule run {run_id} is still running")
        if run.status is RunStatus.SKIPPED and not run.tasks:
            raise ValueError(f"schedule run {run_id} was skipped ({run.message}): nothing ran")
        status = {t.task_key: t.status for t in run.tasks}
        unknown = sorted(set(tasks) - set(status))
        if unknown:
            raise ValueError(f"schedule run {run_id} has no task {unknown[0]!r}")
        chosen = set(tasks) | {
            k
            for k, s in status.items()
            if rerun_all_failed and s in (TaskStatus.FAILED, TaskStatus.CANCELLED)
        }
        downstream = _downstream(schedule.spec, chosen)
        chosen |= {k for k in downstream if status.get(k) is TaskStatus.SKIPPED}
        if rerun_dependent:
            chosen |= downstream & set(status)
        if not chosen:
            raise ValueError(f"schedule run {run_id} has no failed task to re-run")
        self.store.reopen(run_id, sorted(chosen))
        wake(self.jobs.home)
        return self.store.run(run_id)


def _next_due(spec: ScheduleSpec, now: float) -> float | None:
    if spec.pause_status is PauseStatus.PAUSED:
        return None
    return cron.parse(spec.cron, cron.Dialect(spec.dialect), spec.timezone).next_after(now)


def _downstream(spec: ScheduleSpec, keys: set[str]) -> set[str]:
    """Every task that depends, directly or not, on one of ``keys``."""
    found: set[str] = set()
    frontier = set(keys)
    while frontier:
        frontier = {
            t.task_key
            for t in spec.tasks
            if set(t.depends_on) & frontier and t.task_key not in found
        }
        found |= frontier
    return found
