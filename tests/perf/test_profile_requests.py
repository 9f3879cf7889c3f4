"""Where a profile is asked for (issue 38, item 5): a warm session profiles the cell it
runs, in that cell's own marks folder (where its ranks' marks now go) and onto that
cell's run; a session that runs no cell has none to profile."""

from __future__ import annotations

import time

import pytest

from jupyter_air.identity import os_identity
from jupyter_air.job_dir import JobDir
from jupyter_air.jobs.service import Conflict, JobService
from jupyter_air.jobs.sessions import cells
from jupyter_air.jobs.store import JobStore
from jupyter_air.perf import profiles
from tests.factories import job_spec


def test_a_session_profiles_the_cell_it_runs_onto_that_cells_run(store: JobStore) -> None:
    session = store.create(job_spec("session", command=["loop"], nproc_per_node=2))
    store.update(session.id, status="RUNNING")
    store.start_attempt(session.id, 1, "run-s")
    files = JobDir(store.job_dir(session.id))
    service = JobService(store, os_identity())
    with pytest.raises(Conflict, match=f"session {session.id} runs no cell now"):
        service.profile(session.id)

    cells.set_latest(files, cells.LatestCell(2, "run-c2", time.time()))
    asked = service.profile(session.id, steps=3)
    cell_perf = files.attempt(1).late_cell(2).perf
    assert asked.folder.parent == profiles.profiles_dir(cell_perf)
    assert (asked.run_id, asked.ranks, asked.steps) == ("run-c2", 2, 3)
    assert profiles.request_file(cell_perf).is_file()
    _, found = service.profiles(session.id)
    assert [p.id for p in found] == [asked.id]

    cells.set_latest(files, cells.LatestCell(2, "run-c2", time.time(), ended=time.time()))
    with pytest.raises(Conflict, match="runs no cell now"):
        service.profile(session.id)
