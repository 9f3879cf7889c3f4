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


def new_home(tmp_path_factory: pytest.TempPathFactory, mlflow_template: Path) -> Path:
    """A new ``AIR_HOME`` with its user's one MLflow store (``AIR_HOME/mlflow.db``)
    migrated: left new, whichever process opened it first (the tail process, the lab's
    runs panel) would migrate it, at about 1 CPU s more."""
    home = tmp_path_factory.mktemp("air")
    fresh_store(mlflow_template, home)
    return home


@pytest.fixture(scope="module")
def module_home(tmp_path_factory: pytest.TempPathFactory, mlflow_template: Path) -> Iterator[Path]:
    """An ``AIR_HOME`` for the module's tests (``new_home``); what its jobs left running
    ends with the module."""
    home = new_home(tmp_path_factory, mlflow_template)
    yield home
    end_processes_in(home)  # its tail process; a supervisor no test waited for


@pytest.fixture(scope="module")
def module_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder of the module's own, for the settings its tests' processes share
    (``in_module_home``)."""
    folder = tmp_path_factory.mktemp("module")
    yield folder
    end_processes_in(folder)


@pytest.fixture
def in_module_home(module_home: Path, module_folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's jobs run in the module's home, with its store; Jupyter's runtime and
    config folders and Hugging Face's are the module's too (``module_folder``, returned).

    The user's tail process inherits the environment of whoever starts it (a test's
    ``air run``, a job's supervisor), and the leftover guard ends, at a test's end, each
    process whose environment names a path under that test's ``tmp_path``
    (tests/leftovers.py): with these folders there, each test of the module ended the
    one tail process and the next started another."""
    monkeypatch.setenv("AIR_HOME", str(module_home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the home's store
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(module_folder / "runtime"))  # no links
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(module_folder / "config"))
    monkeypatch.setenv("HF_HOME", str(module_folder / "hf"))
    return module_folder
