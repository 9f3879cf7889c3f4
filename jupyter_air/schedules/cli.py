"""``air schedule ...`` and ``air scheduler status|stop``.

The caller is the OS user with its OS groups, as for jobs. Every ``air schedule``
command starts the scheduler when a schedule exists and none runs (after a reboot, a
``kill -9``), so that missed times are handled as each schedule's ``catch_up`` says.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from ..identity import os_identity
from ..jobs.permissions import BadGrant, Forbidden, Level
from ..jobs.store import JobStore, StoreError
from ..paths import UnsafeHome
from . import executed
from .cron import CronError
from .model import Schedule, ScheduleRun
from .schedule_file import ScheduleFileError
from .scheduler import SchedulerInfo, ensure_scheduler, running, stop
from .service import NameTaken, Schedules, UnknownSchedule

Args = argparse.Namespace
Command = Callable[[Args], int]


class CliError(Exception):
    """A reason to stop, said in one line (``air: ...`` on stderr, exit status 1)."""


def _said(func: Command) -> Command:
    """``func`` with its ``CliError`` said the way ``air`` says its own (this module may
    be imported beside ``python -m jupyter_air.cli``'s ``__main__``, whose class differs)."""

    @functools.wraps(func)
    def run(args: Args) -> int:
        try:
            return func(args)
        except CliError as err:
            print(f"air: {err}", file=sys.stderr)
            return 1

    return run


def add_commands(sub: Any) -> None:
    """Register ``schedule`` and ``scheduler`` on the ``air`` parser's subparsers."""
    schedule = sub.add_parser("schedule", help="scheduled runs: create, list, pause, run now, ...")
    cmds = schedule.add_subparsers(dest="schedule_command", required=True)

    def command(name: str, func: Command, help: str, *ids: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = cmds.add_parser(name, help=help)
        for arg in ids:
            p.add_argument(arg)
        p.add_argument("--output", choices=["text", "json"], default="text")
        p.set_defaults(func=_said(func))
        return p

    create = command("create", _create, "create a schedule from its YAML file")
    create.add_argument("-f", "--file", required=True, type=Path, help="the schedule YAML")
    update = command("update", _update, "replace a schedule's definition", "schedule")
    update.add_argument("-f", "--file", required=True, type=Path, help="the schedule YAML")
    command("list", _list, "the schedules you own or were granted")
    command("get", _get, "one schedule: cron, next times, tasks, last runs", "schedule")
    command("pause", _pause, "stop firing (runs in progress go on)", "schedule")
    command("resume", _resume, "fire again from the next time", "schedule")
    command("run-now", _run_now, "start a run now", "schedule")
    runs = command("runs", _runs, "a schedule's runs, newest first", "schedule")
    runs.add_argument("--limit", type=int, default=20)
    repair = command("repair", _repair, "re-run failed tasks inside a run", "run")
    repair.add_argument("--task", action="append", default=[], help="re-run this task too")
    repair.add_argument(
        "--rerun-all-failed",
        action="store_true",
        help="re-run every failed or cancelled task (the default when no --task is given)",
    )
    repair.add_argument(
        "--rerun-dependent",
        action="store_true",
        help="also re-run the tasks after them, even those that succeeded",
    )
    command("delete", _delete, "delete a schedule (started jobs go on)", "schedule")

    scheduler = sub.add_parser("scheduler", help="the per-user process that fires schedules")
    scheduler.add_argument("action", choices=["status", "stop"])
    scheduler.add_argument("--output", choices=["text", "json"], default="text")
    scheduler.set_defaults(func=_said(_scheduler))


# -- commands ---------------------------------------------------------------------------


def _create(args: Args) -> int:
    s = _schedules()
    spec = _guard(lambda: s.load(args.file))
    schedule = _guard(lambda: s.create(os_identity(), spec))
    _ensure(s)
    return _show(s, schedule, args, f"Schedule {schedule.id} ({schedule.name}) created")


def _update(args: Args) -> int:
    s = _schedules()
    schedule = _find(s, args.schedule)
    spec = _guard(lambda: s.load(args.file))
    schedule = _guard(lambda: s.update(os_identity(), schedule.id, spec))
    _ensure(s)
    return _show(s, schedule, args, f"Schedule {schedule.id} ({schedule.name}) updated")


def _list(args: Args) -> int:
    from .views import schedule_document

    s = _schedules()
    _ensure(s)
    me = os_identity()
    found = s.visible(me)
    if args.output == "json":
        _json([schedule_document(s, x, me) for x in found])
        return 0
    if not found:
        print("no schedules")
        return 0
    print(f"{'ID':12}  {'NAME':24} {'STATUS':8} {'NEXT':25} CRON")
    for x in found:
        times = s.next_fire_times(x, 1)
        status = "PAUSED" if x.paused else "ACTIVE"
        when = times[0].isoformat() if times else "-"
        print(f"{x.id:12}  {x.name:24} {status:8} {when:25} {s.describe(x)}")
    return 0


def _get(args: Args) -> int:
    s = _schedules()
    _ensure(s)
    return _show(s, _find(s, args.schedule), args, None)


def _pause(args: Args) -> int:
    s = _schedules()
    schedule = _guard(lambda: s.pause(os_identity(), _find(s, args.schedule).id))
    _ensure(s)
    return _show(s, schedule, args, f"Schedule {schedule.id} ({schedule.name}) paused")


def _resume(args: Args) -> int:
    s = _schedules()
    schedule = _guard(lambda: s.resume(os_identity(), _find(s, args.schedule).id))
    _ensure(s)
    return _show(s, schedule, args, f"Schedule {schedule.id} ({schedule.name}) resumed")


def _run_now(args: Args) -> int:
    s = _schedules()
    run = _guard(lambda: s.run_now(os_identity(), _find(s, args.schedule).id))
    _ensure(s)
    return _show_runs(s, [run], args, f"Schedule run {run.id} started")


def _runs(args: Args) -> int:
    if args.limit < 1:
        raise CliError("--limit must be >= 1")
    s = _schedules()
    _ensure(s)
    found = _guard(lambda: s.runs(os_identity(), _find(s, args.schedule).id, args.limit))
    return _show_runs(s, found, args, None if found else "no runs yet")


def _repair(args: Args) -> int:
    s = _schedules()
    try:
        run_id = int(args.run)
    except ValueError:
        raise CliError(f"no schedule run {args.run!r} (a run id is a number)") from None
    run = _guard(
        lambda: s.repair(
            os_identity(),
            run_id,
            tuple(args.task),
            rerun_all_failed=args.rerun_all_failed or not args.task,
            rerun_dependent=args.rerun_dependent,
        )
    )
    _ensure(s)
    keys = [t.task_key for t in run.tasks if t.job_id is None]
    return _show_runs(
        s, [run], args, f"Schedule run {run.id} repaired: re-running {', '.join(keys)}"
    )


def _delete(args: Args) -> int:
    s = _schedules()
    schedule = _find(s, args.schedule, Level.CAN_MANAGE)
    _guard(lambda: s.delete(os_identity(), schedule.id))
    if args.output == "json":
        _json({"deleted": schedule.id})
    else:
        print(f"Schedule {schedule.id} ({schedule.name}) deleted")
    return 0


def _scheduler(args: Args) -> int:
    home = _jobs().home
    info: SchedulerInfo | None
    if args.action == "stop":
        info = stop(home)
        said = f"scheduler {info.pid} stopped" if info else "no scheduler was running"
    else:
        info = running(home)
        said = _status_line(info)
    if args.output == "json":
        _json({"running": args.action == "status" and info is not None, **_info(info)})
    else:
        print(said)
    return 0


# -- helpers ----------------------------------------------------------------------------


def _jobs() -> JobStore:
    try:
        return JobStore()
    except (UnsafeHome, StoreError) as err:
        raise CliError(str(err)) from None


def _schedules() -> Schedules:
    return Schedules(_jobs())


def _ensure(s: Schedules) -> None:
    try:
        ensure_scheduler(s.jobs)
    except RuntimeError as err:
        raise CliError(str(err)) from None


def _guard(action: Any) -> Any:
    """Run ``action``; its refusals as one line."""
    try:
        return action()
    except (ScheduleFileError, CronError, NameTaken, BadGrant, Forbidden, ValueError) as err:
        raise CliError(str(err)) from None
    except UnknownSchedule as err:
        raise CliError(f"no schedule or schedule run {err.args[0]!r}") from None


def _find(s: Schedules, name_or_id: str, needed: Level = Level.CAN_VIEW) -> Schedule:
    me = os_identity()
    found: Schedule = _guard(lambda: s.find(me, name_or_id))
    _guard(lambda: s.require(me, found.id, needed))
    return found


def _show(s: Schedules, schedule: Schedule, args: Args, said: str | None) -> int:
    from .views import schedule_document

    me = os_identity()
    if args.output == "json":
        _json(schedule_document(s, schedule, me))
        return 0
    if said:
        print(said)
    spec = schedule.spec
    print(f"  cron:   {spec.cron} ({spec.dialect}): {s.describe(schedule)}")
    print(f"  status: {spec.pause_status.value}, owner {schedule.owner}, catch_up {spec.catch_up}")
    times = s.next_fire_times(schedule, 3)
    print("  next:   " + (", ".join(t.isoformat() for t in times) if times else "- (paused)"))
    for t in spec.tasks:
        after = f" after {', '.join(t.depends_on)} ({t.run_if.value})" if t.depends_on else ""
        what = f"notebook {t.notebook_path}" if t.notebook is not None else t.kind
        print(f"  task {t.task_key}: {what}{after}")
    return 0


def _show_runs(s: Schedules, runs: list[ScheduleRun], args: Args, said: str | None) -> int:
    from .views import run_document

    if args.output == "json":
        docs = [
            run_document(s.jobs, r, os_identity(), None, s.store.get(r.schedule_id).spec.timezone)
            for r in runs
        ]
        _json(docs if args.schedule_command == "runs" else docs[0])
        return 0
    if said:
        print(said)
    for r in runs:
        when = datetime.fromtimestamp(r.scheduled_time).strftime("%Y-%m-%d %H:%M:%S")
        message = f" ({r.message})" if r.message else ""
        print(f"run {r.id}  {when}  {r.trigger.value:7} {r.status.value}{message}")
        children = s.jobs.children([t.job_id for t in r.tasks if t.job_id], os_identity())
        for t in r.tasks:
            note = f" ({t.message})" if t.message else ""
            print(f"    {t.task_key:20} {t.status.value:10} {t.job_id or t.sweep_id or '-'}{note}")
            kept = executed.latest(s.jobs, t.job_id) if t.job_id else None
            if kept is not None:
                print(f"      executed notebook: {kept.path}")
            for child in children.get(t.job_id or "", []):
                print(f"      started job {child} ({s.jobs.get(child).status.value})")
    return 0


def _status_line(info: SchedulerInfo | None) -> str:
    if info is None:
        return "no scheduler is running (any `air schedule` command starts it when needed)"
    since = datetime.fromtimestamp(info.started).strftime("%Y-%m-%d %H:%M:%S")
    return f"scheduler {info.pid} running since {since}, log {info.log}"


def _info(info: SchedulerInfo | None) -> dict[str, object]:
    return info.to_json() if info else {"pid": None, "started": None, "log": None}


def _json(doc: Any) -> None:
    print(json.dumps(doc, indent=2))
