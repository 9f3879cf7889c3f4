"""The MLflow UI of a local store, served by the Jupyter server under its base URL.

One real ``mlflow server`` child for the whole module (it takes seconds to start):
the store, the child and the tests' Jupyter servers share one base URL.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import pytest
from tornado.httpclient import HTTPClientError
from traitlets import TraitError

from jupyter_air.tracking.stores import register_store
from jupyter_air.tracking.ui_links import (
    current_jupyter_server,
    experiment_url,
    run_url,
    ui_base,
)
from jupyter_air.tracking.ui_server import MlflowUi, UiUnavailable, UnknownStore
from tests.waits import children_running

BASE_URL = "/a%40b/"  # pytest-jupyter's default: a JupyterHub-like escaped base URL
UI_CHILD = "jupyter_air.tracking.ui_child"
#: Seconds a request may wait for the UI child's start (MlflowUi.start_timeout's default).
START_WAIT = 60.0


@dataclass
class Served:
    tracking_uri: str
    key: str
    experiment_id: str
    run_id: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A sqlite store with one run, registered; its children are gone afterwards."""
    import mlflow

    root = tmp_path_factory.mktemp("mlflow-ui")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIR_HOME", str(root / "air"))
        tracking_uri = f"sqlite:///{root}/mlflow.db"
        client = mlflow.MlflowClient(tracking_uri)
        experiment_id = client.create_experiment(
            "/Users/ada/train", artifact_location=str(root / "mlruns")
        )
        run = client.create_run(experiment_id)
        client.log_metric(run.info.run_id, "loss", 0.25)
        (root / "notes.txt").write_text("hello from the run")
        client.log_artifact(run.info.run_id, str(root / "notes.txt"))
        client.set_terminated(run.info.run_id)
        yield Served(tracking_uri, register_store(tracking_uri), experiment_id, run.info.run_id)


@pytest.fixture
def jp_base_url() -> str:
    return BASE_URL


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_air": True}},
        "GpuSampler": {"interval": 3600.0},
    }


@pytest.fixture
def served_ui(served: Served) -> str:
    """The UI's path relative to the base URL."""
    return f"jupyter-air/mlflow/{served.key}/"


@pytest.mark.heavy
async def test_the_ui_of_a_local_store_is_served_by_the_jupyter_server(
    jp_fetch: Any,
    jp_serverapp: Any,
    served: Served,
    served_ui: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One test, since the extension's one MLflow UI process takes seconds to start."""
    await _the_ui_and_its_api_answer(jp_fetch, served, served_ui)
    await _a_link_the_kernel_renders_opens(jp_fetch, served, served_ui, tmp_path, monkeypatch)
    await _unknown_keys_are_404_and_anonymous_requests_403(jp_fetch, served_ui)
    await _the_ui_posts_with_the_login_cookie_from_its_own_origin_only(jp_fetch, served, served_ui)
    children = _mlflow_processes()
    assert children, "the extension started an MLflow UI"
    (extension,) = jp_serverapp.extension_manager.extension_apps["jupyter_air"]
    await extension.stop_extension()
    _, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, f"left running: {alive}"


async def _the_ui_and_its_api_answer(jp_fetch: Any, served: Served, served_ui: str) -> None:
    # The first requests wait for the child's start: tens of seconds on a loaded machine.
    first = [jp_fetch(served_ui, request_timeout=START_WAIT) for _ in range(3)]
    pages = await asyncio.gather(*first)
    assert [p.code for p in pages] == [200, 200, 200]
    assert pages[0].headers["Content-Type"].startswith("text/html")
    assert b"static-files/static/js/main" in pages[0].body
    assert "default-src" not in pages[0].headers["Content-Security-Policy"]
    assert len([p for p in _mlflow_processes() if UI_CHILD in p.cmdline()]) == 1

    answer = await jp_fetch(
        served_ui + "ajax-api/2.0/mlflow/runs/get", params={"run_id": served.run_id}
    )
    assert answer.headers["Content-Type"] == "application/json"
    run = json.loads(answer.body)["run"]
    assert run["info"]["experiment_id"] == served.experiment_id
    assert run["data"]["metrics"][0] == {
        "key": "loss",
        "value": 0.25,
        "timestamp": run["data"]["metrics"][0]["timestamp"],
        "step": 0,
    }

    # Every page asks which MLflow account is signed in: none (Jupyter's login is the
    # one), said in the answer the UI takes for it, not a 404 logged at every page.
    account = await jp_fetch(served_ui + "ajax-api/2.0/mlflow/users/current")
    assert account.headers["Content-Type"].startswith("application/json")
    assert json.loads(account.body) == {}

    artifact = await jp_fetch(
        served_ui + "get-artifact", params={"path": "notes.txt", "run_uuid": served.run_id}
    )
    assert artifact.body == b"hello from the run"

    head = await jp_fetch(served_ui, method="HEAD")
    assert head.code == 200
    assert head.body == b""

    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(served_ui.rstrip("/"), follow_redirects=False)
    assert err.value.code == 302
    assert err.value.response is not None
    assert err.value.response.headers["Location"] == f"{BASE_URL}{served_ui}"


async def _a_link_the_kernel_renders_opens(
    jp_fetch: Any,
    served: Served,
    served_ui: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime = tmp_path / "kernel-runtime"
    runtime.mkdir()
    info = {"pid": psutil.Process().pid, "url": f"http://127.0.0.1:8888{BASE_URL}"}
    (runtime / "jpserver-1.json").write_text(json.dumps({**info, "base_url": BASE_URL}))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("JPY_PARENT_PID", str(info["pid"]))
    monkeypatch.delenv("AIR_MLFLOW_UI_URL", raising=False)

    base = ui_base(served.tracking_uri)
    assert base == f"{BASE_URL}{served_ui}"
    link = run_url(base, served.experiment_id, served.run_id)
    run_page = f"#/experiments/{served.experiment_id}/runs/{served.run_id}"
    assert link == f"{base}{run_page}?workflowType=machine_learning"
    page = await jp_fetch(urlsplit(link).path[len(BASE_URL) :])
    assert page.code == 200


async def _unknown_keys_are_404_and_anonymous_requests_403(jp_fetch: Any, served_ui: str) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-air/mlflow/0123456789abcdef/")
    assert err.value.code == 404
    assert err.value.response is not None
    assert json.loads(err.value.response.body)["error"]["code"] == "not_found"

    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(served_ui, headers={"Authorization": ""})
    assert err.value.code == 403


async def _the_ui_posts_with_the_login_cookie_from_its_own_origin_only(
    jp_fetch: Any, served: Served, served_ui: str
) -> None:
    login = await jp_fetch("api", "status")
    cookies = SimpleCookie()
    for header in login.headers.get_list("Set-Cookie"):
        cookies.load(header)
    session = {
        "Authorization": "",
        "Cookie": "; ".join(f"{k}={v.value}" for k, v in cookies.items()),
        "Content-Type": "application/json",
    }
    own_origin = "http://" + urlsplit(login.effective_url).netloc
    search = served_ui + "ajax-api/2.0/mlflow/runs/search"
    body = json.dumps({"experiment_ids": [served.experiment_id]})

    answer = await jp_fetch(
        search, method="POST", body=body, headers=session | {"Origin": own_origin}
    )
    assert [r["info"]["run_id"] for r in json.loads(answer.body)["runs"]] == [served.run_id]

    # Without Origin: Jupyter's XSRF rule; from another site: Jupyter's origin check.
    for refused, code in [({}, 403), ({"Origin": "https://elsewhere.example"}, 404)]:
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch(search, method="POST", body=body, headers=session | refused)
        assert err.value.code == code


def test_links_and_where_the_ui_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert (
        experiment_url("http://mlflow:5000", "7")
        == "http://mlflow:5000/#/experiments/7?workflowType=machine_learning"
    )
    assert (
        run_url("https://x/y/", "7", "ab12")
        == "https://x/y/#/experiments/7/runs/ab12?workflowType=machine_learning"
    )
    assert ui_base("http://mlflow:5000", environ={}) == "http://mlflow:5000/"
    assert ui_base("databricks", environ={}) is None

    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    local = f"sqlite:///{tmp_path}/mlflow.db"
    assert ui_base(local, environ={}) is None  # no Jupyter server running
    override = {"AIR_MLFLOW_UI_URL": "https://hub.example/services/mlflow"}
    assert ui_base(local, environ=override) == "https://hub.example/services/mlflow/"

    me = psutil.Process().pid
    for name, pid, url in [("a", me, "http://10.0.0.5:8888/user/ada/"), ("b", 1, "http://x/")]:
        info = {"pid": pid, "url": url, "base_url": urlsplit(url).path}
        (tmp_path / f"jpserver-{name}.json").write_text(json.dumps(info))
    (tmp_path / "jpserver-torn.json").write_text("{")
    assert current_jupyter_server({}) is None  # two servers and no JPY_PARENT_PID
    server = current_jupyter_server({"JPY_PARENT_PID": str(me)})
    assert server is not None
    assert server.base_url == "/user/ada/"
    env = {"JPY_PARENT_PID": str(me)}
    key = register_store(local)
    assert ui_base(local, environ=env) == f"/user/ada/jupyter-air/mlflow/{key}/"
    assert ui_base(local, environ=env, absolute=True) == (
        f"http://10.0.0.5:8888/user/ada/jupyter-air/mlflow/{key}/"
    )


def _mlflow_processes() -> list[psutil.Process]:
    return children_running("mlflow")


def test_configuration_and_refusals_start_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_HOME", str(tmp_path))
    monkeypatch.setenv("AIR_MLFLOW_UI_URL", "https://mlflow.example/")
    assert MlflowUi().url == "https://mlflow.example/"
    monkeypatch.delenv("AIR_MLFLOW_UI_URL")
    MlflowUi(url="https://other.example/").share_with_kernels()
    assert os.environ["AIR_MLFLOW_UI_URL"] == "https://other.example/"
    with pytest.raises(TraitError):
        MlflowUi(start_timeout=0)

    before = set(_mlflow_processes())
    ui = MlflowUi(start_timeout=0.2)
    with pytest.raises(UnknownStore):
        ui.ensure("0123456789abcdef")
    with pytest.raises(UnknownStore):
        ui.ensure(register_store("http://mlflow.example:5000"))
    with pytest.raises(UiUnavailable, match=r"did not answer within 0.2 s; the Jupyter server"):
        ui.ensure(register_store(f"sqlite:///{tmp_path}/mlflow.db"))
    assert set(_mlflow_processes()) == before
    ui.stop()
    with pytest.raises(UiUnavailable, match="stopping"):
        ui.ensure(register_store(f"sqlite:///{tmp_path}/mlflow.db"))


def test_the_logs_link_opens_the_logs_view_of_the_kernels_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_air.tracking.ui_links import logs_url

    me = psutil.Process().pid
    info = {"pid": me, "url": "http://10.0.0.5:8888/user/ada/", "base_url": "/user/ada/"}
    (tmp_path / "jpserver-a.json").write_text(json.dumps(info))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    env = {"JPY_PARENT_PID": str(me)}
    job = "20261129-083012-a1b2c3"
    assert logs_url(job, environ=env) == f"/user/ada/lab?air-job={job}"
    assert logs_url(job, environ=env, absolute=True) == (
        f"http://10.0.0.5:8888/user/ada/lab?air-job={job}"
    )
    assert logs_url(job, stacks=True, environ=env) == f"/user/ada/lab?air-job={job}&air-stacks=1"
