"""A job's spec: what it was asked to run, how, where and with what tracking.

One ``JobSpec`` per job, nested by concern (the program, its compute, its tracking, its
policy, its backend), frozen once built and stored as JSON with the job. It is built
here only, by ``job_spec``, which the jobs service's callers reach through ``place``
(a cell, a function, a session, a workload file, a schedule's task); what they gave was
checked before (``workload_file.Submission``, the service's ``place``).

Plain frozen dataclasses, not pydantic models: every supervisor, rank and ``air``
command reads a spec, and these import in no time.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, NoReturn

from ..notify import targets as notify_targets
from ..notify.targets import Target


class JobKind(enum.StrEnum):
    #: A pickled cell or function (``payload.pkl`` in the job's directory).
    PYTHON = "python"
    #: An argv that every rank runs.
    COMMAND = "command"
    #: Warm ranks (``command`` is their loop) that run the cells the kernel sends.
    SESSION = "session"


class OutputRanks(enum.StrEnum):
    """Whose output a cell shows: every rank's, rank 0's, or none."""

    ALL = "all"
    ZERO = "0"
    NONE = "none"


class FrozenDict(dict[str, Any]):
    """A mapping of a spec (its env, tags, settings): a dict that refuses changes, and
    that pickles and copies as one."""

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("a job's spec does not change once built")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[type[FrozenDict], tuple[dict[str, Any]]]:
        return FrozenDict, (dict(self),)


def _frozen_map(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return FrozenDict(value or {})


@dataclass(frozen=True)
class Program:
    """What every rank runs, and where."""

    kind: JobKind
    command: tuple[str, ...] = ()
    working_dir: str | None = None
    env: Mapping[str, str] = field(default_factory=lambda: _frozen_map(None))
    output_ranks: OutputRanks = OutputRanks.ALL
    #: Names brought back from rank 0 into the notebook.
    outputs: tuple[str, ...] = ()
    #: The job's checkpoint place, as its submission named it (absolute); None: the
    #: default (``checkpoints.place_for``).
    checkpoint_dir: str | None = None
    #: The job whose latest complete checkpoint its first attempt resumes from
    #: (``--resume JOB``), and that checkpoint, found when the job is submitted.
    resume_job: str | None = None
    resume_from: str | None = None
    #: The ticket of the watcher that serves a stopped rank's pdb while it follows the
    #: job (``jobs.debugger``); None: nobody watches, breakpoints are skipped.
    debug_ticket: str | None = None


@dataclass(frozen=True)
class Compute:
    nproc_per_node: int = 1
    nnodes: int = 1

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes


@dataclass(frozen=True)
class Tracking:
    """Where the job's MLflow runs go: resolved in a kernel (the experiment's id and the
    first attempt's run), or named only (``air run``, schedules), then made by the
    supervisor, which records the experiment's id with the job (``Job.experiment_id``)."""

    tracking_uri: str | None = None
    experiment_id: str | None = None
    experiment_name: str | None = None
    artifact_location: str | None = None
    run_name: str | None = None
    parent_run_id: str | None = None
    #: The first attempt's run, started by the kernel that submitted the job.
    first_run_id: str | None = None
    #: On every attempt's run.
    tags: Mapping[str, str] = field(default_factory=lambda: _frozen_map(None))
    #: Run at once even when the tracking server does not answer: an attempt's run is
    #: made, and filled from the journal, once it does (``tracking: deferred``).
    deferred: bool = False


@dataclass(frozen=True)
class Policy:
    """How the job's attempts are run and followed."""

    max_retries: int = 0
    timeout: float | None = None
    #: Nobody's kernel follows it: it outlives its submitter, nobody reads its value.
    background: bool = False
    #: Conditions on its logged metrics and their actions, each as ``jobs.guards``
    #: writes it (``loss: nan -> stop``), checked by its supervisor.
    guards: tuple[str, ...] = ()


@dataclass(frozen=True)
class BackendChoice:
    """The engine that runs the attempts' nodes, and its own settings (validated by that
    backend, see ``backends``)."""

    name: str = "local"
    settings: Mapping[str, Any] = field(default_factory=lambda: _frozen_map(None))


@dataclass(frozen=True)
class JobSpec:
    program: Program
    compute: Compute = Compute()
    tracking: Tracking = Tracking()
    policy: Policy = Policy()
    backend: BackendChoice = BackendChoice()
    #: Who is told of its events, and on which (``notify.targets``).
    notify: tuple[Target, ...] = ()

    @property
    def kind(self) -> JobKind:
        return self.program.kind

    def to_json(self) -> str:
        return json.dumps(_plain(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        data: dict[str, Any] = json.loads(text)
        if "program" not in data:
            data = _from_flat(data)
        return JobSpec(
            program=_section(Program, data["program"]),
            compute=_section(Compute, data.get("compute", {})),
            tracking=_section(Tracking, data.get("tracking", {})),
            policy=_section(Policy, data.get("policy", {})),
            backend=_section(BackendChoice, data.get("backend", {})),
            notify=tuple(notify_targets.from_json(t) for t in data.get("notify", ())),
        )

    def with_tracking(self, **changes: Any) -> JobSpec:
        """The spec with its tracking filled in, as ``submit`` does before recording it."""
        if "tags" in changes:
            changes["tags"] = _frozen_map(changes["tags"])
        return replace(self, tracking=replace(self.tracking, **changes))


def _plain(value: Any) -> Any:
    """JSON's shapes for a spec's sections and frozen containers."""
    if isinstance(value, Target):
        return value.to_json()
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


_CONVERT: dict[str, Any] = {
    "kind": JobKind,
    "output_ranks": OutputRanks,
    "command": tuple,
    "outputs": tuple,
    "guards": tuple,
    "env": _frozen_map,
    "tags": _frozen_map,
    "settings": _frozen_map,
}


def _section(cls: Any, data: Mapping[str, Any]) -> Any:
    """One section of a stored spec; a field a later version added is left out."""
    known = {f.name for f in fields(cls)}
    values = {k: _CONVERT.get(k, _same)(v) for k, v in data.items() if k in known}
    return cls(**values)


def _same(value: Any) -> Any:
    return value


def _from_flat(data: Mapping[str, Any]) -> dict[str, Any]:
    """A job recorded by an earlier version: one flat ``Workload`` of every field."""
    tags = dict(data.get("tags") or {})
    first_run = tags.pop("air.first_run_id", None)
    backend = data.get("backend", "local")
    settings = {"address": data["ray_address"]} if data.get("ray_address") else {}
    pick = {
        "program": ("kind", "command", "working_dir", "env", "output_ranks", "outputs"),
        "compute": ("nproc_per_node", "nnodes"),
        "tracking": (
            "tracking_uri",
            "experiment_id",
            "experiment_name",
            "artifact_location",
            "run_name",
            "parent_run_id",
        ),
        "policy": ("max_retries", "timeout", "background"),
    }
    nested: dict[str, Any] = {
        section: {k: data[k] for k in names if k in data} for section, names in pick.items()
    }
    nested["tracking"].update(tags=tags, first_run_id=first_run)
    nested["backend"] = {"name": backend, "settings": settings}
    return nested


# -- the one place specs are built ------------------------------------------------------


def job_spec(
    kind: JobKind,
    *,
    command: Sequence[str] = (),
    working_dir: str | None = None,
    env: Mapping[str, str] | None = None,
    output_ranks: str = OutputRanks.ALL,
    outputs: Sequence[str] = (),
    nproc_per_node: int = 1,
    nnodes: int = 1,
    max_retries: int = 0,
    timeout: float | None = None,
    background: bool = False,
    backend: str = "local",
    backend_settings: Mapping[str, Any] | None = None,
    run_name: str | None = None,
    tags: Mapping[str, str] | None = None,
    deferred: bool = False,
    notify: Sequence[Target] = (),
    checkpoint_dir: str | None = None,
    resume_job: str | None = None,
    guards: Sequence[str] = (),
    debug_ticket: str | None = None,
) -> JobSpec:
    """A spec from the fields every entry point speaks of, already checked: the magic's
    options, the decorator's, a session's, a workload file's or a schedule task's (the
    tracking's destination is filled by ``submit``)."""
    return JobSpec(
        program=Program(
            kind=JobKind(kind),
            command=tuple(command),
            working_dir=working_dir,
            env=_frozen_map(env),
            output_ranks=OutputRanks(output_ranks),
            outputs=tuple(outputs),
            checkpoint_dir=checkpoint_dir,
            resume_job=resume_job,
            debug_ticket=debug_ticket,
        ),
        compute=Compute(nproc_per_node=nproc_per_node, nnodes=nnodes),
        tracking=Tracking(run_name=run_name, tags=_frozen_map(tags), deferred=deferred),
        policy=Policy(
            max_retries=max_retries, timeout=timeout, background=background, guards=tuple(guards)
        ),
        backend=BackendChoice(backend, _frozen_map(backend_settings)),
        notify=tuple(notify),
    )
