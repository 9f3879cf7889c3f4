"""Which Jupyter server a process's links point at: never one that did not start its kernel."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jupyter_air.tracking.ui_links import current_jupyter_server, logs_url, ui_base


@pytest.fixture
def one_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """A running server's runtime file (this test's own pid stands for a live server)."""
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    info = {"pid": os.getpid(), "url": "http://127.0.0.1:8888/", "base_url": "/"}
    (tmp_path / "jpserver-1.json").write_text(json.dumps(info))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    return os.getpid()


def test_a_kernel_links_to_the_server_that_started_it(one_server: int) -> None:
    env = {"JPY_PARENT_PID": str(one_server)}
    server = current_jupyter_server(env)
    assert server is not None
    assert server.pid == one_server
    assert logs_url("j1", environ=env) == "/lab?air-job=j1"


def test_a_warm_session_cells_link_opens_the_logs_view_on_that_cell(one_server: int) -> None:
    env = {"JPY_PARENT_PID": str(one_server)}
    assert logs_url("j1", cell=3, environ=env) == "/lab?air-job=j1&air-cell=3"


def test_a_kernel_no_server_started_links_to_no_server(one_server: int, tmp_path: Path) -> None:
    nbclient = {"JPY_PARENT_PID": "1"}  # started by nbclient or VS Code, not by the server
    assert current_jupyter_server(nbclient) is None
    assert logs_url("j1", environ=nbclient) is None
    assert ui_base(f"sqlite:///{tmp_path}/mlflow.db", environ=nbclient) is None


def test_a_shell_links_to_the_only_server_running(one_server: int) -> None:
    server = current_jupyter_server({})  # air in a terminal: no kernel, no parent server
    assert server is not None
    assert logs_url("j1", absolute=True, environ={}) == "http://127.0.0.1:8888/lab?air-job=j1"
