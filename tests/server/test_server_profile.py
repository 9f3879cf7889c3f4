"""The profile routes as attacks (issue 38, item 5): on alice's running job, only those
who may manage its run can ask every rank for a profile; a viewer, a stranger or a bad
body leave no request for the ranks to see; a viewer reads the profiles; one profile
at a time; a job that runs no rank has none to give."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs.permissions import parse_grant
from jupyter_air.jobs.store import JobStore
from jupyter_air.perf import profiles
from tests.factories import job_spec
from tests.server.test_server_permissions import (  # noqa: F401 (its server's config)
    GRANTS,
    call,
    jp_server_config,
    refusal,
)

ROUTE = "jupyter-air/jobs/{id}/profiles"


@pytest.fixture
def running(store: JobStore) -> str:
    """alice's 2-rank job in its first attempt, shared at every level."""
    grants = tuple(parse_grant(g) for g in GRANTS)
    spec = job_spec("command", command=["true"], nproc_per_node=2)
    job = store.create(spec, owner="alice", grants=grants)
    store.start_attempt(job.id, 1, None)
    store.update(job.id, status="RUNNING", started=1.0)
    return job.id


def asked(store: JobStore, job: str) -> Path:
    return profiles.request_file(AttemptDir(store.attempt_dir(job, 1)).perf)


@pytest.mark.parametrize("who", ["stranger", "viewer"])
async def test_only_who_may_manage_the_run_asks_for_a_profile(
    jp_fetch: Any, store: JobStore, running: str, who: str
) -> None:
    code, error = await refusal(jp_fetch, who, "POST", ROUTE.format(id=running), {"steps": 5})
    assert code == 403
    assert error["needed"] == "CAN_MANAGE_RUN"
    assert error["message"] == (
        f"You don't have CAN_MANAGE_RUN on job {running}: its owner, alice, can grant it"
    )
    assert not asked(store, running).exists()


async def test_a_runner_asks_the_ranks_and_a_viewer_reads_the_profile(
    jp_fetch: Any, store: JobStore, running: str
) -> None:
    route = ROUTE.format(id=running)
    answer = await call(jp_fetch, "runner", "POST", route, {"steps": 3, "timeout": 30})
    assert answer.code == 202
    profile = json.loads(answer.body)
    assert (profile["steps"], profile["ranks"], profile["by"]) == (3, 2, "rita")
    assert profile["state"] == "waiting"
    request = json.loads(asked(store, running).read_text())
    assert (request["id"], request["steps"]) == (profile["id"], 3)
    assert oct(asked(store, running).stat().st_mode & 0o777) == "0o600"

    code, error = await refusal(jp_fetch, "group", "POST", route, {"steps": 5})
    assert code == 409
    assert "a profile of job" in error["message"]
    assert "asked by rita" in error["message"]

    listing = json.loads((await call(jp_fetch, "viewer", "GET", route)).body)
    assert listing["running"] is True
    assert [p["id"] for p in listing["profiles"]] == [profile["id"]]
    assert (await refusal(jp_fetch, "stranger", "GET", route))[0] == 403
    trace = f"{route}/{profile['id']}/trace"
    assert (await refusal(jp_fetch, "viewer", "GET", trace))[0] == 404  # not merged yet
    assert (await refusal(jp_fetch, "stranger", "GET", trace))[0] == 403


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"steps": 0}, "steps must be 1 to 100"),
        ({"steps": 101}, "steps must be 1 to 100"),
        ({"steps": "5"}, "'steps' must be an integer"),
        ({"steps": True}, "'steps' must be an integer"),
        ({"steps": 5, "timeout": -1}, "the timeout must be more than 0"),
        ({"steps": 5, "rank": 0}, 'the body is {"steps": N, "timeout": seconds}'),
        ("[1]", 'the body is {"steps": N, "timeout": seconds}'),
        ("{", "the body must be JSON"),
    ],
)
async def test_a_bad_body_is_400_and_asks_nothing(
    jp_fetch: Any, store: JobStore, running: str, body: Any, says: str
) -> None:
    code, error = await refusal(jp_fetch, "owner", "POST", ROUTE.format(id=running), body)
    assert code == 400
    assert says in error["message"]
    assert not asked(store, running).exists()


async def test_a_job_that_runs_no_rank_has_no_profile_to_give(
    jp_fetch: Any, store: JobStore, running: str
) -> None:
    store.update(running, status="SUCCEEDED", ended=2.0)
    code, error = await refusal(jp_fetch, "owner", "POST", ROUTE.format(id=running), {})
    assert code == 409
    assert error["message"] == f"job {running} runs no rank now (succeeded): no profile"
