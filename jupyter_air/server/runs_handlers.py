"""REST routes of the runs panel (see docs/api.md, "Runs"): translation only.

A request names a tracking store by its key (``store``), never by URI: the server reads
only stores that a job registered here.
MLflow is read on threads of its own, never on the event loop.

Who sees what: the server's owner (who owns the stores and sees every run in the MLflow
UI) sees every run. Anyone else (a Hub user the owner shares the server with) sees only
the experiments of jobs they may view, and in them only the runs of those jobs: a run
they may not view is left out of the page entirely, since its name, params and metrics
are what it would have to show.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..identity import Identity, server_owner
from ..jobs.documents import tracking_line
from ..jobs.service import JobService
from ..redact import without_userinfo
from ..tracking import experiment_runs as er
from ..tracking.stores import KEY, lookup_store, registered_stores, store_key
from .jobs_handlers import JobsBase, in_store_thread

if TYPE_CHECKING:
    from ..jobs.store import JobStore

#: MLflow reads (a remote tracking server may be slow) hold these, not the store's threads.
MLFLOW_THREADS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="air-mlflow")
#: The newest jobs looked at for runs that wait for their tracking server.
TRACKING_JOBS = 200

T = TypeVar("T")


async def in_mlflow_thread(fn: Callable[..., T], *args: Any) -> T:
    try:
        return await asyncio.get_running_loop().run_in_executor(MLFLOW_THREADS, fn, *args)
    except er.BadQuery as err:
        raise web.HTTPError(400, str(err)) from None
    except sqlite3.OperationalError as err:  # the job store, locked past its busy timeout
        raise web.HTTPError(503, f"the job store is busy ({err}): try again shortly") from None


def env_store() -> str | None:
    """The server's own store (``$MLFLOW_TRACKING_URI``, else the user's default), spelled
    as jobs record it, once a job registered it: the server never opens a store first,
    since opening a new sqlite store creates and migrates it, which a kernel doing the
    same at once would fail."""
    from ..tracking.targets import current_tracking_uri

    uri = current_tracking_uri()
    return uri if lookup_store(store_key(uri)) == uri else None


class RunsBase(JobsBase):
    def initialize(self, store: JobStore) -> None:
        super().initialize(store)

    def is_owner(self, who: Identity) -> bool:
        return who.name == server_owner()

    def tracking_uri(self) -> str:
        key = self.get_query_argument("store", "")
        if not KEY.fullmatch(key):
            raise web.HTTPError(400, f"'store' must be a store key, got {key!r}")
        uri = lookup_store(key)
        if uri is None:
            raise web.HTTPError(404, f"no tracking store {key!r} on this server")
        return uri

    def experiment_id(self) -> str:
        experiment = self.get_query_argument("experiment", "")
        if not experiment or len(experiment) > 64 or not experiment.isprintable():
            raise web.HTTPError(400, f"'experiment' must be an experiment id, got {experiment!r}")
        return experiment

    def granted_experiments(self, who: Identity, uri: str) -> set[str]:
        """The experiments of ``uri`` that jobs ``who`` may view ran in (store thread)."""
        return {
            str(job.experiment_id)
            for job in JobService(self.store, who).jobs()
            if job.spec.tracking.tracking_uri == uri and job.experiment_id
        }

    async def require_experiment(self, who: Identity, uri: str, experiment_id: str) -> None:
        if self.is_owner(who):
            return
        granted = await in_store_thread(self.granted_experiments, who, uri)
        if experiment_id not in granted:
            raise web.HTTPError(
                403, f"no job you may view ran in experiment {experiment_id!r} of this store"
            )

    def visible(self, who: Identity) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
        """Keeps the rows ``who`` may see (called on an MLflow thread)."""
        owner = self.is_owner(who)

        def keep(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
            ids = {row["job_id"] for row in rows if row["job_id"]}
            allowed = JobService(self.store, who).visible(ids)
            return [row for row in rows if (row["job_id"] in allowed if row["job_id"] else owner)]

        return keep

    def list_argument(self, name: str) -> list[str]:
        """``a,b`` (MLflow's names of runs and metrics hold no comma)."""
        return [part for part in self.get_query_argument(name, "").split(",") if part]

    def with_links(self, uri: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for row in rows:
            row["run_url"] = self._run_link(uri, row["experiment_id"], row["run_id"])
        return rows


class NotebookRunsHandler(RunsBase):
    """The notebook's experiment: that of its newest job the caller may view, else the
    default ``/Users/<user>/<notebook>`` in the server's store."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        path = self.get_query_argument("path", "")
        if not path or len(path) > 4096 or "\0" in path:
            raise web.HTTPError(400, "'path' must be the notebook's path")
        root = getattr(self.contents_manager, "root_dir", None) or os.getcwd()
        names = {path, os.path.normpath(os.path.join(root, path.lstrip("/")))}
        who = self.caller()

        def from_jobs() -> tuple[str, str] | None:
            for job in JobService(self.store, who).jobs():  # newest first
                tracking = job.spec.tracking
                if tracking.tags.get("air.notebook") in names and tracking.tracking_uri:
                    return tracking.tracking_uri, str(job.experiment_id)
            return None

        found = await in_store_thread(from_jobs)
        uri, experiment_id, source = None, None, "none"
        if found is not None:
            (uri, experiment_id), source = found, "job"
        elif self.is_owner(who) and env_store() is not None:
            uri = env_store()
            assert uri is not None
            from ..identity import mlflow_user
            from ..tracking.targets import default_experiment_name

            name = default_experiment_name(mlflow_user(), path)
            doc = await in_mlflow_thread(lambda: er.experiment_by_name(er.client_for(uri), name))
            experiment_id, source = (doc["id"], "default") if doc else (None, "none")
        self.write_json(
            {
                "store": store_key(uri) if uri else None,
                "tracking_uri": without_userinfo(uri) if uri else None,
                "experiment_id": experiment_id,
                "source": source,
            }
        )


class StoresHandler(RunsBase):
    """The tracking stores of the jobs the caller may view, newest use first (runs made
    before the one default store, in each working directory's ``mlflow.db``, stay
    reachable); for the owner, the server's own store first."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        from ..jobs.api_models import TrackingStoreDocument, TrackingStores

        who = self.caller()
        current = env_store() if self.is_owner(who) else None

        def used() -> list[str]:
            registered = set(registered_stores().values())
            uris = [current] if current else []
            for job in JobService(self.store, who).jobs():  # newest first
                uri = job.spec.tracking.tracking_uri
                if uri in registered and uri not in uris:
                    uris.append(uri)
            return uris

        stores = [
            TrackingStoreDocument(
                store=store_key(uri), tracking_uri=without_userinfo(uri), current=uri == current
            )
            for uri in await in_store_thread(used)
        ]
        self.write_json(TrackingStores(stores=stores).model_dump(mode="json"))


class ExperimentsHandler(RunsBase):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        uri = self.tracking_uri()
        who = self.caller()
        ids = (
            None
            if self.is_owner(who)
            else await in_store_thread(self.granted_experiments, who, uri)
        )
        found = await in_mlflow_thread(lambda: er.experiments(er.client_for(uri), ids))
        self.write_json({"experiments": found})


class RunsHandler(RunsBase):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        uri = self.tracking_uri()
        query = er.RunQuery(
            experiment_id=self.experiment_id(),
            search=self.get_query_argument("search", "")[:1000],
            status=self.get_query_argument("status", "").upper() or None,
            max_results=self.int_argument("max_results", 100, 1, er.MAX_PAGE) or 100,
            page_token=self.get_query_argument("page_token", None) or None,
        )
        try:
            query.filter_string()
        except er.BadQuery as err:
            raise web.HTTPError(400, str(err)) from None
        who = self.caller()
        await self.require_experiment(who, uri, query.experiment_id)
        waiting = await in_store_thread(self.tracking_lines, who, uri, query.experiment_id)
        keep = self.visible(who)
        page = await in_mlflow_thread(lambda: er.search_page(er.client_for(uri), query, keep))
        self.with_links(uri, page.runs)
        self.write_json({**page.to_json(), "tracking": waiting})

    def tracking_lines(self, who: Identity, uri: str, experiment_id: str) -> list[str]:
        """The tracking line of each of the experiment's latest jobs ``who`` may view whose
        runs wait for their server (``jobs.documents.tracking_line``)."""
        jobs = [
            job
            for job in JobService(self.store, who).jobs(limit=TRACKING_JOBS)
            if job.spec.tracking.tracking_uri == uri and str(job.experiment_id) == experiment_id
        ]
        attempts = self.store.attempts_of(jobs)
        lines = [tracking_line(self.store, job, attempts[job.id]) for job in jobs]
        return [f"job {job.id}: {line}" for job, line in zip(jobs, lines, strict=True) if line]


class SweepsHandler(RunsBase):
    """The sweeps of one experiment the caller may view (CAN_VIEW on each, as for
    ``air sweep get``), each with its trials: the runs panel groups a sweep's trial runs
    under its run from these. The study is the truth of a trial's state (PRUNED, a trial
    whose run is not made yet), not the tags its driver sets on the runs."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        uri = self.tracking_uri()
        experiment_id = self.experiment_id()
        who = self.caller()
        # Not on the job store's threads: a study kept at the user's own storage URL
        # (``storage:``) may answer slowly, as a tracking server may.
        self.write_json({"sweeps": await in_mlflow_thread(self.sweeps, who, uri, experiment_id)})

    def sweeps(self, who: Identity, uri: str, experiment_id: str) -> list[dict[str, Any]]:
        from ..sweeps import store as sweep_store

        if not (self.store.home / sweep_store.DIR / sweep_store.DATABASE).exists():
            return []  # no sweep yet: never create the study database from here
        from ..sweeps.service import SweepService

        service = SweepService(self.store, who)
        return [
            service.document(sweep, with_trials=True)
            for sweep in service.sweeps()
            if sweep.tracking_uri == uri and sweep.experiment_id == experiment_id
        ]


class CompareHandler(RunsBase):
    """Metric histories of 1 to 10 runs and the params that differ between them."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        uri = self.tracking_uri()
        run_ids = self.list_argument("runs")
        metrics = self.list_argument("metrics")
        try:
            er.check_compared(run_ids, metrics)
        except er.BadQuery as err:
            raise web.HTTPError(400, str(err)) from None
        who = self.caller()
        keep = self.visible(who)

        def compared() -> dict[str, Any]:
            client = er.client_for(uri)
            rows = er.get_runs(client, run_ids)
            if len(keep(rows)) != len(rows):
                raise PermissionError
            return er.compare(client, rows, metrics)

        try:
            doc = await in_mlflow_thread(compared)
        except PermissionError:
            raise web.HTTPError(403, "you may not view one of these runs' jobs") from None
        self.write_json(doc)


def runs_handlers(store: JobStore) -> list[tuple[str, type[RunsBase], dict[str, Any]]]:
    kwargs = {"store": store}
    return [
        (r"/jupyter-air/runs", RunsHandler, kwargs),
        (r"/jupyter-air/runs/notebook", NotebookRunsHandler, kwargs),
        (r"/jupyter-air/runs/stores", StoresHandler, kwargs),
        (r"/jupyter-air/runs/experiments", ExperimentsHandler, kwargs),
        (r"/jupyter-air/runs/compare", CompareHandler, kwargs),
        (r"/jupyter-air/runs/sweeps", SweepsHandler, kwargs),
    ]
