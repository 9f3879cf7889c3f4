"""The jobs and logs routes, against a real Jupyter server that refuses anonymous access."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_air.jobs.node import stacks
from jupyter_air.jobs.store import JobStore
from jupyter_air.logs.capture import RankLog
from jupyter_air.logs.query import LogFilter, read_all
from jupyter_air.logs.text import format_line
from tests.factories import job_spec
from tests.marks import write_marks

ROUTES = [
    ("GET", "jupyter-air/jobs"),
    ("GET", "jupyter-air/jobs/{id}"),
    ("GET", "jupyter-air/jobs/{id}/logs"),
    ("GET", "jupyter-air/jobs/{id}/logs/download"),
    ("POST", "jupyter-air/jobs/{id}/cancel"),
    ("GET", "jupyter-air/jobs/{id}/stacks"),
    ("POST", "jupyter-air/jobs/{id}/stacks"),
]


@pytest.fixture
def finished_job(store: JobStore) -> str:
    """A finished 2-rank job with known lines, as the supervisor would have left it."""
    workload = job_spec(
        kind="python", nproc_per_node=2, tracking_uri="sqlite:////tmp/x.db", experiment_id="3"
    )
    job = store.create(workload)
    store.start_attempt(job.id, 1, "run1")
    logs = store.attempt_dir(job.id, 1) / "logs" / "node_0"
    for rank, records in {
        0: [
            (10.0, "OI", "hello from 0"),
            (12.0, "EW", "WARNING: slow step"),
            (14.0, "OI", "bye 0"),
        ],
        1: [(11.0, "OI", "hello from 1"), (13.0, "EE", "Traceback (most recent call last):")],
    }.items():
        log = RankLog(logs / f"rank_{rank}.log")
        for ts, kind, text in records:
            log.write(kind, text, ts=ts)
        log.close()
    store.end_attempt(
        job.id, 1, "FAILED", [0, 1], failed_rank=1, message="rank 1 exited with code 1"
    )
    store.update(job.id, status="FAILED", ended=20.0)
    return job.id


async def get_json(jp_fetch: Any, *parts: str, **params: Any) -> Any:
    return json.loads((await jp_fetch(*parts, params=params)).body)


async def test_the_list_shows_active_jobs_and_all_with_all(
    jp_fetch: Any, finished_job: str
) -> None:
    assert (await get_json(jp_fetch, "jupyter-air", "jobs"))["jobs"] == []
    (job,) = (await get_json(jp_fetch, "jupyter-air", "jobs", all="1"))["jobs"]
    assert job["id"] == finished_job
    assert job["status"] == "FAILED"
    assert job["attempts"][0]["failed_rank"] == 1
    assert "/jupyter-air/mlflow/" in job["attempts"][0]["run_url"]
    assert job["attempts"][0]["run_url"].endswith(
        "#/experiments/3/runs/run1?workflowType=machine_learning"
    )


async def test_logs_are_merged_filtered_and_paged(jp_fetch: Any, finished_job: str) -> None:
    doc = await get_json(jp_fetch, "jupyter-air", "jobs", finished_job, "logs")
    assert [line["text"] for line in doc["lines"]][:2] == ["hello from 0", "hello from 1"]
    assert doc["done"] is True
    assert (doc["attempt"], doc["attempts"], doc["status"]) == (1, 1, "FAILED")
    errors = await get_json(jp_fetch, "jupyter-air", "jobs", finished_job, "logs", level="error")
    assert [(line["rank"], line["level"]) for line in errors["lines"]] == [(1, "error")]
    rank0 = await get_json(
        jp_fetch, "jupyter-air", "jobs", finished_job, "logs", rank="0", search="BYE"
    )
    assert [line["text"] for line in rank0["lines"]] == ["bye 0"]
    first = await get_json(jp_fetch, "jupyter-air", "jobs", finished_job, "logs", limit="2")
    assert first["done"] is False
    rest = await get_json(
        jp_fetch, "jupyter-air", "jobs", finished_job, "logs", cursor=first["next"]
    )
    assert len(first["lines"]) + len(rest["lines"]) == 5
    tail = await get_json(jp_fetch, "jupyter-air", "jobs", finished_job, "logs", tail="1")
    assert [line["text"] for line in tail["lines"]] == ["bye 0"]


async def test_download_has_every_matching_line(jp_fetch: Any, finished_job: str) -> None:
    response = await jp_fetch(
        "jupyter-air", "jobs", finished_job, "logs", "download", params={"level": "warning"}
    )
    assert response.headers["Content-Disposition"] == (
        f'attachment; filename="{finished_job}-attempt-1.log"'
    )
    assert response.body.decode().splitlines() == [
        "1970-01-01T00:00:12.000Z node 0 rank 0 WARNING WARNING: slow step",
        "1970-01-01T00:00:13.000Z node 0 rank 1 ERROR Traceback (most recent call last):",
    ]


async def test_a_whole_download_is_the_text_air_logs_prints(
    jp_fetch: Any, finished_job: str, store: JobStore
) -> None:
    lines = read_all(store.attempt_dir(finished_job, 1), LogFilter())
    expected = "".join(map(format_line, lines))
    response = await jp_fetch("jupyter-air", "jobs", finished_job, "logs", "download")
    assert response.body.decode() == expected
    assert len(expected.splitlines()) == 5


async def test_cancelling_an_ended_job_is_409(jp_fetch: Any, finished_job: str) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-air", "jobs", finished_job, "cancel", method="POST", body=b"")
    assert err.value.code == 409


async def test_the_stacks_taken_of_a_job_are_read_back_and_an_ended_one_takes_none(
    jp_fetch: Any, store: JobStore, finished_job: str
) -> None:
    stacks.save(
        store.attempt_dir(finished_job, 1),
        "20261204-183102-a1b2c3",
        "cancelled after rank 1 went silent",
        [
            stacks.RankStacks(0, 0, 4242, "all_reduce (c10d.py:2806)"),
            stacks.RankStacks(1, 0, 4243, None, "py-spy: permission denied"),
        ],
    )
    page = await get_json(jp_fetch, "jupyter-air", "jobs", finished_job, "stacks")
    ((taken,),) = [page["sets"]]
    assert (page["job"], taken["attempt"], taken["name"]) == (
        finished_job,
        1,
        "20261204-183102-a1b2c3",
    )
    assert taken["reason"] == "cancelled after rank 1 went silent"
    assert taken["ranks"] == [
        {"rank": 0, "node": 0, "pid": 4242, "text": "all_reduce (c10d.py:2806)", "error": None},
        {"rank": 1, "node": 0, "pid": 4243, "text": None, "error": "py-spy: permission denied"},
    ]
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-air", "jobs", finished_job, "stacks", method="POST", body=b"")
    assert err.value.code == 409
    assert err.value.response is not None
    message = json.loads(err.value.response.body)["error"]["message"]
    assert f"runs no rank now (failed): its saved stacks are at air stacks {finished_job}" in (
        message
    )


@pytest.mark.parametrize(("method", "route"), ROUTES)
async def test_every_route_refuses_requests_without_a_token(
    jp_fetch: Any, finished_job: str, method: str, route: str
) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(
            route.format(id=finished_job),
            method=method,
            headers={"Authorization": ""},
            body=b"" if method == "POST" else None,
        )
    assert err.value.code == 403


@pytest.mark.parametrize("job_id", ["..", "20261129-000000-zzzzzz", "..%2F..%2Fetc", "a/../b"])
async def test_unknown_and_traversal_ids_are_404(jp_fetch: Any, job_id: str) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(f"jupyter-air/jobs/{job_id}/logs")
    assert err.value.code == 404


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"level": "debug"}, "level must be one of"),
        ({"rank": "-1"}, "'rank' must be between"),
        ({"rank": "one"}, "'rank' must be an integer"),
        ({"search": "(", "regex": "1"}, "not a valid regular expression"),
        ({"cursor": "garbage"}, "cursor"),
        ({"attempt": "2"}, "attempt 2 of job"),
        ({"since": "soon"}, "'since' must be a number"),
    ],
)
async def test_bad_filters_are_400(
    jp_fetch: Any, finished_job: str, params: dict[str, str], message: str
) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-air", "jobs", finished_job, "logs", params=params)
    assert err.value.code == 400
    assert err.value.response is not None
    assert message in json.loads(err.value.response.body)["error"]["message"]


async def test_a_running_attempt_carries_its_progress_and_an_unmarked_one_none(
    jp_fetch: Any, store: JobStore, finished_job: str
) -> None:
    job = store.create(job_spec(kind="python", nproc_per_node=2))
    store.update(job.id, status="RUNNING")
    store.start_attempt(job.id, 1, "run2")
    write_marks(store.attempt_dir(job.id, 1), steps=30, every=0.5, end=time.time(), plan=None)
    (listed,) = (await get_json(jp_fetch, "jupyter-air", "jobs"))["jobs"]
    progress = listed["attempts"][0]["progress"]
    assert (
        progress
        == (await get_json(jp_fetch, "jupyter-air", "jobs", job.id))["attempts"][0]["progress"]
    )
    assert (progress["step"], progress["total"], progress["eta_s"]) == (30, None, None)
    assert progress["line"] == "step 30, 2.0 steps/s"
    assert progress["mfu"]["value"] is None
    assert progress["mfu"]["why"]
    ended = await get_json(jp_fetch, "jupyter-air", "jobs", finished_job)
    assert ended["attempts"][0]["progress"] is None
