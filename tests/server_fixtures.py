"""Fixtures of the tests that talk to the jobs routes: a job store of their own and a
server with jupyter_air whose GPU sampler stays out of the way (a plugin of tests/conftest.py;
a module overrides either by defining its own)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jupyter_air.jobs.store import JobStore


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobStore:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    return JobStore()


@pytest.fixture
def jp_server_config(store: JobStore) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_air": True}},
        "GpuSampler": {"interval": 3600.0},
    }
