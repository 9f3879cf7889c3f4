"""``GET jupyter-air/jobs/<id>/cells``: a session's ended cells for the logs view's cell
picker, behind the job's own permission."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jupyter_air.jobs.permissions import Level
from jupyter_air.jobs.store import JobStore
from tests.factories import job_spec
from tests.jobs.test_session_cells import make_session
from tests.server.test_server_permissions import (  # the server of that file: callers by header
    call,
    jp_server_config,  # noqa: F401
    refusal,
)


@pytest.fixture
def alices_session(store: JobStore) -> str:
    return make_session(store, owner="alice", grants=("bob:CAN_VIEW",))


async def test_a_viewer_reads_the_cells_in_order(jp_fetch: Any, alices_session: str) -> None:
    doc = json.loads(
        (await call(jp_fetch, "viewer", "GET", f"jupyter-air/jobs/{alices_session}/cells")).body
    )
    assert doc == {
        "job": alices_session,
        "cells": [
            {
                "cell": 1,
                "run_id": "run1",
                "cell_id": "abc",
                "started": 9.9,
                "ended": 11.0,
                "status": "SUCCEEDED",
            },
            {
                "cell": 2,
                "run_id": "run2",
                "cell_id": None,
                "started": 19.5,
                "ended": 21.5,
                "status": "FAILED",
            },
        ],
    }


async def test_a_caller_without_can_view_gets_403_and_nothing_of_the_cells(
    jp_fetch: Any, alices_session: str
) -> None:
    code, error = await refusal(
        jp_fetch, "stranger", "GET", f"jupyter-air/jobs/{alices_session}/cells"
    )
    assert (code, error["needed"]) == (403, Level.CAN_VIEW.name)
    assert "run1" not in json.dumps(error)


async def test_a_job_that_is_not_a_session_is_a_400(jp_fetch: Any, store: JobStore) -> None:
    job = store.create(job_spec("command", command=["true"]), owner="alice")
    code, error = await refusal(jp_fetch, "owner", "GET", f"jupyter-air/jobs/{job.id}/cells")
    assert (code, error["message"]) == (400, f"job {job.id} is not a session: it has no cells")


async def test_a_session_before_its_first_cell_has_none(jp_fetch: Any, store: JobStore) -> None:
    job = store.create(job_spec("session", command=["python"]), owner="alice")
    answer = await call(jp_fetch, "owner", "GET", f"jupyter-air/jobs/{job.id}/cells")
    doc = json.loads(answer.body)
    assert doc == {"job": job.id, "cells": []}
