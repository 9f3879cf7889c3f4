"""The logs of one cell of a session: its lines are those of the cell's time span, read
through the logs route's ``cell`` parameter and ``air logs --cell``, behind the job's own
permission check."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jupyter_air import cli
from jupyter_air.job_dir import JobDir
from jupyter_air.jobs.permissions import Level, parse_grant
from jupyter_air.jobs.sessions import cells as session_cells
from jupyter_air.jobs.sessions.cells import CellRecord, LatestCell
from jupyter_air.jobs.store import JobStore
from jupyter_air.logs.capture import RankLog
from tests.factories import job_spec
from tests.server.test_server_permissions import (  # the server of that file: callers by header
    CALLERS,
    call,
    jp_server_config,  # noqa: F401
    refusal,
)

#: (time, rank, text): two cells of a two-rank session, and a line between them.
LINES = [
    (10.0, 0, "cell 1 rank 0"),
    (10.5, 1, "cell 1 rank 1"),
    (15.0, 0, "between cells"),
    (20.0, 1, "cell 2 rank 1"),
    (21.0, 0, "cell 2 rank 0"),
]


def make_session(store: JobStore, owner: str | None = None, grants: tuple[str, ...] = ()) -> str:
    """A session job with two ended cells (1 and 2) and its ranks' lines, as a kernel and a
    supervisor would have left them."""
    workload = job_spec("session", nproc_per_node=2, command=["python"])
    job = store.create(workload, owner=owner, grants=tuple(parse_grant(g) for g in grants))
    store.start_attempt(job.id, 1, "parent")
    logs = store.attempt_dir(job.id, 1) / "logs" / "node_0"
    for rank in (0, 1):
        log = RankLog(logs / f"rank_{rank}.log")
        for ts, _, text in (line for line in LINES if line[1] == rank):
            log.write("OI", text, ts=ts)
        log.close()
    files = JobDir(store.job_dir(job.id))
    session_cells.record(files, CellRecord(1, "run1", "abc", 9.9, 11.0, "SUCCEEDED"))
    session_cells.record(files, CellRecord(2, "run2", None, 19.5, 21.5, "FAILED"))
    return job.id


@pytest.fixture
def alices_session(store: JobStore) -> str:
    return make_session(store, owner="alice", grants=("bob:CAN_VIEW",))


def test_cells_are_read_back_in_order_and_a_cut_line_is_left_out(store: JobStore) -> None:
    job_id = make_session(store)
    files = JobDir(store.job_dir(job_id))
    with files.session_cells.open("a") as out:
        out.write('{"cell": 3, "run_')  # a kernel killed while writing
    assert [(c.cell, c.run_id, c.status) for c in session_cells.cells(files)] == [
        (1, "run1", "SUCCEEDED"),
        (2, "run2", "FAILED"),
    ]
    assert oct(files.session_cells.stat().st_mode & 0o777) == "0o600"


def test_the_latest_cell_says_whether_the_session_is_idle_and_since_when(
    store: JobStore,
) -> None:
    files = JobDir(store.job_dir(make_session(store)))
    assert session_cells.latest(files) is None
    assert session_cells.idle_since(files, session_started=5.0) == 5.0  # no cell yet

    session_cells.set_latest(files, LatestCell(3, "run3", started=30.0))
    assert session_cells.latest(files) == LatestCell(3, "run3", 30.0, None)
    assert session_cells.idle_since(files, session_started=5.0) is None  # cell 3 runs

    session_cells.set_latest(files, LatestCell(3, "run3", started=30.0, ended=42.0))
    assert session_cells.idle_since(files, session_started=5.0) == 42.0
    assert oct(files.session_cell.stat().st_mode & 0o777) == "0o600"


def test_an_unreadable_latest_cell_reads_as_none(store: JobStore) -> None:
    files = JobDir(store.job_dir(make_session(store)))
    files.session_cell.write_text('{"cell": 3, "run_id": "run3", "sta')
    assert session_cells.latest(files) is None
    files.session_cell.write_text('{"cell": 3, "what": 1}')
    assert session_cells.latest(files) is None


def test_a_latest_cell_with_a_field_of_a_later_version_still_reads(store: JobStore) -> None:
    files = JobDir(store.job_dir(make_session(store)))
    files.session_cell.write_text('{"cell": 3, "run_id": "run3", "started": 30.0, "new": 1}')
    assert session_cells.latest(files) == LatestCell(3, "run3", 30.0)


async def test_the_logs_route_shows_one_cell_and_each_lines_cell_to_a_viewer(
    jp_fetch: Any, alices_session: str
) -> None:
    route = f"jupyter-air/jobs/{alices_session}/logs?cell=2"
    doc = json.loads((await call(jp_fetch, "viewer", "GET", route)).body)
    assert [(line["rank"], line["text"]) for line in doc["lines"]] == [
        (1, "cell 2 rank 1"),
        (0, "cell 2 rank 0"),
    ]
    every = json.loads(
        (await call(jp_fetch, "viewer", "GET", f"jupyter-air/jobs/{alices_session}/logs")).body
    )
    assert [line["text"] for line in every["lines"]] == [text for *_, text in LINES]
    assert [(line["cell"], line["cell_id"]) for line in every["lines"]] == [
        (1, "abc"),
        (1, "abc"),
        (None, None),  # printed between cells
        (2, None),
        (2, None),
    ]
    download = await call(jp_fetch, "viewer", "GET", route.replace("/logs?", "/logs/download?"))
    assert "cell 2 rank 0" in download.body.decode()
    assert "cell 1" not in download.body.decode()


async def test_a_caller_without_a_grant_learns_nothing_of_the_cells(
    jp_fetch: Any, alices_session: str
) -> None:
    """Forbidden the same way for a cell that exists and one that does not."""
    assert CALLERS["stranger"][1] is None
    for cell in ("1", "99"):
        route = f"jupyter-air/jobs/{alices_session}/logs?cell={cell}"
        code, error = await refusal(jp_fetch, "stranger", "GET", route)
        assert (code, error["needed"]) == (403, Level.CAN_VIEW.name)


@pytest.mark.parametrize(
    ("cell", "status", "message"),
    [
        ("99", 404, "has no ended cell 99"),
        ("0", 400, "'cell' must be between 1"),
        ("one", 400, "'cell' must be an integer"),
    ],
)
async def test_a_bad_or_unknown_cell_is_refused_in_one_line(
    jp_fetch: Any, alices_session: str, cell: str, status: int, message: str
) -> None:
    route = f"jupyter-air/jobs/{alices_session}/logs?cell={cell}"
    code, error = await refusal(jp_fetch, "owner", "GET", route)
    assert code == status
    assert message in error["message"]


async def test_a_job_that_is_not_a_session_has_no_cells(jp_fetch: Any, store: JobStore) -> None:
    job = store.create(job_spec("command", command=["true"]), owner="alice")
    store.start_attempt(job.id, 1, None)
    code, error = await refusal(jp_fetch, "owner", "GET", f"jupyter-air/jobs/{job.id}/logs?cell=1")
    assert (code, error["message"]) == (400, f"job {job.id} is not a session: it has no cells")


def test_air_logs_shows_one_cell(store: JobStore, capsys: pytest.CaptureFixture[str]) -> None:
    job_id = make_session(store)
    assert cli.main(["logs", job_id, "--cell", "1", "--rank", "1"]) == 0
    (shown,) = capsys.readouterr().out.splitlines()
    assert shown.endswith(" rank 1 INFO cell 1 rank 1")
    assert cli.main(["logs", job_id, "--cell", "7"]) == 1
    assert capsys.readouterr().err == f"air: session {job_id} has no ended cell 7\n"
