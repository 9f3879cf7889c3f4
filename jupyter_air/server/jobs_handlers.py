"""REST routes of jobs and their logs (see docs/api.md): translation only, to and from
the jobs service, which checks each call against the job's grants.

The job store's SQLite calls and the job files they come with run on threads of their
own (``in_store_thread``), never on the event loop: another process holding the
database's lock delays the requests that read it, not the server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..job_dir import JobDir
from ..jobs.api_models import (
    LogLineDocument,
    LogsPage,
    SessionCells,
    StacksPage,
    change_document,
    line_document,
    permissions_document,
    stack_set_document,
)
from ..jobs.permissions import (
    BadGrant,
    Grant,
    Level,
    Principal,
    grant_from_json,
    merged,
    principal_from_json,
)
from ..jobs.service import AttemptPlace, JobService, NoLogs, Refused
from ..jobs.sessions import cells as session_cells
from ..jobs.sessions.cells import NoCell, NotASession, cell_filter
from ..jobs.spec import JobKind
from ..jobs.store import Job, JobStore
from ..logs.query import BadFilter, LogFilter, read_all_text, read_page, read_tail
from ..notify.targets import BadTarget, parse_all
from ..tracking.stores import store_key
from ..tracking.ui_links import run_url
from .base import AirHandler

JOB = r"(?P<job_id>[^/]+)"

#: How long a request waits for another process's write lock before answering 503.
REQUEST_BUSY_TIMEOUT = 5.0

#: Threads of their own: requests waiting for a locked database hold these, not the
#: default executor's (log reads, the GPU sampler's snapshots).
STORE_THREADS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="air-store")

T = TypeVar("T")


async def in_store_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a store thread; a database still locked after the busy timeout
    answers 503, so that the client tries again later."""
    try:
        return await asyncio.get_running_loop().run_in_executor(STORE_THREADS, fn, *args)
    except sqlite3.OperationalError as err:
        raise web.HTTPError(503, f"the job store is busy ({err}): try again shortly") from None


def run_link(base_url: str, tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """A run's page as this server's pages link to it: the tracking server's own UI, or
    the one this server serves for a local store (under its base URL)."""
    if tracking_uri.startswith(("http://", "https://")):
        return run_url(tracking_uri, experiment_id, run_id)
    base = f"{base_url}jupyter-air/mlflow/{store_key(tracking_uri)}/"
    return run_url(base, experiment_id, run_id)


class JobsBase(AirHandler):
    def initialize(self, store: JobStore) -> None:
        self.store = store

    @property
    def service(self) -> JobService:
        """The jobs service as this request's caller."""
        return JobService(self.store, self.caller(), self._run_link)

    async def job(self, job_id: str, needed: Level = Level.CAN_VIEW) -> Job:
        """The job, if the caller holds ``needed`` on it (else ``Forbidden``: a 403)."""
        return await in_store_thread(self.service.get, job_id, needed)

    async def document(self, job: Job) -> dict[str, Any]:
        return await in_store_thread(self.service.document, job)

    def _run_link(self, tracking_uri: str, experiment_id: str, run_id: str) -> str | None:
        return run_link(self.base_url, tracking_uri, experiment_id, run_id)

    def log_filter(self) -> LogFilter:
        try:
            return LogFilter(
                node=self.int_argument("node", None, 0, 1 << 16),
                rank=self.int_argument("rank", None, 0, 1 << 20),
                level=self.get_query_argument("level", "info"),
                since=self.float_argument("since", minimum=0),
                until=self.float_argument("until", minimum=0),
                search=self.get_query_argument("search", None) or None,
                regex=self.get_query_argument("regex", "0") in ("1", "true"),
            )
        except BadFilter as err:
            raise web.HTTPError(400, str(err)) from None

    async def of_cell(self, job: Job, flt: LogFilter) -> LogFilter:
        """``cell=N``: a session's lines of its cell N only (the job's level already
        checked, so a caller without it learns nothing of its cells)."""
        number = self.int_argument("cell", None, 1, 1 << 31)
        if number is None:
            return flt
        try:
            return await in_store_thread(cell_filter, self.store, job, flt, number)
        except NotASession as err:
            raise web.HTTPError(400, str(err)) from None
        except NoCell as err:
            raise web.HTTPError(404, str(err)) from None

    async def attempt_of(self, job: Job) -> AttemptPlace:
        """``attempt=N`` (the latest by default; a job with none yet, or whose files
        expired, reads as an empty place)."""
        asked = self.int_argument("attempt", None, 1, 1 << 31)
        where = functools.partial(self.service.log_attempt, empty=True)
        try:
            return await in_store_thread(where, job, asked)
        except NoLogs as err:
            raise web.HTTPError(400, str(err)) from None


class JobsHandler(JobsBase):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        limit = self.int_argument("limit", 100, 1, 1000)
        active_only = self.get_query_argument("all", "0") not in ("1", "true")
        service = self.service

        def documents() -> list[dict[str, Any]]:
            return service.documents(service.jobs(active_only=active_only, limit=limit))

        self.write_json({"jobs": await in_store_thread(documents)})


class JobHandler(JobsBase):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        self.write_json(await self.document(await self.job(job_id)))


class JobLogsHandler(JobsBase):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        job = await self.job(job_id)
        flt = await self.of_cell(job, self.log_filter())
        logs = await self.attempt_of(job)
        limit = self.int_argument("limit", 1000, 1, 10_000) or 1000
        tail = self.int_argument("tail", None, 1, 10_000)
        cursor = self.get_query_argument("cursor", None)
        directory = logs.directory
        loop = asyncio.get_running_loop()
        try:
            if tail is not None and not cursor:
                page = await loop.run_in_executor(None, read_tail, directory, flt, tail)
            else:
                page = await loop.run_in_executor(None, read_page, directory, flt, cursor, limit)
        except BadFilter as err:
            raise web.HTTPError(400, str(err)) from None
        job = await self.job(job.id)  # after reading: "done" must not miss late lines
        lines = [line_document(line) for line in page.lines]
        if job.spec.kind is JobKind.SESSION:
            await in_store_thread(self._with_cells, job, lines)
        answer = LogsPage(
            job=job.id,
            attempt=logs.attempt,
            attempts=logs.attempts,
            status=job.status,
            lines=lines,
            next=page.cursor,
            done=job.done and page.at_end and (tail is not None or len(page.lines) < limit),
        )
        self.write_json(answer.model_dump(mode="json"))

    def _with_cells(self, job: Job, lines: list[LogLineDocument]) -> None:
        """A session's lines each say their cell: its number and notebook cell id."""
        cells = session_cells.cells(JobDir(self.store.job_dir(job.id)))
        of_lines = session_cells.cells_of(cells, [line["t"] for line in lines])
        for line, cell in zip(lines, of_lines, strict=True):
            line["cell"] = None if cell is None else cell.cell
            line["cell_id"] = None if cell is None else cell.cell_id


class JobCellsHandler(JobsBase):
    """``GET jupyter-air/jobs/<id>/cells``: a session's ended cells, for the logs view's
    cell picker (CAN_VIEW, checked before anything of the cells is read)."""

    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        job = await self.job(job_id)
        if job.spec.kind is not JobKind.SESSION:
            raise web.HTTPError(400, f"job {job.id} is not a session: it has no cells")
        files = JobDir(self.store.job_dir(job.id))
        cells = await in_store_thread(session_cells.cells, files)
        answer = SessionCells.model_validate(
            {"job": job.id, "cells": [dataclasses.asdict(c) for c in cells]}
        )
        self.write_json(answer.model_dump(mode="json"))


class JobLogsDownloadHandler(JobsBase):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        job = await self.job(job_id)
        flt = await self.of_cell(job, self.log_filter())
        logs = await self.attempt_of(job)
        name = f"{job.id}-attempt-{logs.attempt}.log"
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.set_header("Content-Disposition", f'attachment; filename="{name}"')
        pages = read_all_text(logs.directory, flt)

        def next_chunk() -> str | None:  # reading and formatting stay off the event loop
            page = next(pages, None)
            return None if page is None else page.text

        loop = asyncio.get_running_loop()
        while (chunk := await loop.run_in_executor(None, next_chunk)) is not None:
            if chunk:
                self.write(chunk)
                await self.flush()
        self.finish()


class JobCancelHandler(JobsBase):
    @web.authenticated
    @authorized
    async def post(self, job_id: str) -> None:
        job = await in_store_thread(self.service.cancel, job_id)
        deadline = asyncio.get_running_loop().time() + 30.0
        while not job.done and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)  # the wait holds no thread
            job = await self.job(job.id)
        self.write_json(await self.document(job))


class JobPermissionsHandler(JobsBase):
    """``GET``/``PUT jupyter-air/jobs/<id>/permissions``: the owner and grants; a PUT
    grants and revokes (CAN_MANAGE), see docs/api.md."""

    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        access = await in_store_thread(self.service.access, job_id)
        self.write_json(permissions_document(access, self.caller()).model_dump(mode="json"))

    @web.authenticated
    @authorized
    async def put(self, job_id: str) -> None:
        await self.job(job_id, Level.CAN_MANAGE)  # before the body; checked as it changes
        grants, revoke = _change(self.request.body)
        service = self.service
        # the MLflow side makes network calls: on the default executor, not a store thread
        loop = asyncio.get_running_loop()
        access, report = await loop.run_in_executor(
            None, service.change_access, job_id, grants, revoke
        )
        self.write_json(change_document(access, service.caller, report).model_dump(mode="json"))


class JobNotifyHandler(JobsBase):
    """``POST jupyter-air/jobs/<id>/notify`` ``{"notify": [targets]}``: the owner adds
    targets to a job that runs (a grant, whatever its level, does not let anyone else:
    403); answers the job's targets as they are shown (a webhook by its host)."""

    @web.authenticated
    @authorized
    async def post(self, job_id: str) -> None:
        await self.job(job_id)
        try:
            doc = json.loads(self.request.body or b"{}")
            values = doc["notify"] if isinstance(doc, dict) and set(doc) == {"notify"} else None
            if not isinstance(values, list) or not 0 < len(values) <= 20:
                raise BadTarget('the body is {"notify": [1 to 20 targets]}')
            targets = parse_all(values)
        except ValueError as err:  # JSON's, or a target's (BadTarget)
            raise web.HTTPError(400, str(err).replace("%", "%%")) from None
        try:
            shown = await in_store_thread(self.service.add_notify, job_id, targets)
        except Refused as err:
            raise web.HTTPError(400, str(err).replace("%", "%%")) from None
        self.write_json({"job_id": job_id, "targets": [t.shown() for t in shown]})


class JobStacksHandler(JobsBase):
    """``GET jupyter-air/jobs/<id>/stacks``: the sets of stacks taken of its ranks
    (CAN_VIEW); ``POST``: every running rank's stacks now (CAN_MANAGE_RUN: taking them
    pauses each rank a moment), 409 when none runs."""

    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        found = await in_store_thread(self.service.saved_stacks, job_id)
        sets = [stack_set_document(attempt, taken) for attempt, taken in found]
        self.write_json(StacksPage(job=job_id, sets=sets).model_dump(mode="json"))

    @web.authenticated
    @authorized
    async def post(self, job_id: str) -> None:
        job = await self.job(job_id, Level.CAN_MANAGE_RUN)
        attempt = len(await in_store_thread(self.store.attempts, job.id))
        # py-spy takes up to seconds: on the default executor, never a store thread
        loop = asyncio.get_running_loop()
        taken = await loop.run_in_executor(None, self.service.take_stacks, job.id)
        page = StacksPage(job=job.id, sets=[stack_set_document(attempt, taken)])
        self.write_json(page.model_dump(mode="json"))


def _change(body: bytes) -> tuple[tuple[Grant, ...], tuple[Principal, ...]]:
    """The grants and revokes of a PUT body ``{"grant": [...], "revoke": [...]}``."""
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        raise BadGrant('the body must be JSON: {"grant": [...], "revoke": [...]}') from None
    if not isinstance(doc, dict) or set(doc) - {"grant", "revoke"}:
        raise BadGrant('the body is {"grant": [grants], "revoke": [principals]}')
    grant, revoke = doc.get("grant", []), doc.get("revoke", [])
    if not isinstance(grant, list) or not isinstance(revoke, list):
        raise BadGrant("'grant' and 'revoke' are lists")
    if len(grant) + len(revoke) > 1000:
        raise BadGrant("at most 1000 grants and revokes at once")
    return merged(map(grant_from_json, grant)), tuple(map(principal_from_json, revoke))


def jobs_handlers(store: JobStore) -> list[tuple[str, type, dict[str, Any]]]:
    kwargs = {"store": store}
    return [
        (r"/jupyter-air/jobs", JobsHandler, kwargs),
        (rf"/jupyter-air/jobs/{JOB}", JobHandler, kwargs),
        (rf"/jupyter-air/jobs/{JOB}/logs", JobLogsHandler, kwargs),
        (rf"/jupyter-air/jobs/{JOB}/logs/download", JobLogsDownloadHandler, kwargs),
        (rf"/jupyter-air/jobs/{JOB}/cells", JobCellsHandler, kwargs),
        (rf"/jupyter-air/jobs/{JOB}/cancel", JobCancelHandler, kwargs),
        (rf"/jupyter-air/jobs/{JOB}/permissions", JobPermissionsHandler, kwargs),
        (rf"/jupyter-air/jobs/{JOB}/notify", JobNotifyHandler, kwargs),
        (rf"/jupyter-air/jobs/{JOB}/stacks", JobStacksHandler, kwargs),
    ]
