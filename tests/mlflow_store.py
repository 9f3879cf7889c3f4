"""A test's own MLflow SQLite store, made in milliseconds.

MLflow builds a new SQLite store by running its migrations: seconds, and over 15 s on a
loaded machine, paid by whichever process opens the new file first (a job's supervisor).
One store is migrated per test session (the fixture ``mlflow_template``); each test gets
a copy of it (``fresh_store``), as empty as a new one and its own.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest


@pytest.fixture(scope="session", name="mlflow_template")
def migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty MLflow store with MLflow's tables made, for ``fresh_store`` to copy."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


def fresh_store(template: Path, folder: Path) -> str:
    """A copy of ``template`` as ``folder/mlflow.db``; its tracking URI. The copy goes
    through SQLite's backup, so it is whole whatever journal the template keeps."""
    target = folder / "mlflow.db"
    source, copy = sqlite3.connect(template), sqlite3.connect(target)
    try:
        source.backup(copy)
    finally:
        source.close()
        copy.close()
    return f"sqlite:///{target}"
