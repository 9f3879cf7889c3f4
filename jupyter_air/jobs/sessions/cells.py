"""A session's cells file (``jobs/<id>/session_cells.jsonl``): which cell ran when, in
which MLflow run; and its latest cell (``session_cell.json``), running or ended, for
those outside the kernel that must know the cell of the moment: the supervisor (whose
system metrics go to the running cell's run) and the GPU panel and ``%air_session status``
(a session with no cell running is idle, since the latest cell's end).

A session's ranks write one log each for the session's whole life; the lines of a cell
are those of its time span. So the logs of one cell are the session's logs narrowed to
that span (``cell_filter``), for ``air logs --cell`` and the logs route's ``cell``
parameter alike: one reader, with the job's own permission checked first by the caller;
and each line's cell is the one whose span holds its time (``cells_of``).
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass

from ...job_dir import AttemptDir, JobDir, read_json, replace_json
from ...logs.query import LogFilter
from ...paths import private_opener
from ...tracking.backlog import Part
from ...tracking.run_tails import NewRun, Tail
from ...tracking.targets import CELL_SOURCE
from ..spec import JobKind
from ..store import Job, JobStore


@dataclass(frozen=True)
class CellRecord:
    """One cell of a session, once it has run."""

    cell: int  # its number in the session, from 1 (its child run is named after it)
    run_id: str  # "": it ran before its run could be made (``--tracking deferred``)
    cell_id: str | None  # the notebook cell's id, when the front end sent it
    started: float
    ended: float
    status: str  # the job status its run ended with: SUCCEEDED, FAILED, CANCELLED


@dataclass(frozen=True)
class LatestCell:
    """A session's latest cell: running while ``ended`` is None. ``previous_ended``: when
    the cell before it ended, for a reader that never saw that end (the next cell can
    start within milliseconds). ``closing``: its ranks have answered and its end's time
    is about to be taken: a reader that saw the cell running without this mark knows
    the end comes after that look, one that sees it waits for the end."""

    cell: int
    run_id: str
    started: float
    ended: float | None = None
    previous_ended: float | None = None
    closing: bool = False


class NotASession(ValueError):
    """Cells were asked of a job that is not a session."""


class NoCell(LookupError):
    """The session has no ended cell of that number."""


def record(files: JobDir, cell: CellRecord) -> None:
    with open(files.session_cells, "a", opener=private_opener) as out:
        out.write(json.dumps(dataclasses.asdict(cell)) + "\n")


def set_latest(files: JobDir, cell: LatestCell) -> None:
    """The kernel says a cell started (its ranks have it) or ended (they all answered)."""
    replace_json(files.session_cell, dataclasses.asdict(cell))


def latest(files: JobDir) -> LatestCell | None:
    """The session's latest cell, or None before its first (or if the file is unreadable)."""
    found = read_json(files.session_cell)
    if not isinstance(found, dict):
        return None
    known = {field.name for field in dataclasses.fields(LatestCell)}
    try:  # a field a later version added is not this one's business
        return LatestCell(**{k: v for k, v in found.items() if k in known})
    except TypeError:
        return None


def idle_since(files: JobDir, session_started: float) -> float | None:
    """When the session's ranks last finished a cell (or the session started, before its
    first cell); None while a cell runs."""
    cell = latest(files)
    if cell is None:
        return session_started
    return cell.ended


def cells(files: JobDir) -> list[CellRecord]:
    """The session's ended cells, in order (a line cut by a crash is left out); a cell
    that ran before its run was made has that run once the tail process made it."""
    try:
        text = files.session_cells.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    found = []
    for line in text.splitlines():
        try:
            cell = CellRecord(**json.loads(line))
        except (ValueError, TypeError):
            continue
        if not cell.run_id and (made := files.attempt(1).late_cell(cell.cell).read_late_run()):
            cell = dataclasses.replace(cell, run_id=made[0])
        found.append(cell)
    return found


@dataclass(frozen=True)
class SessionRun:
    """Where a session's cells' runs go: its server, experiment and own run (their parent)."""

    job_id: str
    tracking_uri: str
    experiment_id: str
    run_id: str


def late_tail(
    session: SessionRun, cell: CellRecord, late: AttemptDir, source: str, tags: Mapping[str, str]
) -> Tail:
    """What the user's tail process does for a cell that ran before its run could be made
    (``late``: its folder, ``AttemptDir.late_cell``): make the run under the session's,
    with the cell's tags and name, ship the cell's own journal to it, set its source
    and end it."""
    run = NewRun(
        session.job_id,
        1,
        session.tracking_uri,
        session.experiment_id,
        None,
        None,
        {"air.job_id": session.job_id, **tags},
        tags.get("mlflow.runName"),
        session.run_id,
    )
    return Tail(
        session.job_id,
        1,
        "",
        cell.status,
        session.tracking_uri,
        str(late.path),
        sample=False,
        parts=(Part.METRICS, Part.END),
        new_run=dataclasses.asdict(run),
        end_tags=dict(tags),
        cell=cell.cell,
        texts={CELL_SOURCE: source},
    )


def cells_of(cells: list[CellRecord], times: list[float]) -> list[CellRecord | None]:
    """The cell each time (a log line's) falls in, or None (between cells)."""
    starts = [cell.started for cell in cells]
    found: list[CellRecord | None] = []
    for t in times:
        at = bisect.bisect_right(starts, t) - 1
        found.append(cells[at] if at >= 0 and t <= cells[at].ended else None)
    return found


def cell_filter(store: JobStore, job: Job, flt: LogFilter, number: int) -> LogFilter:
    """``flt`` narrowed to the lines of cell ``number`` of session ``job``."""
    if job.spec.kind is not JobKind.SESSION:
        raise NotASession(f"job {job.id} is not a session: it has no cells")
    for cell in cells(JobDir(store.job_dir(job.id))):
        if cell.cell == number:
            since = cell.started if flt.since is None else max(flt.since, cell.started)
            until = cell.ended if flt.until is None else min(flt.until, cell.ended)
            return dataclasses.replace(flt, since=since, until=until)
    raise NoCell(f"session {job.id} has no ended cell {number}")
