"""The GPUs of a multi-node job's nodes, as the panel reads them from the server.

The job is fabricated in the store the way the supervisor leaves it: a running 2-node
attempt, its ``nodes.json``, and per node the snapshot that node's sampler took (a
real ``GpuSampler`` on the fake driver, with the full history).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs.store import JobStore
from tests.conftest import WriteScenario
from tests.factories import job_spec
from tests.fake_nvml import FakeGpu, Scenario
from tests.gpu.snapshots import sampler_snapshot

NODES = [
    {"node": 0, "node_id": "a0" * 28, "ip": "10.0.0.5", "hostname": "gpu-a"},
    {"node": 1, "node_id": "b1" * 28, "ip": "10.0.0.6", "hostname": "gpu-b"},
]
NODE_GPUS = [
    [FakeGpu(name="NVIDIA A100-SXM4-40GB", util=11)],
    [FakeGpu(name="NVIDIA H100 80GB HBM3", util=77), FakeGpu(name="NVIDIA H100 80GB HBM3")],
]
SAMPLES_PER_NODE = 3


def node_snapshot(scenario: WriteScenario, gpus: list[FakeGpu]) -> dict[str, Any]:
    """What a node agent's sampler hands the supervisor: the whole document, full history."""
    scenario(Scenario(gpus=gpus))
    return sampler_snapshot(SAMPLES_PER_NODE)


@pytest.fixture
def job(store: JobStore, scenario: WriteScenario) -> str:
    """A running 2-node job whose supervisor has written its nodes and their samples."""
    job = store.create(job_spec("command", command=["python", "train.py"], nnodes=2))
    store.update(job.id, status="RUNNING")
    store.start_attempt(job.id, 1, None)
    attempt_dir = store.attempt_dir(job.id, 1)
    AttemptDir(attempt_dir).write_nodes(NODES)
    for node, gpus in enumerate(NODE_GPUS):
        AttemptDir(attempt_dir).write_gpu(node, node_snapshot(scenario, gpus))
    scenario(Scenario(gpus=[FakeGpu(name="This server's GPU")]))
    return job.id


async def get_json(jp_fetch: Any, *parts: str, **params: Any) -> Any:
    return json.loads((await jp_fetch(*parts, params=params)).body)


async def node_gpu(jp_fetch: Any, job: str, **params: Any) -> Any:
    return await get_json(jp_fetch, "jupyter-air", "jobs", job, "gpu", **params)


async def error_of(jp_fetch: Any, *parts: str, **params: Any) -> tuple[int, dict[str, str]]:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(*parts, params=params)
    assert err.value.response is not None
    return err.value.code, json.loads(err.value.response.body)["error"]


async def test_the_gpu_answer_lists_the_nodes_of_running_jobs_until_they_end(
    jp_fetch: Any, store: JobStore, job: str
) -> None:
    doc = await get_json(jp_fetch, "jupyter-air", "gpu")
    assert doc["gpus"][0]["name"] == "This server's GPU"
    assert doc["nodes"] == [{"job": job, "attempt": 1, **node} for node in NODES]

    store.update(job, status="SUCCEEDED")
    assert (await get_json(jp_fetch, "jupyter-air", "gpu"))["nodes"] == []


async def test_only_the_latest_attempt_of_a_running_job_is_listed(
    jp_fetch: Any, store: JobStore, job: str
) -> None:
    store.end_attempt(job, 1, "FAILED", [0, 1], failed_rank=1)
    store.start_attempt(job, 2, None)
    assert (await get_json(jp_fetch, "jupyter-air", "gpu"))["nodes"] == []

    AttemptDir(store.attempt_dir(job, 2)).write_nodes(NODES[1:])
    (node,) = (await get_json(jp_fetch, "jupyter-air", "gpu"))["nodes"]
    assert (node["attempt"], node["node"], node["hostname"]) == (2, 1, "gpu-b")


async def test_single_machine_and_pending_jobs_list_no_nodes(
    jp_fetch: Any, store: JobStore
) -> None:
    running = store.create(job_spec("command", command=["true"]))
    store.update(running.id, status="RUNNING")
    store.start_attempt(running.id, 1, None)
    store.create(job_spec("command", command=["true"], nnodes=2))
    assert (await get_json(jp_fetch, "jupyter-air", "gpu"))["nodes"] == []


async def test_a_node_answers_with_its_own_gpus_and_whole_history(jp_fetch: Any, job: str) -> None:
    doc = await node_gpu(jp_fetch, job, node="1")
    assert (doc["job"], doc["attempt"], doc["node"], doc["running"]) == (job, 1, 1, True)
    assert doc["reset"] is False
    assert doc["nvml"]["available"] is True
    assert [gpu["name"] for gpu in doc["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 2
    assert len(doc["samples"]["t"]) == SAMPLES_PER_NODE
    assert doc["samples"]["gpu"][0]["util"] == [77] * SAMPLES_PER_NODE
    assert [state["status"] for state in doc["state"]] == ["ok", "ok"]
    assert "nodes" not in doc

    node0 = await node_gpu(jp_fetch, job, node="0")
    assert [gpu["name"] for gpu in node0["gpus"]] == ["NVIDIA A100-SXM4-40GB"]


async def test_a_node_answers_increments_as_the_gpu_route_does(jp_fetch: Any, job: str) -> None:
    whole = await node_gpu(jp_fetch, job, node="1")
    t = whole["samples"]["t"]

    after_first = await node_gpu(jp_fetch, job, node="1", since=t[0])
    assert after_first["samples"]["t"] == t[1:]
    assert after_first["samples"]["gpu"][1]["util"] == whole["samples"]["gpu"][1]["util"][1:]
    assert after_first["samples"]["cpu"] == whole["samples"]["cpu"][1:]

    current = await node_gpu(jp_fetch, job, node="1", since=t[-1], inventory=whole["inventory"])
    assert current["samples"]["t"] == []
    assert current["reset"] is False
    assert not {"nvml", "host", "gpus"} & set(current)

    stale = await node_gpu(jp_fetch, job, node="1", since=t[-1], inventory="0123abcd")
    assert stale["reset"] is True
    assert stale["samples"]["t"] == t
    assert stale["gpus"] == whole["gpus"]


async def test_a_node_stays_readable_after_the_job_ended(
    jp_fetch: Any, store: JobStore, job: str
) -> None:
    store.end_attempt(job, 1, "SUCCEEDED", [0, 0])
    store.update(job, status="SUCCEEDED")
    doc = await node_gpu(jp_fetch, job, node="1", attempt="1")
    assert doc["running"] is False
    assert len(doc["samples"]["t"]) == SAMPLES_PER_NODE


async def test_an_earlier_attempt_is_not_running_while_a_retry_is(
    jp_fetch: Any, store: JobStore, job: str
) -> None:
    store.end_attempt(job, 1, "FAILED", [0, 1], failed_rank=1)
    store.start_attempt(job, 2, None)
    doc = await node_gpu(jp_fetch, job, node="0", attempt="1")
    assert (doc["attempt"], doc["running"]) == (1, False)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "'node' is required"),
        ({"node": "one"}, "'node' must be an integer, got 'one'"),
        ({"node": "-1"}, "'node' must be between 0 and"),
        ({"node": "0", "attempt": "2"}, "attempt 2 of job"),
        ({"node": "0", "since": "soon"}, "'since' must be a number, got 'soon'"),
        ({"node": "0", "inventory": "../x"}, "'inventory' must be an id from a previous answer"),
    ],
)
async def test_bad_node_arguments_are_400(
    jp_fetch: Any, job: str, params: dict[str, str], message: str
) -> None:
    code, error = await error_of(jp_fetch, "jupyter-air", "jobs", job, "gpu", **params)
    assert (code, error["code"]) == (400, "bad_request")
    assert error["message"].startswith(message)


async def test_a_node_without_samples_is_404(jp_fetch: Any, job: str) -> None:
    code, error = await error_of(jp_fetch, "jupyter-air", "jobs", job, "gpu", node="2")
    assert (code, error["message"]) == (404, "no GPU samples of node 2 in attempt 1")


@pytest.mark.parametrize("job_id", ["20261129-083012-a1b2c3", "not-a-job", "..%2F..%2Fetc"])
async def test_an_unknown_or_malformed_job_is_404_like_every_job_route(
    jp_fetch: Any, store: JobStore, job_id: str
) -> None:
    code, error = await error_of(jp_fetch, "jupyter-air", "jobs", job_id, "gpu", node="0")
    assert (code, error["code"]) == (404, "not_found")


@pytest.mark.parametrize("route", ["jupyter-air/gpu", "jupyter-air/jobs/{job}/gpu"])
async def test_both_routes_refuse_requests_without_a_token(
    jp_fetch: Any, job: str, route: str
) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(route.format(job=job), params={"node": "0"}, headers={"Authorization": ""})
    assert err.value.code == 403
