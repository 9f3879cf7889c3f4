"""``%air_schedule``: run this notebook on a cron schedule, and list or steer schedules.

A schedule takes a snapshot of the notebook file as saved: each run executes that copy top
to bottom in a fresh kernel, as a job of its own. It gets the notebook's code, never this
kernel's variables. This module parses options and prints; ``jupyter_air.schedules.service``
does the work, with the same permission checks as ``air schedule``.
"""

from __future__ import annotations

import os
import shlex
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from ..identity import Identity, os_identity, server_owner
from ..jobs.permissions import Forbidden
from .session import notebook_path

if TYPE_CHECKING:
    from ..schedules.service import Schedules

#: What a scheduled notebook gets, said by the magic's help and its output.
SNAPSHOT_NOTE = (
    "Each run executes a copy of the notebook as saved now, top to bottom in a fresh kernel: "
    "its code, not this kernel's variables. Save the notebook first; after editing it, run "
    "this line again to schedule the new version."
)

#: The actions on a named schedule.
ACTIONS = ("pause", "resume", "run-now", "delete", "runs")


@magics_class
class AirScheduleMagics(Magics):
    @magic_arguments()
    @argument(
        "action",
        nargs="?",
        default=None,
        help=f"list, or one of {', '.join(ACTIONS)} followed by a schedule's name or id; "
        "leave out with --cron to schedule this notebook.",
    )
    @argument("target", nargs="?", default=None, help="The schedule's name (yours) or id.")
    @argument(
        "--cron",
        help='When: a Unix cron ("0 2 * * *": minute hour day month weekday) or a Quartz '
        'cron with seconds first ("0 30 2 * * ?").',
    )
    @argument("--timezone", default="UTC", help="IANA time zone of the cron (default UTC).")
    @argument(
        "-n",
        "--nproc-per-node",
        type=int,
        default=1,
        help="Ranks for the notebook's distributed cells: each run defines nproc_per_node "
        "in its parameters cell, for %%%%air_distributed -n {nproc_per_node} (default 1).",
    )
    @argument("--experiment", help="MLflow experiment of the runs (default /Users/<you>/<name>).")
    @argument("--name", help="The schedule's name (default: the notebook's file name).")
    @argument("--notebook", help="The notebook to schedule (default: this kernel's notebook).")
    @line_magic
    def air_schedule(self, line: str) -> None:
        """Schedule this notebook, or list, pause, resume, run now or delete schedules.

        ``%air_schedule --cron "0 2 * * *" -n 2 --experiment nightly`` schedules this
        notebook (again, under the same name, to take a new snapshot);
        ``%air_schedule list``; ``%air_schedule pause NAME`` (resume, run-now, delete,
        runs). Each run executes a copy of the notebook as saved when scheduled, top to
        bottom in a fresh kernel, as a job with its own MLflow run: its code, not this
        kernel's variables.
        """
        try:  # POSIX quoting: a cron is several words in quotes (IPython's split keeps them)
            argv = shlex.split(line)
        except ValueError as err:
            raise UsageError(f"%air_schedule: {err} in {line!r}") from None
        args = self.air_schedule.parser.parse_args(argv)
        from ..schedules.cron import CronError
        from ..schedules.schedule_file import ScheduleFileError
        from ..schedules.scheduler import ensure_scheduler
        from ..schedules.service import NameTaken, Schedules, UnknownSchedule

        schedules = Schedules()
        who = Identity(server_owner(), os_identity().groups)
        try:
            if args.action is None:
                if not args.cron:
                    raise UsageError(
                        "%air_schedule: give --cron to schedule this notebook, or an action: "
                        "list, " + ", ".join(ACTIONS) + " (see %air_schedule?)"
                    )
                _schedule(schedules, who, args)
            elif args.action == "list":
                _print_list(schedules, who)
            elif args.action in ACTIONS:
                if not args.target:
                    raise UsageError(f"%air_schedule {args.action} NAME: which schedule?")
                _act(schedules, who, args.action, args.target)
            else:
                raise UsageError(
                    f"%air_schedule: unknown action {args.action!r}: use list or one of "
                    + ", ".join(ACTIONS)
                )
        except (ScheduleFileError, CronError, NameTaken, Forbidden) as err:
            raise UsageError(f"%air_schedule: {err}") from None
        except UnknownSchedule as err:
            raise UsageError(f"%air_schedule: no schedule {err.args[0]!r}") from None
        except ValueError as err:  # e.g. repairing a run that still runs
            raise UsageError(f"%air_schedule: {err}") from None
        ensure_scheduler(schedules.jobs)


def _schedule(schedules: Schedules, who: Identity, args: Any) -> None:
    from ..schedules.launch import NOTEBOOK_ENV
    from ..schedules.notebook_schedule import notebook_spec
    from ..schedules.views import schedule_document

    if os.environ.get(NOTEBOOK_ENV):
        print("%air_schedule: not scheduling again from a scheduled run of this notebook.")
        return
    path = args.notebook or notebook_path()
    if not path:
        raise UsageError(
            "%air_schedule: this kernel does not know its notebook (Jupyter sets "
            "JPY_SESSION_NAME): give --notebook PATH"
        )
    notebook = Path(path).expanduser().resolve()
    spec = notebook_spec(
        schedules,
        notebook,
        cron=args.cron,
        name=args.name,
        timezone=args.timezone,
        nproc_per_node=args.nproc_per_node,
        experiment=args.experiment,
    )
    existing = schedules.store.find(who.name, spec.name)
    if existing is None:
        schedule = schedules.create(who, spec)
        verb = "Scheduled"
    else:
        schedule = schedules.update(who, existing.id, spec)
        verb = "Updated (a new snapshot)"
    doc = schedule_document(schedules, schedule, who)
    saved = datetime.fromtimestamp(notebook.stat().st_mtime).strftime("%Y-%m-%d %H:%M:%S")
    print(f"{verb} {doc['name']} ({doc['id']}): {doc['cron']['words']}")
    print(f"Notebook: {notebook}, as saved at {saved}.")
    for when in doc["next_fire_times"]:
        print(f"  next: {when}")
    print(SNAPSHOT_NOTE)


def _print_list(schedules: Schedules, who: Identity) -> None:
    from ..schedules.views import schedule_document

    docs = [schedule_document(schedules, s, who, next_count=1) for s in schedules.visible(who)]
    if not docs:
        print("No schedules: %air_schedule --cron ... schedules this notebook.")
        return
    for doc in docs:
        state = "paused" if doc["pause_status"] == "PAUSED" else "active"
        next_time = doc["next_fire_times"][0] if doc["next_fire_times"] else "-"
        last = doc["last_runs"][0]["status"].lower() if doc["last_runs"] else "no runs yet"
        mine = "" if doc["owner"] == who.name else f" (owner {doc['owner']})"
        print(
            f"{doc['name']}{mine} [{doc['id']}] {state}: {doc['cron']['words']}; "
            f"next {next_time}; last run {last}"
        )


def _act(schedules: Schedules, who: Identity, action: str, target: str) -> None:
    from ..schedules.views import run_document

    schedule = schedules.find(who, target)
    if action == "runs":
        runs = schedules.runs(who, schedule.id, 20)
        if not runs:
            print(f"{schedule.name}: no runs yet.")
        for run in runs:
            doc = run_document(schedules.jobs, run, who, timezone=schedule.spec.timezone)
            tasks = ", ".join(
                f"{t['task_key']} {t['status'].lower()}"
                + (f" (job {t['job_id']})" if t["job_id"] else "")
                for t in doc["tasks"]
            )
            print(f"{doc['scheduled_time']} {doc['status'].lower()}: {tasks}")
    elif action == "run-now":
        run = schedules.run_now(who, schedule.id)
        print(
            f"{schedule.name}: run {run.id} started; %air_schedule runs {schedule.name} follows it."
        )
    elif action == "delete":
        schedules.delete(who, schedule.id)
        print(f"{schedule.name}: deleted (the jobs and logs of its past runs stay).")
    elif action == "pause":
        schedules.pause(who, schedule.id)
        print(f"{schedule.name}: paused; nothing fires until %air_schedule resume {schedule.name}.")
    else:
        resumed = schedules.resume(who, schedule.id)
        upcoming = schedules.next_fire_times(resumed, 1)
        print(f"{schedule.name}: resumed; next {upcoming[0].isoformat() if upcoming else '-'}.")
