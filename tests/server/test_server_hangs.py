"""Who may read a job's flight recorders and the hang they name (issue 39, item 1), as an
attack on the API: alice's job holds a set of stacks whose recorders name the
collective its ranks wait in (real recorders, ``tests/jobs/flight_dumps``); a stranger
gets nothing of it from any route, a CAN_VIEW grantee reads it, and only CAN_MANAGE_RUN
may have the ranks' recorders read again."""

from __future__ import annotations

import json
from typing import Any

from jupyter_air.jobs.node import stacks
from jupyter_air.jobs.store import JobStore
from tests.jobs.test_hangs import recorded
from tests.server import test_server_permissions as permissions
from tests.server.test_server_permissions import call, refusal

#: The server with its test identities, and alice's job shared at every level.
jp_server_config = permissions.jp_server_config
job = permissions.job

#: What the recorders say, and what none but a grantee may read of it.
SECRET = "rank 1 never entered it"


def hung_set(store: JobStore, job_id: str) -> None:
    recorders, dumps = recorded("absent")
    taken = [stacks.RankStacks(r, 0, 100 + r, dumps[r], None, recorders[r]) for r in (0, 1)]
    stacks.save(store.attempt_dir(job_id, 1), stacks.new_name(), "a likely hang", taken)


async def test_a_stranger_reads_no_recorder_a_viewer_reads_them_and_cannot_ask_again(
    jp_fetch: Any, job: str, store: JobStore
) -> None:
    hung_set(store, job)
    for route in (f"jupyter-air/jobs/{job}/stacks", f"jupyter-air/jobs/{job}"):
        code, error = await refusal(jp_fetch, "stranger", "GET", route)
        assert code == 403
        assert SECRET not in json.dumps(error)
    listed = await call(jp_fetch, "stranger", "GET", "jupyter-air/jobs?all=1")
    assert SECRET not in listed.body.decode()

    read = await call(jp_fetch, "viewer", "GET", f"jupyter-air/jobs/{job}/stacks")
    page = json.loads(read.body)
    (taken,) = page["sets"]
    assert taken["hang"]["kind"] == "absent"
    assert SECRET in taken["hang"]["line"]
    assert taken["hang"]["culprits"] == [1]
    doc = json.loads((await call(jp_fetch, "viewer", "GET", f"jupyter-air/jobs/{job}")).body)
    assert SECRET in doc["attempts"][0]["hang"]

    code, error = await refusal(jp_fetch, "viewer", "POST", f"jupyter-air/jobs/{job}/stacks")
    assert (code, error["needed"]) == (403, "CAN_MANAGE_RUN"), "reading them again is not a view"
