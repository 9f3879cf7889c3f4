"""The GPU REST routes, against a real Jupyter server that refuses anonymous access."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from http.cookies import SimpleCookie
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_air.jobs.store import JobStore
from tests.conftest import WriteScenario
from tests.factories import job_spec
from tests.fake_nvml import FakeGpu, Scenario

ROUTES = [("GET", "jupyter-air/gpu"), ("POST", "jupyter-air/gpu/sample")]


@pytest.fixture
def jp_server_config(gpus: WriteScenario, store: JobStore) -> dict[str, Any]:
    """The server starts on a machine with one GPU; tests may rewrite the scenario."""
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_air": True}},
        # The background thread stays out of the way: these tests sample explicitly.
        "GpuSampler": {"interval": 3600.0},
    }


@pytest.fixture
def gpus(scenario: WriteScenario) -> WriteScenario:
    scenario(Scenario(gpus=[FakeGpu(name="NVIDIA A100-SXM4-40GB", util=[10, 20, 30, 40])]))
    return scenario


async def test_get_returns_inventory_status_and_columnar_samples(
    jp_fetch: Any, gpus: WriteScenario
) -> None:
    response = await jp_fetch("jupyter-air", "gpu")
    assert response.code == 200
    assert response.headers["Content-Type"] == "application/json"
    doc = json.loads(response.body)
    assert doc["nvml"]["available"] is True
    assert doc["gpus"][0]["name"] == "NVIDIA A100-SXM4-40GB"
    assert set(doc) >= {
        "now",
        "interval",
        "history",
        "paused",
        "reset",
        "host",
        "inventory",
        "samples",
        "state",
    }
    assert doc["interval"] == 3600.0
    assert set(doc["samples"]) == {"t", "cpu", "mem", "gpu"}
    assert len(doc["samples"]["gpu"][0]["util"]) == len(doc["samples"]["t"])


async def test_post_samples_now(jp_fetch: Any, gpus: WriteScenario) -> None:
    first = json.loads((await jp_fetch("jupyter-air", "gpu")).body)
    response = await jp_fetch(
        "jupyter-air",
        "gpu",
        "sample",
        method="POST",
        body=b"",
        params={"since": first["samples"]["t"][-1], "inventory": first["inventory"]},
    )
    doc = json.loads(response.body)
    assert len(doc["samples"]["t"]) == 1
    assert doc["samples"]["gpu"][0]["util"][0] > first["samples"]["gpu"][0]["util"][-1]
    assert "gpus" not in doc


async def test_no_gpu_machine_still_answers_with_host_figures(
    jp_fetch: Any, scenario: WriteScenario
) -> None:
    scenario(Scenario(init_error="DRIVER_NOT_LOADED"))
    await jp_fetch("jupyter-air", "gpu", "sample", method="POST", body=b"")
    doc = json.loads((await jp_fetch("jupyter-air", "gpu")).body)
    assert doc["nvml"] == {
        "available": False,
        "reason": "Driver Not Loaded",
        "driver_version": None,
        "cuda_driver_version": None,
    }
    assert doc["gpus"] == []
    assert doc["samples"]["cpu"]


@pytest.mark.parametrize(("method", "route"), ROUTES)
async def test_every_route_refuses_requests_without_a_token(
    jp_fetch: Any, gpus: WriteScenario, method: str, route: str
) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(
            route,
            method=method,
            headers={"Authorization": ""},
            body=b"" if method == "POST" else None,
        )
    assert err.value.code == 403


async def test_post_with_a_login_cookie_needs_the_xsrf_token(
    jp_fetch: Any, gpus: WriteScenario
) -> None:
    login = await jp_fetch("jupyter-air", "gpu")
    cookies = SimpleCookie()
    for header in login.headers.get_list("Set-Cookie"):
        cookies.load(header)
    session = "; ".join(f"{k}={v.value}" for k, v in cookies.items())
    assert session, "a token-authenticated request sets the login cookie"

    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(
            "jupyter-air",
            "gpu",
            "sample",
            method="POST",
            body=b"",
            headers={"Authorization": "", "Cookie": session},
        )
    assert err.value.code == 403

    ok = await jp_fetch(
        "jupyter-air",
        "gpu",
        "sample",
        method="POST",
        body=b"",
        headers={
            "Authorization": "",
            "Cookie": f"{session}; _xsrf=abc123",
            "X-XSRFToken": "abc123",
        },
    )
    assert ok.code == 200


async def test_unknown_parameters_are_ignored_like_jupyterlab_cache_busters(
    jp_fetch: Any, gpus: WriteScenario
) -> None:
    response = await jp_fetch("jupyter-air", "gpu", params={"1795940376738": ""})
    assert response.code == 200


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"since": "yesterday"}, "'since' must be a number, got 'yesterday'"),
        ({"since": "-5"}, "'since' must be a finite number >= 0, got '-5'"),
        ({"since": "nan"}, "'since' must be a finite number >= 0, got 'nan'"),
        ({"inventory": "../../etc/passwd"}, "'inventory' must be an id from a previous answer"),
        ({"since": "inf"}, "'since' must be a finite number >= 0, got 'inf'"),
    ],
)
@pytest.mark.parametrize(("method", "route"), ROUTES)
async def test_bad_parameters_are_400_with_a_json_error(
    jp_fetch: Any,
    gpus: WriteScenario,
    method: str,
    route: str,
    params: dict[str, str],
    message: str,
) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(route, method=method, params=params, body=b"" if method == "POST" else None)
    assert err.value.code == 400
    assert err.value.response is not None
    error = json.loads(err.value.response.body)["error"]
    assert error["code"] == "bad_request"
    assert error["message"].startswith(message)


async def test_gpu_processes_of_a_kernel_are_attributed_to_it(
    jp_fetch: Any, jp_serverapp: Any, scenario: WriteScenario
) -> None:
    kernel_manager = jp_serverapp.kernel_manager
    kernel_id = await kernel_manager.start_kernel()
    try:
        kernel_pid = kernel_manager.get_kernel(kernel_id).provisioner.pid
        scenario(Scenario(gpus=[FakeGpu(processes=[(kernel_pid, 1024**3)])]))
        doc = json.loads(
            (await jp_fetch("jupyter-air", "gpu", "sample", method="POST", body=b"")).body
        )
        (process,) = doc["state"][0]["processes"]
        assert process["pid"] == kernel_pid
        assert process["mem_mib"] == 1024
        assert process["owner"] == {"kind": "kernel", "id": kernel_id, "name": None}
    finally:
        await kernel_manager.shutdown_kernel(kernel_id, now=True)


async def test_gpu_processes_of_a_job_are_attributed_to_the_job(
    jp_fetch: Any, scenario: WriteScenario, store: JobStore
) -> None:
    job = store.create(job_spec("command", command=["true"]))
    rank = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, "AIR_JOB_ID": job.id, "RANK": "0"},
    )
    try:
        scenario(Scenario(gpus=[FakeGpu(processes=[(rank.pid, 2 * 1024**3)])]))
        answer = await jp_fetch("jupyter-air", "gpu", "sample", method="POST", body=b"")
        (process,) = json.loads(answer.body)["state"][0]["processes"]
        assert process["owner"] == {"kind": "job", "id": job.id, "name": None}
    finally:
        rank.kill()
        rank.wait()
