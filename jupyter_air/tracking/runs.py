"""MLflow runs of jobs: which experiment, which run, which tags, which status.

Imported only where MLflow is needed (a kernel at its first distributed call, a
supervisor in a background thread): ``import mlflow`` costs about 2 s.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import mlflow
from mlflow import MlflowClient

from ..status import Outcome
from .run_page import DESCRIPTION, describe_run, mark_model_training
from .stores import store_lock
from .targets import (
    RunTarget,
    absolute_tracking_uri,
    adopt_default_store,
    default_artifact_location,
    default_experiment_name,
)

#: A job's outcome -> MLflow's run status (MLflow's own words).
RUN_STATUS: dict[str, str] = {
    Outcome.SUCCEEDED: "FINISHED",
    Outcome.FAILED: "FAILED",
    Outcome.CANCELLED: "KILLED",
}


@contextmanager
def quiet_store_setup(tracking_uri: str | None = None) -> Iterator[None]:
    """Set up (create, migrate) a tracking store (the current one by default) one process
    at a time, quietly.

    MLflow migrates a new sqlite store on first use; two processes doing so at once (a
    kernel and ``air run``) fail with an alembic error, so first uses take a lock. And
    MLflow announces the migration at INFO on stderr: noise in a notebook cell.
    """
    loggers = [logging.getLogger(name) for name in ("mlflow.store.db.utils", "alembic")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        with store_lock(tracking_uri or absolute_tracking_uri(mlflow.get_tracking_uri())):
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def resolve_target(option_experiment: str | None, user: str, notebook: str | None) -> RunTarget:
    """Experiment and run for a call, by precedence.

    ``--experiment`` on the call wins (the most specific setting), then the notebook's
    ``mlflow.set_experiment()``, then ``MLFLOW_EXPERIMENT_NAME``/``MLFLOW_EXPERIMENT_ID``,
    then ``/Users/<user>/<notebook>``. ``MLFLOW_RUN_ID`` resumes that run in its own
    experiment; an active run makes the new run its child, in the parent's experiment.
    Whichever it is opens in MLflow's model-training view unless it has a kind already.
    The store is the notebook's own if it set one, else the user's default.
    """
    adopt_default_store()
    target = _target(option_experiment, user, notebook)
    mark_model_training(MlflowClient(target.tracking_uri), target.experiment_id)
    return target


def _target(option_experiment: str | None, user: str, notebook: str | None) -> RunTarget:
    from mlflow.tracking import fluent

    uri = absolute_tracking_uri(mlflow.get_tracking_uri())
    client = MlflowClient(uri)
    resume = os.environ.get("MLFLOW_RUN_ID")
    if resume:
        experiment_id = client.get_run(resume).info.experiment_id
        return RunTarget(uri, experiment_id, _name(client, experiment_id), resume, None)
    active = mlflow.active_run()
    if active is not None:
        experiment_id = active.info.experiment_id
        return RunTarget(uri, experiment_id, _name(client, experiment_id), None, active.info.run_id)
    if option_experiment:
        experiment_id = ensure_experiment(client, option_experiment)
    elif fluent._active_experiment_id:
        experiment_id = fluent._active_experiment_id
    elif os.environ.get("MLFLOW_EXPERIMENT_ID"):
        experiment_id = os.environ["MLFLOW_EXPERIMENT_ID"]
    elif os.environ.get("MLFLOW_EXPERIMENT_NAME"):
        experiment_id = ensure_experiment(client, os.environ["MLFLOW_EXPERIMENT_NAME"])
    else:
        experiment_id = ensure_experiment(client, default_experiment_name(user, notebook))
    return RunTarget(uri, experiment_id, _name(client, experiment_id), None, None)


def ensure_experiment(client: MlflowClient, name: str, artifact_location: str | None = None) -> str:
    """The experiment of that name, made (with that artifact location) if missing: the
    one place jobs make experiments. It opens in MLflow's model-training view (see
    ``run_page``) unless it has a kind already."""
    experiment_id = _find_or_create(client, name, artifact_location)
    mark_model_training(client, experiment_id)
    return experiment_id


def _find_or_create(client: MlflowClient, name: str, artifact_location: str | None) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None:
        return str(found.experiment_id)
    location = artifact_location or default_artifact_location(client.tracking_uri)
    try:
        return str(client.create_experiment(name, artifact_location=location))
    except mlflow.exceptions.MlflowException:  # created meanwhile by another kernel
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return str(found.experiment_id)


def _name(client: MlflowClient, experiment_id: str) -> str:
    return str(client.get_experiment(experiment_id).name)


def start_run(
    client: MlflowClient,
    experiment_id: str,
    tags: Mapping[str, str],
    run_name: str | None,
    parent_run_id: str | None,
) -> str:
    """A new run of a job's attempt (``tags`` from ``job_tags``): its description links to
    the job's logs."""
    all_tags: dict[str, Any] = dict(tags)
    all_tags[DESCRIPTION] = describe_run(
        all_tags.get(DESCRIPTION), tags["air.job_id"], client.tracking_uri
    )
    if parent_run_id:
        all_tags["mlflow.parentRunId"] = parent_run_id
    run = client.create_run(experiment_id, tags=all_tags, run_name=run_name)
    return str(run.info.run_id)


def resume_run(client: MlflowClient, run_id: str, tags: Mapping[str, str]) -> None:
    """An existing run (``MLFLOW_RUN_ID``) resumed by a job: the logs link is added after
    the run's own description."""
    client.update_run(run_id, status="RUNNING")
    own = client.get_run(run_id).data.tags.get(DESCRIPTION)
    note = describe_run(own, tags["air.job_id"], client.tracking_uri)
    for key, value in {**tags, DESCRIPTION: note}.items():
        client.set_tag(run_id, key, value)


def end_run(client: MlflowClient, run_id: str, job_status: str) -> None:
    """The run's end, and the same end for its children still running: nothing can end
    them once their parent's job is over (a session's run made ahead for a cell that
    never came, a nested run in a rank that was killed). Children first, so a reader who
    sees the parent ended sees them ended too."""
    status = RUN_STATUS.get(job_status, "FAILED")
    experiment_id = client.get_run(run_id).info.experiment_id
    running = f"tags.mlflow.parentRunId = '{run_id}' and attributes.status = 'RUNNING'"
    while children := client.search_runs([experiment_id], running):  # a page at a time
        for child in children:
            try:
                _terminate(client, child.info.run_id, status)
            except mlflow.exceptions.MlflowException:
                # Deleted meanwhile (a warm session's run made ahead for a cell that never
                # came): nothing of it to end, and no reason to leave the parent running.
                if client.get_run(child.info.run_id).info.lifecycle_stage != "deleted":
                    raise
    _terminate(client, run_id, status)


def _terminate(client: MlflowClient, run_id: str, status: str) -> None:
    """``client.set_terminated``, without the two lines MLflow prints for a tracking
    server ("View run ... / View experiment at ...", after asking the server for the run
    once more): a cell's output says its links in its own header, once."""
    from mlflow.entities import RunStatus

    end = int(time.time() * 1000)
    client._tracking_client.store.update_run_info(run_id, RunStatus.from_string(status), end, None)
