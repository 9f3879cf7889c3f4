"""REST routes of jobs and their logs (see docs/api.md): translation only."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from tornado import web

from ..jobs import client
from ..jobs.store import JOB_ID, Job, JobStore, UnknownJob
from ..jobs.views import job_document
from ..logs.query import BadFilter, LogFilter, read_all, read_page, read_tail
from ..logs.text import format_line
from ..tracking.stores import store_key
from ..tracking.ui_links import run_url
from .base import AirHandler

JOB = r"(?P<job_id>[^/]+)"


class JobsBase(AirHandler):
    def initialize(self, store: JobStore) -> None:
        self.store = store

    def job(self, job_id: str) -> Job:
        if not JOB_ID.fullmatch(job_id):
            raise web.HTTPError(404, f"no job {job_id!r}")
        try:
            return self.store.get(job_id)
        except UnknownJob:
            raise web.HTTPError(404, f"no job {job_id!r}") from None

    def document(self, job: Job) -> dict[str, Any]:
        return job_document(self.store, job, self._run_link)

    def _run_link(self, tracking_uri: str, experiment_id: str, run_id: str) -> str | None:
        if tracking_uri.startswith(("http://", "https://")):
            return run_url(tracking_uri, experiment_id, run_id)
        base = f"{self.base_url}jupyter-air/mlflow/{store_key(tracking_uri)}/"
        return run_url(base, experiment_id, run_id)

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

    def attempt_of(self, job: Job) -> tuple[int, int]:
        attempts = len(self.store.attempts(job.id))
        attempt = self.int_argument("attempt", max(attempts, 1), 1, max(attempts, 1))
        assert attempt is not None
        return attempt, attempts


class JobsHandler(JobsBase):
    @web.authenticated
    async def get(self) -> None:
        limit = self.int_argument("limit", 100, 1, 1000)
        active_only = self.get_query_argument("all", "0") not in ("1", "true")
        jobs = self.store.jobs(active_only=active_only, limit=limit)
        self.write_json({"jobs": [self.document(job) for job in jobs]})


class JobHandler(JobsBase):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        self.write_json(self.document(self.job(job_id)))


class JobLogsHandler(JobsBase):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        job = self.job(job_id)
        flt = self.log_filter()
        attempt, attempts = self.attempt_of(job)
        limit = self.int_argument("limit", 1000, 1, 10_000) or 1000
        tail = self.int_argument("tail", None, 1, 10_000)
        cursor = self.get_query_argument("cursor", None)
        directory = self.store.attempt_dir(job.id, attempt)
        loop = asyncio.get_running_loop()
        try:
            if tail is not None and not cursor:
                page = await loop.run_in_executor(None, read_tail, directory, flt, tail)
            else:
                page = await loop.run_in_executor(None, read_page, directory, flt, cursor, limit)
        except BadFilter as err:
            raise web.HTTPError(400, str(err)) from None
        job = self.store.get(job.id)  # after reading: "done" must not miss late lines
        self.write_json(
            {
                "job": job.id,
                "attempt": attempt,
                "attempts": attempts,
                "status": job.status,
                "lines": [line.as_json() for line in page.lines],
                "next": page.cursor,
                "done": job.done and page.at_end and (tail is not None or len(page.lines) < limit),
            }
        )


class JobLogsDownloadHandler(JobsBase):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        job = self.job(job_id)
        flt = self.log_filter()
        attempt, _ = self.attempt_of(job)
        name = f"{job.id}-attempt-{attempt}.log"
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.set_header("Content-Disposition", f'attachment; filename="{name}"')
        lines = read_all(self.store.attempt_dir(job.id, attempt), flt)

        def next_chunk() -> str:  # reading and formatting stay off the event loop
            return "".join(format_line(line) for line in itertools.islice(lines, 5000))

        loop = asyncio.get_running_loop()
        while chunk := await loop.run_in_executor(None, next_chunk):
            self.write(chunk)
            await self.flush()
        self.finish()


class JobCancelHandler(JobsBase):
    @web.authenticated
    async def post(self, job_id: str) -> None:
        job = self.job(job_id)
        try:
            cancelled = client.cancel(self.store, job.id)
        except client.Elsewhere as err:
            raise web.HTTPError(409, str(err)) from None
        if not cancelled:
            raise web.HTTPError(409, f"job {job.id} already ended ({job.status.lower()})")
        job = await asyncio.get_running_loop().run_in_executor(
            None, client.wait, self.store, job.id, 30.0
        )
        self.write_json(self.document(job))


def jobs_handlers(store: JobStore) -> list[tuple[str, type, dict[str, Any]]]:
    kwargs = {"store": store}
    return [
        (r"/jupyter-air/jobs", JobsHandler, kwargs),
        (rf"/jupyter-air/jobs/{JOB}", JobHandler, kwargs),
        (rf"/jupyter-air/jobs/{JOB}/logs", JobLogsHandler, kwargs),
        (rf"/jupyter-air/jobs/{JOB}/logs/download", JobLogsDownloadHandler, kwargs),
        (rf"/jupyter-air/jobs/{JOB}/cancel", JobCancelHandler, kwargs),
    ]
