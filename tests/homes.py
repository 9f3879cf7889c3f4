"""A test module's ``AIR_HOME``, shared by its tests (a plugin of tests/conftest.py).

Each home that runs a job starts its user's tail process, which imports MLflow and opens
the store: about 2.5 CPU s, which a user pays once per five idle minutes and a suite of
per-test homes paid per test. Tests that look only at their own jobs share one home, its
store a copy of a migrated one (``mlflow_template``); tests that count or list every job
keep a home of their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.leftovers import end_processes_in
from tests.mlflow_store import fresh_store


@pytest.fixture(scope="module")
def module_home(tmp_path_factory: pytest.TempPathFactory, mlflow_template: Path) -> Iterator[Path]:
    """An ``AIR_HOME`` for the module's tests, with its user's one MLflow store
    (``AIR_HOME/mlflow.db``) migrated; what its jobs left running ends with the module."""
    home = tmp_path_factory.mktemp("air")
    fresh_store(mlflow_template, home)
    yield home
    end_processes_in(home)  # its tail process; a supervisor no test waited for
