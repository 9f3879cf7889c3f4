"""REST routes of schedules (see docs/api.md, "Schedules"): translation only.

The domain (``jupyter_air.schedules.service``) checks who may do what with a schedule, by
the jobs' levels; these handlers read the request, call it on a store thread (SQLite and
the notebook snapshot stay off the event loop), and write its documents.

Creating a schedule, or replacing what it runs, makes the server owner's scheduler run
code as the server's OS user: only the server's owner may (on a Hub, not the users the
server is shared with), as with the MLflow UI of local stores.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from jupyter_server.auth.decorator import authorized
from tornado import web

from ..identity import Identity, server_owner
from ..jobs.store import JobStore
from ..schedules import executed
from ..schedules.cron import CronError
from ..schedules.model import Schedule, ScheduleRun, ScheduleSpec
from ..schedules.notebook_schedule import notebook_spec
from ..schedules.schedule_file import ScheduleFileError
from ..schedules.scheduler import ensure_scheduler, running
from ..schedules.service import NameTaken, Schedules, UnknownSchedule, preview
from ..schedules.views import run_document, schedule_document
from .jobs_handlers import JOB, JobsBase, in_store_thread

T = TypeVar("T")

SCHEDULE = r"(?P<schedule_id>[0-9a-f]{1,64})"
RUN = r"(?P<run_id>[0-9]{1,18})"

#: The largest body a schedule route reads (a schedule file with inline workloads).
MAX_BODY = 1 << 20

#: The largest executed notebook the server reads into memory to send.
MAX_NOTEBOOK = 256 << 20

#: The form's fields (``POST schedules`` without ``yaml``) and their types.
FORM_FIELDS: dict[str, type] = {
    "notebook": str,
    "name": str,
    "cron": str,
    "timezone": str,
    "nproc_per_node": int,
    "experiment": str,
    "tasks": list,
}


class SchedulesBase(JobsBase):
    def initialize(self, store: JobStore) -> None:
        super().initialize(store)
        self.schedules = Schedules(store)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a store thread, the domain's refusals as HTTP errors (a
        missing level is ``Forbidden``, which the base answers with a 403)."""
        try:
            return await in_store_thread(fn, *args)
        except (ScheduleFileError, CronError) as err:
            raise web.HTTPError(400, str(err)) from None
        except UnknownSchedule as err:
            raise web.HTTPError(404, f"no schedule {err.args[0]!r}") from None
        except NameTaken as err:
            raise web.HTTPError(409, f"{err.args[0]}: pick another name") from None

    def body(self) -> dict[str, Any]:
        if len(self.request.body) > MAX_BODY:
            raise web.HTTPError(413, f"the body is over {MAX_BODY} bytes")
        try:
            doc = json.loads(self.request.body or b"{}")
        except ValueError:
            raise web.HTTPError(400, "the body must be a JSON object") from None
        if not isinstance(doc, dict):
            raise web.HTTPError(400, "the body must be a JSON object")
        return doc

    def require_server_owner(self, who: Identity, doing: str) -> None:
        owner = server_owner()
        if who.name != owner:
            raise web.HTTPError(
                403,
                f"{doing} runs code as {owner}, whose server this is: only {owner} can; "
                "a schedule's grants let you view it, run it now, pause or delete it",
            )

    def in_root(self, relative: str, what: str) -> Path:
        """``relative`` under the directory the server serves, or a 400."""
        root = Path(self.settings["server_root_dir"]).expanduser().resolve()
        path = (root / relative.lstrip("/")).resolve()
        if not path.is_relative_to(root):
            raise web.HTTPError(400, f"{what} {relative!r} is outside the server's root")
        return path

    def spec_maker(self, doc: dict[str, Any]) -> Callable[[], ScheduleSpec]:
        """What builds the schedule a body describes (a schedule file's text, or the
        form's fields): checked here for shape, by the domain on a store thread for
        meaning, since it reads workload files and the notebook."""
        if "yaml" in doc:
            return self._from_yaml(doc)
        unknown = sorted(set(doc) - set(FORM_FIELDS))
        if unknown:
            raise web.HTTPError(
                400, f"unknown field {unknown[0]!r}: the form has {', '.join(FORM_FIELDS)}"
            )
        for key, kind in FORM_FIELDS.items():
            value = doc.get(key)
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                said = {int: "n integer", str: " string", list: " list"}[kind]
                raise web.HTTPError(400, f"{key!r} must be a{said}")
        if not doc.get("notebook") or not doc.get("cron"):
            raise web.HTTPError(400, "'notebook' and 'cron' are needed")
        notebook = self.in_root(doc["notebook"], "notebook")
        tasks = self._form_tasks(doc)
        return lambda: notebook_spec(
            self.schedules,
            notebook,
            cron=doc["cron"],
            name=doc.get("name") or None,
            timezone=doc.get("timezone") or "UTC",
            nproc_per_node=doc.get("nproc_per_node") or 1,
            experiment=doc.get("experiment") or None,
            tasks=tasks,
        )

    def _form_tasks(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        """The form's task graph, if it gives one: a schedule file's tasks, whose
        notebooks are named from the server's root (made absolute here). Ranks are then
        each task's own."""
        tasks = doc.get("tasks")
        if tasks is None:
            return []
        if doc.get("nproc_per_node") is not None:
            raise web.HTTPError(400, "with 'tasks', ranks are each task's, not the form's")
        if not tasks or not all(isinstance(t, dict) for t in tasks):
            raise web.HTTPError(400, "'tasks' is a list of tasks, as a schedule file has them")
        resolved = []
        for task in tasks:
            path = task.get("notebook")
            if isinstance(path, str) and path:
                task = {**task, "notebook": str(self.in_root(path, "notebook"))}
            resolved.append(task)
        return resolved

    def _from_yaml(self, doc: dict[str, Any]) -> Callable[[], ScheduleSpec]:
        if set(doc) - {"yaml", "base_dir"}:
            raise web.HTTPError(400, "a schedule file's body is {'yaml': TEXT, 'base_dir': DIR}")
        text, base = doc["yaml"], doc.get("base_dir", "")
        if not isinstance(text, str) or not isinstance(base, str):
            raise web.HTTPError(400, "'yaml' and 'base_dir' are strings")
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise web.HTTPError(400, f"the schedule file is not valid YAML{where}") from None
        if not isinstance(data, dict):
            raise web.HTTPError(400, "a schedule file is a mapping of fields, like 'name: nightly'")
        base_dir = self.in_root(base, "base_dir")
        return lambda: self.schedules.parse(data, base_dir)

    def schedule_doc(self, schedule: Schedule, who: Identity) -> dict[str, Any]:
        return schedule_document(self.schedules, schedule, who, self._run_link)

    async def write_schedule(self, schedule: Schedule, who: Identity) -> None:
        self.write_json(await self.call(self.schedule_doc, schedule, who))

    async def write_run(self, run: ScheduleRun) -> None:
        schedule = await self.call(self.schedules.store.get, run.schedule_id)
        self.write_json(
            await self.call(run_document, self.store, run, self._run_link, schedule.spec.timezone)
        )


class SchedulesHandler(SchedulesBase):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        who = self.caller()

        def documents() -> list[dict[str, Any]]:
            return [self.schedule_doc(s, who) for s in self.schedules.visible(who)]

        self.write_json({"schedules": await self.call(documents)})

    @web.authenticated
    @authorized
    async def post(self) -> None:
        who = self.caller()
        self.require_server_owner(who, "a schedule")
        make = self.spec_maker(self.body())

        def create() -> Schedule:
            schedule = self.schedules.create(who, make())
            ensure_scheduler(self.store)
            return schedule

        schedule = await self.call(create)
        self.set_status(201)
        await self.write_schedule(schedule, who)


class ScheduleHandler(SchedulesBase):
    @web.authenticated
    @authorized
    async def get(self, schedule_id: str) -> None:
        who = self.caller()
        await self.write_schedule(await self.call(self.schedules.get, who, schedule_id), who)

    @web.authenticated
    @authorized
    async def put(self, schedule_id: str) -> None:
        who = self.caller()
        self.require_server_owner(who, "what a schedule runs")
        make = self.spec_maker(self.body())

        def update() -> Schedule:
            schedule = self.schedules.update(who, schedule_id, make())
            ensure_scheduler(self.store)
            return schedule

        await self.write_schedule(await self.call(update), who)

    @web.authenticated
    @authorized
    async def delete(self, schedule_id: str) -> None:
        await self.call(self.schedules.delete, self.caller(), schedule_id)
        self.set_status(204)
        self.finish()


class ScheduleActionHandler(SchedulesBase):
    """``POST schedules/<id>/pause|resume|run-now``."""

    @web.authenticated
    @authorized
    async def post(self, schedule_id: str, action: str) -> None:
        who = self.caller()
        if action == "run-now":

            def run_now() -> ScheduleRun:
                run = self.schedules.run_now(who, schedule_id)
                ensure_scheduler(self.store)
                return run

            await self.write_run(await self.call(run_now))
            return
        if action == "pause":
            await self.write_schedule(await self.call(self.schedules.pause, who, schedule_id), who)
            return

        def resume() -> Schedule:
            schedule = self.schedules.resume(who, schedule_id)
            ensure_scheduler(self.store)
            return schedule

        await self.write_schedule(await self.call(resume), who)


class ScheduleRunsHandler(SchedulesBase):
    @web.authenticated
    @authorized
    async def get(self, schedule_id: str) -> None:
        who = self.caller()
        limit = self.int_argument("limit", 20, 1, 1000)

        def documents() -> list[dict[str, Any]]:
            schedule = self.schedules.get(who, schedule_id)
            runs = self.schedules.runs(who, schedule_id, limit or 20)
            tz = schedule.spec.timezone
            return [run_document(self.store, r, who, self._run_link, tz) for r in runs]

        self.write_json({"runs": await self.call(documents)})


class ScheduleRunRepairHandler(SchedulesBase):
    """``POST schedule-runs/<run>/repair``: re-run its failed tasks, in the same run."""

    @web.authenticated
    @authorized
    async def post(self, run_id: str) -> None:
        doc = self.body()
        flags = ("rerun_all_failed", "rerun_dependent")
        tasks = doc.get("tasks", [])
        if (
            set(doc) - {*flags, "tasks"}
            or not all(isinstance(doc.get(f, True), bool) for f in flags)
            or not isinstance(tasks, list)
            or not all(isinstance(t, str) for t in tasks)
        ):
            raise web.HTTPError(
                400,
                "the body is {'tasks': [task keys], 'rerun_all_failed': true|false, "
                "'rerun_dependent': true|false}",
            )
        who = self.caller()

        def repair() -> ScheduleRun:
            try:
                run = self.schedules.repair(
                    who,
                    int(run_id),
                    tasks=tuple(doc.get("tasks", ())),
                    rerun_all_failed=doc.get("rerun_all_failed", True),
                    rerun_dependent=doc.get("rerun_dependent", False),
                )
            except UnknownSchedule:
                raise web.HTTPError(404, f"no schedule run {run_id}") from None
            except (ScheduleFileError, CronError):
                raise
            except ValueError as err:  # it still runs, or nothing failed
                raise web.HTTPError(409, str(err)) from None
            ensure_scheduler(self.store)
            return run

        await self.write_run(await self.call(repair))


class SchedulePreviewHandler(SchedulesBase):
    """``GET schedules/preview?cron=&timezone=&count=``: the form's words and next times."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        cron = self.get_query_argument("cron", "")
        timezone = self.get_query_argument("timezone", "UTC") or "UTC"
        count = self.int_argument("count", 5, 1, 50) or 5
        if len(cron) > 200 or len(timezone) > 100:
            raise web.HTTPError(400, "the cron or the time zone is too long")
        found = await self.call(preview, cron, timezone, count)
        self.write_json(
            {
                "kind": found.kind.value,
                "words": found.words,
                "next_fire_times": [t.isoformat() for t in found.next_fire_times],
            }
        )


class ExecutedNotebookHandler(SchedulesBase):
    """``GET jobs/<id>/notebook``: the executed notebook a notebook task's job kept (its
    newest attempt's), for JupyterLab to show read-only. It lives in the job's private
    folder, outside the server's root, so it is read only through this route, with the
    job's own check: CAN_VIEW, as for its logs (a Hub user the job is not granted to
    gets a 403 and nothing of it)."""

    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        job = await self.job(job_id)
        found = await self.call(executed.latest, self.store, job.id)
        if found is None:
            raise web.HTTPError(
                404,
                f"job {job.id} kept no executed notebook: it is not a notebook task, its "
                "notebook is still running, or its files have expired",
            )
        stat = found.path.stat()
        if stat.st_size > MAX_NOTEBOOK:
            raise web.HTTPError(
                413, f"{found.path} is over {MAX_NOTEBOOK >> 20} MiB: open it from a terminal"
            )
        text = await self.call(found.path.read_text, "utf-8")
        try:
            notebook = json.loads(text)
        except ValueError:
            raise web.HTTPError(500, f"{found.path} is not a notebook") from None
        self.write_json(
            {
                "job_id": job.id,
                "attempt": found.attempt,
                "name": found.name,
                "path": str(found.path),
                "modified": stat.st_mtime,
                "notebook": notebook,
            }
        )


def schedules_handlers(store: JobStore) -> list[tuple[str, type, dict[str, Any]]]:
    kwargs = {"store": store}
    return [
        (r"/jupyter-air/schedules", SchedulesHandler, kwargs),
        (r"/jupyter-air/schedules/preview", SchedulePreviewHandler, kwargs),
        (rf"/jupyter-air/schedules/{SCHEDULE}", ScheduleHandler, kwargs),
        (
            rf"/jupyter-air/schedules/{SCHEDULE}/(?P<action>pause|resume|run-now)",
            ScheduleActionHandler,
            kwargs,
        ),
        (rf"/jupyter-air/schedules/{SCHEDULE}/runs", ScheduleRunsHandler, kwargs),
        (rf"/jupyter-air/schedule-runs/{RUN}/repair", ScheduleRunRepairHandler, kwargs),
        (rf"/jupyter-air/jobs/{JOB}/notebook", ExecutedNotebookHandler, kwargs),
    ]


def keep_scheduler_running(
    store: JobStore, interval: float, stop: threading.Event, log: logging.Logger
) -> threading.Thread:
    """A backstop beside ``air schedule`` and the magic: every ``interval`` seconds, start
    the per-user scheduler when a schedule exists and none runs (killed, or the machine
    restarted). The scheduler is a process of its own: stopping this server stops only
    this check, never a schedule."""

    def check() -> None:
        if running(store.home) is None:
            info = ensure_scheduler(store)
            if info is not None:
                log.info("jupyter_air: started the schedules' scheduler (pid %d)", info.pid)

    def loop() -> None:
        while True:
            try:
                check()
            except Exception as err:  # a backstop keeps going; the log says why
                log.warning("jupyter_air: could not start the schedules' scheduler: %s", err)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=loop, name="air-scheduler-backstop", daemon=True)
    thread.start()
    return thread
