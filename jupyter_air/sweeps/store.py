"""Sweeps kept durable: Optuna's RDB storage in ``AIR_HOME/sweeps/optuna.db``.

One SQLite file per AIR_HOME (0600, in a 0700 folder), one study per sweep, named by
the sweep's id. A sweep whose file gives ``storage:`` (an Optuna RDB URL, ``storage``)
keeps its record here and its trials in the study of the same name at that URL: every
trial's read and write goes through ``storage_of``. What Optuna does not know of a
sweep is kept as the study's user attributes, one key each so that two processes never
rewrite each other's: the sweep as submitted (``air.sweep``: its owner, grants, file,
working directory, tracking store), its status, its MLflow run; and of each trial, its
job and its run (the trial's user attributes). A trial is asked of Optuna (RUNNING,
durable) before its job is submitted, so a driver killed in between finds the trial
again and submits it once.

A sweep started from a notebook runs the cell's or the function's payload (pickled as a
cell's job sends it) in every trial: kept beside the study as ``ID.payload`` (0600),
read by each trial's job; and it carries the key its cell is found again by
(``kernel.sweep_launch``), so re-running the cell follows the same sweep.
"""

from __future__ import annotations

import enum
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from ..jobs.permissions import Grant, JobAccess, parse_grant
from ..notify.targets import Target, parse_all
from ..paths import make_private, private_dir, write_private
from . import space
from . import storage as storage_url
from .sweep_file import SweepFile

DIR = "sweeps"
DATABASE = "optuna.db"
SWEEP_ID = re.compile(r"sw-[0-9a-f]{8}")

#: Study user attributes.
SWEEP = "air.sweep"
STATUS = "air.status"
MESSAGE = "air.message"
ENDED = "air.ended"
RUN_ID = "air.run_id"
#: What finds a notebook's sweep again: its notebook and cell (``kernel.sweep_launch``).
KEY = "air.key"
EXPERIMENT_ID = "air.experiment_id"
#: Trial user attributes.
JOB_ID = "air.job_id"
TRIAL_RUN_ID = "air.run_id"
PRUNED_STEP = "air.pruned_step"
#: The GPUs a trial of this machine holds (none shared by two trials).
GPUS = "air.gpus"
TRIAL_MESSAGE = "air.message"

optuna.logging.set_verbosity(optuna.logging.WARNING)


class SweepStatus(enum.StrEnum):
    RUNNING = "RUNNING"
    #: Asked to stop: its running trials are being cancelled, no new one starts.
    STOPPING = "STOPPING"
    COMPLETED = "COMPLETED"
    STOPPED = "STOPPED"
    #: A trial's job could not be started (the backend refused it, tracking is down).
    FAILED = "FAILED"

    @property
    def active(self) -> bool:
        return self in (SweepStatus.RUNNING, SweepStatus.STOPPING)


@dataclass(frozen=True)
class Code:
    """A notebook's sweep: what every trial runs, a cell or a function (its payload is
    ``SweepStore.payload``), and its text, kept with each trial's run."""

    source: str


class UnknownSweep(KeyError):
    """No sweep has this id here."""


@dataclass(frozen=True)
class Sweep:
    id: str
    owner: str
    grants: tuple[Grant, ...]
    spec: SweepFile
    working_dir: str
    tracking_uri: str
    #: MLflow's run user.
    user: str
    created: float
    status: SweepStatus
    message: str | None
    ended: float | None
    run_id: str | None
    experiment_id: str | None
    #: A notebook's sweep: the cell or function its trials run; None: the file's command.
    code: Code | None = None
    key: str | None = None
    #: Whom its end is told (``notices``).
    notify: tuple[Target, ...] = ()
    #: Tags of its run and of every trial's (a schedule's firing: ``air.schedule``...).
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def access(self) -> JobAccess:
        """Who may do what with it: the jobs' rule, on the sweep's owner and grants."""
        return JobAccess(self.id, self.owner, self.grants)


@dataclass(frozen=True)
class TrialRecord:
    number: int
    #: Optuna's: RUNNING, COMPLETE, PRUNED, FAIL (WAITING is never used here).
    state: str
    params: dict[str, Any]
    value: float | None
    job_id: str | None
    run_id: str | None
    pruned_step: int | None
    message: str | None
    started: float | None
    ended: float | None

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def new_sweep_id() -> str:
    return f"sw-{secrets.token_hex(4)}"


class SweepStore:
    """The sweeps of one AIR_HOME."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.dir = private_dir(home / DIR)
        path = self.dir / DATABASE
        make_private(path)
        self.storage = optuna.storages.RDBStorage(
            f"sqlite:///{path}",
            # A CLI reading while the driver writes waits for it, not "database is locked".
            engine_kwargs={"connect_args": {"timeout": 30}},
        )
        #: The storages of the sweeps' studies, by sweep id (a sweep's never changes),
        #: and those open, by URL.
        self._of: dict[str, optuna.storages.BaseStorage] = {}
        self._open: dict[str, optuna.storages.BaseStorage] = {}

    def create(
        self,
        spec: SweepFile,
        *,
        owner: str,
        working_dir: Path,
        tracking_uri: str,
        user: str,
        payload: bytes | None = None,
        code: Code | None = None,
        key: str | None = None,
        notify: tuple[Target, ...] = (),
        tags: Mapping[str, str] | None = None,
    ) -> Sweep:
        """A new sweep; with ``payload`` and ``code``, a notebook's, whose every trial runs
        that payload (written before the study exists: a driver never finds one missing).
        With ``spec.storage``, its study is made there first: a storage that cannot be
        used (``storage.BadStorage``) leaves no record here."""
        sweep_id = new_sweep_id()
        if spec.storage is not None:
            optuna.create_study(
                storage=self._connect(spec.storage),
                study_name=sweep_id,
                direction=space.direction(spec),
            )
        if payload is not None:
            write_private(self.payload_path(sweep_id), payload)
        optuna.create_study(
            storage=self.storage, study_name=sweep_id, direction=space.direction(spec)
        )
        doc = {
            "owner": owner,
            "grants": [str(g) for g in spec.grants],
            "spec": spec.model_dump(mode="json"),
            "working_dir": str(working_dir),
            "tracking_uri": tracking_uri,
            "user": user,
            "created": time.time(),
            "code": None if code is None else {"source": code.source},
            "notify": [t.to_json() for t in notify],
            "tags": dict(tags or {}),
        }
        study_id = self.storage.get_study_id_from_name(sweep_id)
        # The record that lists it last: a caller killed meanwhile leaves none, or one
        # with its status and the key its cell finds it again by.
        self.storage.set_study_user_attr(study_id, STATUS, SweepStatus.RUNNING.value)
        if key is not None:
            self.storage.set_study_user_attr(study_id, KEY, key)
        self.storage.set_study_user_attr(study_id, SWEEP, doc)
        return self.get(sweep_id)

    def payload_path(self, sweep_id: str) -> Path:
        return self.dir / f"{sweep_id}.payload"

    def payload(self, sweep: Sweep) -> bytes | None:
        """What a notebook's sweep runs in every trial; None for a file's sweep."""
        return None if sweep.code is None else self.payload_path(sweep.id).read_bytes()

    def by_key(self, key: str) -> list[Sweep]:
        """The sweeps started with ``key`` (one notebook's cell), newest first."""
        return [s for s in self.sweeps() if s.key == key]

    def get(self, sweep_id: str) -> Sweep:
        if not SWEEP_ID.fullmatch(sweep_id):
            raise UnknownSweep(sweep_id)
        try:
            study_id = self.storage.get_study_id_from_name(sweep_id)
        except KeyError:
            raise UnknownSweep(sweep_id) from None
        return _sweep(sweep_id, self.storage.get_study_user_attrs(study_id))

    def sweeps(self) -> list[Sweep]:
        """Every sweep here, newest first."""
        found = [
            _sweep(s.study_name, s.user_attrs)
            for s in self.storage.get_all_studies()
            if SWEEP in s.user_attrs
        ]
        return sorted(found, key=lambda s: s.created, reverse=True)

    def set(self, sweep_id: str, **attrs: Any) -> None:
        """Set study attributes (``STATUS=...``, by their constants' values)."""
        study_id = self.storage.get_study_id_from_name(sweep_id)
        for key, value in attrs.items():
            self.storage.set_study_user_attr(study_id, key, value)

    def end(self, sweep_id: str, status: SweepStatus, message: str | None = None) -> None:
        self.set(sweep_id, **{STATUS: status.value, MESSAGE: message, ENDED: time.time()})

    def storage_of(self, sweep_id: str) -> optuna.storages.BaseStorage:
        """Where the sweep's trials live: AIR_HOME's store, or its file's ``storage:``."""
        found = self._of.get(sweep_id)
        if found is None:
            url = self.get(sweep_id).spec.storage
            found = self._of[sweep_id] = self.storage if url is None else self._connect(url)
        return found

    def _connect(self, url: str) -> optuna.storages.BaseStorage:
        found = self._open.get(url)
        if found is None:
            found = self._open[url] = storage_url.connect(url)
        return found

    def study(self, sweep: Sweep) -> optuna.Study:
        """The sweep's study, with its sampler and pruner."""
        return optuna.load_study(
            study_name=sweep.id,
            storage=self.storage_of(sweep.id),
            sampler=space.sampler(sweep.spec),
            pruner=space.pruner(sweep.spec),
        )

    def trial_id(self, sweep_id: str, number: int) -> int:
        storage = self.storage_of(sweep_id)
        study_id = storage.get_study_id_from_name(sweep_id)
        return storage.get_trial_id_from_study_id_trial_number(study_id, number)

    def trial_attrs(self, sweep_id: str, number: int) -> dict[str, Any]:
        """What we keep of a trial (``JOB_ID``, ``GPUS``, ...)."""
        trial_id = self.trial_id(sweep_id, number)
        return dict(self.storage_of(sweep_id).get_trial_user_attrs(trial_id))

    def set_trial_attrs(self, sweep_id: str, number: int, attrs: dict[str, Any]) -> None:
        trial_id = self.trial_id(sweep_id, number)
        for key, value in attrs.items():
            self.storage_of(sweep_id).set_trial_user_attr(trial_id, key, value)

    def trials(self, sweep_id: str) -> list[TrialRecord]:
        storage = self.storage_of(sweep_id)
        study_id = storage.get_study_id_from_name(sweep_id)
        return [_record(t) for t in storage.get_all_trials(study_id, deepcopy=False)]


def best_of(sweep: Sweep, trials: list[TrialRecord]) -> TrialRecord | None:
    """The completed trial with the best objective, None before one completed."""
    complete = [t for t in trials if t.value is not None]
    if not complete:
        return None
    pick = min if sweep.spec.direction.value == "minimize" else max
    return pick(complete, key=lambda t: t.value or 0.0)


def _sweep(sweep_id: str, attrs: dict[str, Any]) -> Sweep:
    doc = attrs[SWEEP]
    return Sweep(
        id=sweep_id,
        owner=doc["owner"],
        grants=tuple(parse_grant(g) for g in doc["grants"]),
        spec=SweepFile.model_validate(doc["spec"]),
        working_dir=doc["working_dir"],
        tracking_uri=doc["tracking_uri"],
        user=doc["user"],
        created=doc["created"],
        status=SweepStatus(attrs.get(STATUS, SweepStatus.RUNNING)),
        message=attrs.get(MESSAGE),
        ended=attrs.get(ENDED),
        run_id=attrs.get(RUN_ID),
        experiment_id=attrs.get(EXPERIMENT_ID),
        code=Code(**code) if (code := doc.get("code")) else None,
        key=attrs.get(KEY),
        notify=parse_all(doc.get("notify") or []),
        tags=doc.get("tags") or {},
    )


def _record(t: optuna.trial.FrozenTrial) -> TrialRecord:
    attrs = t.user_attrs
    return TrialRecord(
        number=t.number,
        state=t.state.name,
        params=dict(t.params),
        value=t.value if t.state is optuna.trial.TrialState.COMPLETE else None,
        job_id=attrs.get(JOB_ID),
        run_id=attrs.get(TRIAL_RUN_ID),
        pruned_step=attrs.get(PRUNED_STEP),
        message=attrs.get(TRIAL_MESSAGE),
        started=t.datetime_start.timestamp() if t.datetime_start else None,
        ended=t.datetime_complete.timestamp() if t.datetime_complete else None,
    )
