"""The JSON documents of the jobs routes (docs/api.md, "Jobs and logs" and "Permissions")
and the runs panel's stores, as pydantic models: a job with its attempts and their
nodes, a page of logs, a session's cells, the tracking stores, and a job's permissions.

The server and ``air --output json`` build a model and send ``model_dump(mode="json")``
(states as their words, ``"RUNNING"``). tests/jobs/test_api_types.py checks the front end's
interfaces (labextension/src/logs/types.ts) and docs/api.md's examples against these
fields, so the three cannot drift: a field added here fails that test until both say it.

Only the readers of documents import this (the server, the CLI); supervisors and ranks
never do, so their start does not pay for pydantic.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict
from typing_extensions import NotRequired, TypedDict

from ..identity import Identity
from ..logs.levels import LevelName
from ..logs.query import LogLine, Stream
from ..status import AttemptStatus, JobStatus
from ..tracking.permissions import Action, MirrorReport
from ..tracking.permissions import Status as MirrorStatus
from .node.stacks import StackSet
from .permissions import JobAccess
from .spec import JobKind

#: ``permissions.Level``'s names: how a document spells a permission level.
PermissionLevel = Literal["CAN_VIEW", "CAN_MANAGE_RUN", "CAN_MANAGE"]


class Document(BaseModel):
    """A document the API sends: built by this code, so an unknown field is a bug."""

    model_config = ConfigDict(extra="forbid")


# -- jobs ------------------------------------------------------------------------------


class AttemptNode(Document):
    """A node of an attempt on a cluster (Ray, Slurm), once the job's nodes are placed."""

    node: int
    node_id: str
    ip: str
    hostname: str
    #: The node in its cluster's words (``Slurm node gpu-b``); None for an attempt
    #: recorded before nodes were labelled.
    label: str | None = None


class MfuDocument(Document):
    """``perf.mfu.Mfu``: the model FLOPs utilization, a fraction of the GPUs' peak."""

    #: None: not known (``why`` says why: no GPU, an unknown one, FLOPs not counted).
    value: float | None
    #: How it was computed, or why it is absent.
    why: str


class ProgressDocument(Document):
    """``perf.progress.Progress.to_json``: how far an attempt is, from its ranks' step
    marks, and its MFU."""

    #: The latest step marked (the highest over ranks).
    step: int
    #: Its planned steps; None when unknown (no percentage, no ETA).
    total: int | None
    #: ``step / total`` (at most 1); None when its length is unknown.
    fraction: float | None
    #: Smoothed seconds per step.
    step_time_s: float | None
    #: All ranks together; None when unknown (or not all ranks' marks are at hand).
    samples_per_s: float | None
    tokens_per_s: float | None
    #: Seconds left; None without a total or a step time, and once the attempt ended.
    eta_s: float | None
    #: ``time.time()`` of the latest mark.
    updated: float
    #: ``step 4,210 / 10,000 (42 %), ETA 18:40 (23 min)``; ``step 4,210, 3.2 steps/s``.
    line: str
    mfu: MfuDocument


class AttemptDocument(Document):
    attempt: int
    status: AttemptStatus
    run_id: str | None
    started: float
    ended: float | None
    exit_codes: list[int | None] | None
    failed_rank: int | None
    message: str | None
    #: The attempt's MLflow run page, or None.
    run_url: str | None
    #: ``[]`` on one machine.
    nodes: list[AttemptNode]
    #: The checkpoint it started from (a retry's, or ``--resume JOB``'s), and its step.
    resumed_from: str | None
    resumed_step: int | None
    #: None before its first step is marked (or where no marks are at hand).
    progress: ProgressDocument | None
    #: The collective its ranks were last seen waiting in (``HangDocument.line``), from
    #: the latest set of stacks that named one; None if none did.
    hang: str | None


class JobDocument(Document):
    """``GET jupyter-air/jobs/<id>``, and each of ``GET jupyter-air/jobs``'s ``jobs``."""

    id: str
    #: The outcome as soon as the last attempt settles it (``finishing`` then true).
    status: JobStatus
    #: Its supervisor still finishes the run's tail in MLflow (its end, its logs).
    finishing: bool
    #: What waits for the tracking server, in one line (``tracking: http://...
    #: unreachable since 18:00:27; 412 points waiting``), or None when nothing does.
    tracking: str | None
    owner: str
    created: float
    started: float | None
    ended: float | None
    message: str | None
    kind: JobKind
    nproc_per_node: int
    nnodes: int
    backend: str
    max_retries: int
    #: Where its checkpoints go (``AIR_CHECKPOINT_DIR``), the same for every attempt.
    checkpoint_dir: str | None
    experiment_id: str | None
    run_name: str | None
    tracking_uri: str | None
    logs_expired: bool
    attempts: list[AttemptDocument]
    #: The job that submitted this one (a scheduled notebook's task, for its cells).
    parent_id: str | None
    #: The jobs this one submitted that the caller may view, oldest first.
    children: list[str]
    #: Its notifications, one line each (``notify.outbox.Record.line``): for its owner only.
    notifications: list[str]


# -- stacks ----------------------------------------------------------------------------


class RankStacksDocument(Document):
    """One rank's Python stacks (all threads, native frames where py-spy reads them)."""

    rank: int
    node: int
    pid: int
    #: py-spy's dump; None when it could not be taken (``error`` says why).
    text: str | None
    error: str | None


class HangDocument(Document):
    """Where the ranks of a set wait, from their flight recorders (``jobs.hangs``)."""

    kind: Literal["absent", "mismatch", "waiting", "none", "unknown"]
    #: ``ranks 0, 2, 3 wait in all_reduce #812 (float32[1024], gloo); rank 1 never ...``
    line: str
    #: A line a rank (where it waits, or its last collective and where it is instead).
    details: list[str]
    #: The collective: its process group's id, number and op (null where none waits).
    group: str | None
    seq: int | None
    op: str | None
    waiting: list[int]
    #: The ranks that never entered it, or that entered another one.
    culprits: list[int]


class StackSetDocument(Document):
    """One set of stacks of an attempt's ranks (``jobs.node.stacks``)."""

    attempt: int
    name: str
    #: Why it was taken: asked for, a likely hang's hint, a cancel after one.
    reason: str
    time: float
    ranks: list[RankStacksDocument]
    #: What the ranks' flight recorders say; null when none was on.
    hang: HangDocument | None


class StacksPage(Document):
    """``GET``/``POST jupyter-air/jobs/<id>/stacks``: the saved sets, oldest first; or the
    one just taken."""

    job: str
    sets: list[StackSetDocument]


def stack_set_document(attempt: int, taken: StackSet, rank: int | None = None) -> StackSetDocument:
    return StackSetDocument(
        attempt=attempt,
        name=taken.name,
        reason=taken.reason,
        time=taken.time,
        ranks=[
            RankStacksDocument(rank=s.rank, node=s.node, pid=s.pid, text=s.text, error=s.error)
            for s in taken.stacks
            if rank is None or s.rank == rank
        ],
        hang=HangDocument.model_validate(taken.hang.to_json()) if taken.hang else None,
    )


# -- logs ------------------------------------------------------------------------------


class LogLineDocument(TypedDict):
    """One line of ``GET jupyter-air/jobs/<id>/logs`` (``line_document``); a session's
    lines also have the keys ``cell`` and ``cell_id``, which others do not have.

    A TypedDict, not a model: a key that is there or not is what it says, and a page
    of 10,000 lines is validated without making an object of each."""

    t: float
    node: int
    rank: int
    stream: Stream
    level: LevelName
    text: str
    #: The number of the session cell whose time span holds the line (None: between cells).
    cell: NotRequired[int | None]
    #: The notebook cell's id, when known.
    cell_id: NotRequired[str | None]


def line_document(line: LogLine) -> LogLineDocument:
    return {
        "t": line.t,
        "node": line.node,
        "rank": line.rank,
        "stream": line.stream,
        "level": line.level,
        "text": line.text,
    }


class LogsPage(Document):
    """``GET jupyter-air/jobs/<id>/logs``."""

    job: str
    attempt: int
    #: The job's attempts so far.
    attempts: int
    #: The job's status.
    status: JobStatus
    lines: list[LogLineDocument]
    #: The cursor of the lines after these.
    next: str
    #: The job ended and every log of the attempt was read to its end.
    done: bool


class SessionCellDocument(Document):
    """An ended cell of a session (``session_cells.CellRecord``)."""

    cell: int
    run_id: str
    cell_id: str | None
    started: float
    ended: float
    #: How its run ended.
    status: AttemptStatus


class SessionCells(Document):
    """``GET jupyter-air/jobs/<id>/cells``."""

    job: str
    cells: list[SessionCellDocument]


# -- runs ------------------------------------------------------------------------------


class TrackingStoreDocument(Document):
    """A tracking store that the caller's jobs used, by key (``tracking.stores``)."""

    store: str
    #: Without credentials.
    tracking_uri: str
    #: The server's own store (where a notebook without jobs yet will log).
    current: bool


class TrackingStores(Document):
    """``GET jupyter-air/runs/stores``: newest first."""

    stores: list[TrackingStoreDocument]


# -- notifications ---------------------------------------------------------------------


class NotificationLink(Document):
    label: str
    url: str


class LabNotification(Document):
    """One of a user's JupyterLab notifications (``notify.message.Message``)."""

    id: int
    created: float
    event: str
    level: Literal["info", "success", "warning", "error"]
    title: str
    #: Each [label, value].
    facts: list[list[str]]
    lines: list[str]
    links: list[NotificationLink]
    command: str | None
    job_id: str | None
    schedule_id: str | None


class NotificationsPage(Document):
    """``GET jupyter-air/notifications``: the caller's, after ``after``; ``last`` is the
    next poll's ``after``."""

    notifications: list[LabNotification]
    last: int


# -- permissions -----------------------------------------------------------------------


class GrantDocument(Document):
    """``Grant.as_json``."""

    kind: Literal["user", "group"]
    name: str
    level: PermissionLevel


class CallerLevel(Document):
    name: str
    #: None: none (only after a change that removed it).
    level: PermissionLevel | None


class JobPermissions(Document):
    """``GET jupyter-air/jobs/<id>/permissions``."""

    job: str
    owner: str
    grants: list[GrantDocument]
    you: CallerLevel


class MirrorOutcome(Document):
    """``tracking.permissions.ChangeResult``: what became of one grant in MLflow."""

    grantee: str
    group: bool
    level: str | None
    action: Action
    permission: str | None
    error: str | None


class MirrorReportDocument(Document):
    """``tracking.permissions.MirrorReport.to_json``."""

    status: MirrorStatus
    experiment_id: str
    notice: str | None
    outcomes: list[MirrorOutcome]


class JobPermissionsChange(JobPermissions):
    """``PUT jupyter-air/jobs/<id>/permissions`` (and ``air permissions --output json``):
    the permissions after the change, and what became of it on the job's MLflow
    experiment (None: the job has none, or nothing was changed)."""

    mlflow: MirrorReportDocument | None


def permissions_document(access: JobAccess, who: Identity) -> JobPermissions:
    """The job's owner and grants, and the level ``who`` holds."""
    level = access.level_of(who)
    return JobPermissions(
        job=access.job_id,
        owner=access.owner,
        grants=[GrantDocument.model_validate(g.as_json()) for g in access.grants],
        you=CallerLevel.model_validate({"name": who.name, "level": level.name if level else None}),
    )


def change_document(
    access: JobAccess, who: Identity, report: MirrorReport | None
) -> JobPermissionsChange:
    """The permissions after a change, with ``report``: the change on MLflow's side."""
    mlflow = None if report is None else MirrorReportDocument.model_validate(report.to_json())
    return JobPermissionsChange(**dict(permissions_document(access, who)), mlflow=mlflow)
