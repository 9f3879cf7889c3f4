"""Sweeps as one caller sees them: create, list, get, stop, resume, each checked.

A sweep is its owner's; its grants (the workload's ``permissions:``) are given to every
trial's job too. The levels are the jobs': CAN_VIEW to see it and its trials,
CAN_MANAGE_RUN to stop or resume it. What cannot start is refused before anything
exists: the workload as ``air run`` would refuse it, more ranks at once (``parallel``
trials) than this machine holds, a tracking server that does not answer, a ``storage:``
that cannot hold the study (its URL shown masked, ``storage.shown``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..identity import Identity
from ..jobs import backends
from ..jobs.capacity import TooManyRanks, check_here
from ..jobs.permissions import Forbidden, Level
from ..jobs.service import Conflict, Refused, place, tracking_down
from ..jobs.store import JobStore
from ..jobs.workload_file import check_targets
from ..notify.targets import BadTarget, Target
from . import driver, space
from . import storage as storage_url
from .driver import DriverInfo
from .store import (
    DATABASE,
    STATUS,
    Code,
    Sweep,
    SweepStatus,
    SweepStore,
    TrialRecord,
    UnknownSweep,
    best_of,
)
from .sweep_file import SweepFile

__all__ = ["Conflict", "Forbidden", "Refused", "SweepService", "UnknownSweep"]


class SweepService:
    """Sweeps of one AIR_HOME as ``caller`` may see and change them."""

    def __init__(self, jobs: JobStore, caller: Identity) -> None:
        self.jobs = jobs
        self.caller = caller
        self.store = SweepStore(jobs.home)

    def create(
        self,
        spec: SweepFile,
        working_dir: Path,
        tracking_uri: str,
        user: str,
        *,
        payload: bytes | None = None,
        code: Code | None = None,
        key: str | None = None,
        notify: tuple[Target, ...] = (),
        tags: Mapping[str, str] | None = None,
    ) -> tuple[Sweep, DriverInfo]:
        """Record the sweep and start its driver, or refuse it with nothing made:
        ``Refused`` (a field at fault), ``probe.Unreachable`` (the tracking store). A
        notebook's sweep gives the ``payload`` its trials run, its ``code`` and the
        ``key`` its cell finds it again by (``latest``); ``notify``: whom its end is told
        (``notices``), each checked as a job's; ``tags``: on its run and each trial's."""
        self.check(spec, notify)
        tracking_down(tracking_uri, spec, deferrable=False)
        if spec.storage is not None:
            spec = spec.model_copy(update={"storage": self._storage(spec.storage, working_dir)})
        try:
            sweep = self.store.create(
                spec,
                owner=self.caller.name,
                working_dir=working_dir,
                tracking_uri=tracking_uri,
                user=user,
                payload=payload,
                code=code,
                key=key,
                notify=notify,
                tags=tags,
            )
        except storage_url.BadStorage as err:
            raise Refused("storage", str(err)) from None
        return sweep, driver.ensure_driver(self.jobs.home, sweep.id)

    def check(self, spec: SweepFile, notify: tuple[Target, ...] = ()) -> None:
        """``Refused`` for what the caller could not start, short of reaching anything
        (the tracking store, the study's storage, a cluster): ``notify``, grants they may
        not give, more ranks at once than this machine holds. A schedule's sweep task is
        checked so as it is made, and again at each firing (``create``)."""
        try:
            check_targets(notify)
        except BadTarget as err:
            raise Refused("notify", str(err)) from None
        nproc = spec.compute.nproc_per_node
        place(spec, self.caller.name, nproc_per_node=nproc, reach=False)
        if not backends.get(spec.backend).multi_node and not spec.compute.oversubscribe:
            try:
                check_here(spec.parallel * nproc, "compute.oversubscribe: true")
            except TooManyRanks as err:
                raise Refused(
                    "parallel", f"{spec.parallel} trials of {nproc} rank(s) at once: {err}"
                ) from None

    def _storage(self, url: str, working_dir: Path) -> str:
        """The URL as the driver will open it (a SQLite path made absolute), not this
        AIR_HOME's own store (leave ``storage:`` out for that)."""
        url = storage_url.absolute(url, working_dir)
        path = storage_url.sqlite_file(url)
        own = self.store.dir / DATABASE
        if path is not None and path.exists() and path.resolve() == own.resolve():
            raise Refused("storage", "that is AIR_HOME's own store: leave storage out to use it")
        return url

    def get(self, sweep_id: str, needed: Level = Level.CAN_VIEW) -> Sweep:
        """The sweep, if the caller holds ``needed`` on it (``Forbidden`` otherwise)."""
        sweep = self.store.get(sweep_id)
        sweep.access.require(self.caller, needed)
        return sweep

    def sweeps(self) -> list[Sweep]:
        """The sweeps the caller may view, newest first."""
        return [s for s in self.store.sweeps() if s.access.level_of(self.caller) is not None]

    def latest(self, key: str) -> Sweep | None:
        """The newest sweep the caller owns that was started with ``key``."""
        mine = [s for s in self.store.by_key(key) if s.owner == self.caller.name]
        return mine[0] if mine else None

    def trials(self, sweep: Sweep) -> list[TrialRecord]:
        return self.store.trials(sweep.id)

    def stop(self, sweep_id: str) -> Sweep:
        """Cancel its running trials and start no other (CAN_MANAGE_RUN); the driver does
        it, started again if it was not running."""
        sweep = self.get(sweep_id, Level.CAN_MANAGE_RUN)
        if not sweep.status.active:
            raise Conflict(f"sweep {sweep.id} already ended ({sweep.status.lower()})")
        self.store.set(sweep.id, **{STATUS: SweepStatus.STOPPING.value})
        driver.ensure_driver(self.jobs.home, sweep.id)
        return self.store.get(sweep.id)

    def resume(self, sweep_id: str) -> DriverInfo:
        """Its driver again, going on where the last one stopped (CAN_MANAGE_RUN); the
        running one if it runs."""
        sweep = self.get(sweep_id, Level.CAN_MANAGE_RUN)
        if not sweep.status.active:
            raise Conflict(f"sweep {sweep.id} already ended ({sweep.status.lower()})")
        return driver.ensure_driver(self.jobs.home, sweep.id)

    def document(self, sweep: Sweep, with_trials: bool = False) -> dict[str, Any]:
        """What the caller sees of a sweep they may view."""
        trials, unread = self._trials(sweep)
        best = best_of(sweep, trials)
        info = driver.running(self.jobs.home, sweep.id)
        doc: dict[str, Any] = {
            "id": sweep.id,
            "owner": sweep.owner,
            "status": sweep.status.value,
            "message": sweep.message,
            "created": sweep.created,
            "ended": sweep.ended,
            "experiment_name": sweep.spec.experiment_name,
            "experiment_id": sweep.experiment_id,
            "run_id": sweep.run_id,
            "objective": {sweep.spec.direction.value: sweep.spec.objective.metric},
            "trials_planned": space.planned(sweep.spec),
            "parallel": sweep.spec.parallel,
            "storage": storage_url.shown(sweep.spec.storage) if sweep.spec.storage else None,
            "storage_error": unread,
            "counts": {s: sum(t.state == s for t in trials) for s in _STATES},
            "best": best.as_json() if best else None,
            "driver": info.to_json() if info else None,
        }
        if with_trials:
            doc["trials"] = [t.as_json() for t in trials]
        return doc

    def _trials(self, sweep: Sweep) -> tuple[list[TrialRecord], str | None]:
        """Its trials; none, and why, where its ``storage:`` cannot be read now (a
        server down): the sweep is still listed, its record being here."""
        from sqlalchemy.exc import SQLAlchemyError

        try:
            return self.store.trials(sweep.id), None
        except storage_url.BadStorage as err:
            return [], str(err)
        except SQLAlchemyError as err:
            return [], storage_url.said(sweep.spec.storage or "", err)


_STATES = ("RUNNING", "COMPLETE", "PRUNED", "FAIL")
