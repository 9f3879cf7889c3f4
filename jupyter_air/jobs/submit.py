"""The one submission path of the magic, the decorator and ``air run``.

Each caller decides what to run (a ``Workload`` without its MLflow fields) and where
its run goes (a ``RunTarget``); this module starts or resumes the MLflow run, fills the
workload's MLflow fields and records the job with its owner and grants, then starts its
supervisor. Rules on the options themselves live in ``workload_file``'s model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..tracking.runs import RunTarget
from . import client
from .permissions import Grant
from .spec import Workload
from .store import Job, JobStore, new_job_id


@dataclass(frozen=True)
class Submitted:
    job: Job
    run_id: str
    run_name: str


def submit(
    store: JobStore,
    workload: Workload,
    target: RunTarget,
    *,
    owner: str,
    grants: tuple[Grant, ...] = (),
    payload: bytes | None = None,
    source: str | None = None,
    notebook: str | None = None,
    user: str,
    extra_tags: Mapping[str, str] | None = None,
    watch_pid: int | None = None,
) -> Submitted:
    """Start (or resume) the job's first MLflow run, then record and start the job.

    ``source`` is the cell's code, kept with the run; ``user`` is MLflow's run user.
    """
    from mlflow import MlflowClient

    from ..tracking import runs
    from ..tracking.stores import register_store

    register_store(target.tracking_uri)
    mlflow_client = MlflowClient(target.tracking_uri)
    job_id = new_job_id()
    tags = runs.job_tags(job_id, 1, workload.nproc_per_node, workload.nnodes, notebook, user)
    tags.update(extra_tags or {})
    if target.resume_run_id:
        run_id = target.resume_run_id
        runs.resume_run(mlflow_client, run_id, tags)
        os.environ.pop("MLFLOW_RUN_ID", None)  # used once, as mlflow.start_run() does
    else:
        run_id = runs.start_run(
            mlflow_client, target.experiment_id, tags, workload.run_name, target.parent_run_id
        )
    if source is not None:
        mlflow_client.log_text(run_id, source, "code/cell.py")
    run_name = str(mlflow_client.get_run(run_id).info.run_name)
    workload = replace(
        workload,
        tracking_uri=target.tracking_uri,
        experiment_id=target.experiment_id,
        parent_run_id=target.parent_run_id,
        tags={**tags, "air.first_run_id": run_id},
    )
    job = client.submit(
        store, workload, payload, job_id=job_id, watch_pid=watch_pid, owner=owner, grants=grants
    )
    return Submitted(job, run_id, run_name)


def named_target(experiment_name: str, artifact_location: str | None) -> RunTarget:
    """The run target of ``air run``: the experiment of that name in the current
    tracking store, made (with that artifact location) if missing."""
    import mlflow
    from mlflow import MlflowClient

    from ..tracking import runs

    with runs.quiet_store_setup():
        uri = runs.absolute_tracking_uri(mlflow.get_tracking_uri())
        mlflow_client = MlflowClient(uri)
        found = mlflow_client.get_experiment_by_name(experiment_name)
        experiment_id = (
            found.experiment_id
            if found is not None
            else mlflow_client.create_experiment(
                experiment_name, artifact_location=artifact_location
            )
        )
    return RunTarget(uri, str(experiment_id), experiment_name, None, None)
