"""A run's end, and its children's (``tracking.runs.end_run``), against a real store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from jupyter_air.tracking import runs


def test_a_child_deleted_while_its_parent_ends_is_passed_over_and_the_parent_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm session deletes the run it made ahead for a cell that never came while its
    run's end, seen running a moment before, ends its children: MLflow refuses to end a
    deleted run, and that refusal left the session's run running for good."""
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.create_experiment("sessions")
    parent = client.create_run(experiment).info.run_id
    ahead = client.create_run(experiment, tags={"mlflow.parentRunId": parent}).info.run_id
    cell = client.create_run(experiment, tags={"mlflow.parentRunId": parent}).info.run_id
    terminate = runs._terminate

    def deleted_first(client: MlflowClient, run_id: str, status: str) -> Any:
        if run_id == ahead:
            client.delete_run(ahead)  # the kernel, between the search and this end
        return terminate(client, run_id, status)

    monkeypatch.setattr(runs, "_terminate", deleted_first)
    runs.end_run(client, parent, "SUCCEEDED")
    assert client.get_run(parent).info.status == "FINISHED"
    assert client.get_run(cell).info.status == "FINISHED"
    assert client.get_run(ahead).info.lifecycle_stage == "deleted"
