"""How a job starts: its spec recorded, its first run made, its supervisor started; the
last step of the jobs service's ``submit``.

Each caller decides what to run (a ``JobSpec`` without its MLflow destination) and where
its runs go: a kernel's resolved ``RunTarget``, whose first run is started (or resumed)
here so that its links show at once; or an ``ExperimentRef``, which imports no MLflow
in this process: the experiment and the first run are made by the user's tail process
(``run_tails``), which keeps MLflow loaded: here, for a kernel's call whose notebook
never loaded MLflow (``run_now``: its links show at once all the same), else as the
supervisor starts, the process woken here so that its import overlaps that start.
Then the job is recorded with its owner and grants and its supervisor started.

A job submitted from inside another job (a rank running ``air run``, a scheduled
notebook's kernel running a ``%%air_distributed`` cell) is that job's child: recorded
under it, and its run nested under the parent's run when both are in one experiment.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..job_dir import JobDir
from ..paths import private_opener, write_private
from ..tracking.run_tails import NewRun, NoAnswer, ensure_running, make_run
from ..tracking.stores import register_store
from ..tracking.targets import CELL_SOURCE, ExperimentRef, RunTarget, job_tags
from . import checkpoints
from .checkpoint_settings import checkpoint_root
from .permissions import Grant
from .spec import JobSpec
from .store import Job, JobStore, UnknownJob, new_job_id


@dataclass(frozen=True)
class Submitted:
    job: Job
    #: The first attempt's run; None when the supervisor makes it.
    run_id: str | None
    run_name: str | None
    #: Where the runs go: the target as given, or as resolved when its run was made here.
    target: RunTarget | ExperimentRef


def submit(
    store: JobStore,
    spec: JobSpec,
    target: RunTarget | ExperimentRef,
    *,
    owner: str,
    grants: tuple[Grant, ...] = (),
    payload: bytes | None = None,
    source: str | None = None,
    notebook: str | None = None,
    user: str,
    extra_tags: Mapping[str, str] | None = None,
    watch_pid: int | None = None,
    parent_id: str | None = None,
    run_now: bool = False,
) -> Submitted:
    """Fill the spec's tracking from ``target``, then record and start the job.

    ``source`` is the cell's code, kept with the run made here; ``user`` is MLflow's run
    user; ``extra_tags`` land on every attempt's run; ``parent_id`` is the job that
    submits this one (see ``submitting_job``); ``run_now``: an ``ExperimentRef``'s first
    run is made here too (by the tail process), not by the supervisor.
    """
    if isinstance(target, ExperimentRef) and not run_now and source is not None:
        raise ValueError("a cell's source is kept with a run made at submission")
    register_store(target.tracking_uri, store.home)
    job_id = new_job_id()
    compute = spec.compute
    tags = job_tags(job_id, 1, compute.nproc_per_node, compute.nnodes, notebook, user)
    tags.update(spec.tracking.tags)
    tags.update(extra_tags or {})
    parent = _parent(store, parent_id, owner)
    if parent is not None:
        tags["air.parent_job_id"] = parent.id
    place = checkpoints.place_for(
        store.job_dir(job_id), job_id, spec.program.checkpoint_dir, checkpoint_root()
    )
    spec = replace(spec, program=replace(spec.program, checkpoint_dir=str(place)))

    def start(spec: JobSpec) -> Job:
        return start_job(
            store,
            spec,
            payload,
            job_id=job_id,
            watch_pid=watch_pid,
            owner=owner,
            grants=grants,
            parent_id=parent.id if parent else None,
        )

    if isinstance(target, ExperimentRef) and not run_now:
        spec = spec.with_tracking(
            tracking_uri=target.tracking_uri,
            experiment_name=target.experiment_name,
            artifact_location=target.artifact_location,
            tags=tags,
        )
        return Submitted(start(spec), None, None, target)
    made = None
    if isinstance(target, ExperimentRef) and parent is None:
        made = _first_run_by_tail_process(store, target, job_id, spec, tags, source)
    if made is not None:
        target, run_id, run_name = made
    else:
        if isinstance(target, ExperimentRef):
            target = _resolved(target)
        if parent is not None:
            target = _nested(store, parent, target)
        run_id, run_name = _first_run(target, spec, tags, source)
    spec = spec.with_tracking(
        tracking_uri=target.tracking_uri,
        experiment_id=target.experiment_id,
        experiment_name=target.experiment_name,
        parent_run_id=target.parent_run_id,
        first_run_id=run_id,
        tags=tags,
    )
    return Submitted(start(spec), run_id, run_name, target)


def _first_run_by_tail_process(
    store: JobStore,
    target: ExperimentRef,
    job_id: str,
    spec: JobSpec,
    tags: dict[str, str],
    source: str | None,
) -> tuple[RunTarget, str, str] | None:
    """The experiment (made if missing) and the run of attempt 1, made by the user's
    tail process: the target resolved, the run's id and name. None when no tail process
    answered: this process makes them (MLflow's own refusal is raised, as it would be
    here)."""
    request = NewRun(
        job_id,
        1,
        target.tracking_uri,
        None,
        target.experiment_name,
        target.artifact_location,
        tags,
        spec.tracking.run_name,
        None,
        texts={CELL_SOURCE: source} if source is not None else {},
    )
    try:
        made = make_run(store.home, request)
    except NoAnswer:
        return None
    resolved = RunTarget(
        target.tracking_uri, made.experiment_id, target.experiment_name, None, None
    )
    return resolved, made.run_id, made.run_name


def _resolved(target: ExperimentRef) -> RunTarget:
    """The named experiment, made here if missing (no tail process answered)."""
    from mlflow import MlflowClient

    from ..tracking import runs

    client = MlflowClient(target.tracking_uri)
    with runs.quiet_store_setup(target.tracking_uri):
        experiment_id = runs.ensure_experiment(
            client, target.experiment_name, target.artifact_location
        )
    return RunTarget(target.tracking_uri, experiment_id, target.experiment_name, None, None)


def _parent(store: JobStore, parent_id: str | None, owner: str) -> Job | None:
    """The parent job, if it exists and is the owner's (anyone can set the variable)."""
    if parent_id is None:
        return None
    try:
        parent = store.get(parent_id)
    except UnknownJob:  # e.g. a rank on a node whose AIR_HOME is another
        return None
    return parent if parent.owner == owner else None


def _nested(store: JobStore, parent: Job, target: RunTarget) -> RunTarget:
    """The target with the parent's current run as the run's parent, when the kernel
    named none (no active run) and both runs are in one experiment of one store, where
    MLflow's UI shows the nesting."""
    if target.parent_run_id or target.resume_run_id:
        return target
    same = (parent.spec.tracking.tracking_uri, parent.experiment_id) == (
        target.tracking_uri,
        target.experiment_id,
    )
    attempts = store.attempts(parent.id)
    run_id = attempts[-1].run_id if attempts else None
    return replace(target, parent_run_id=run_id) if same and run_id else target


def _first_run(
    target: RunTarget, spec: JobSpec, tags: dict[str, str], source: str | None
) -> tuple[str, str]:
    """The run of attempt 1 in a kernel's target, started (or resumed) here: its id, name."""
    from mlflow import MlflowClient

    from ..tracking import runs

    mlflow_client = MlflowClient(target.tracking_uri)
    if target.resume_run_id:
        run_id = target.resume_run_id
        runs.resume_run(mlflow_client, run_id, tags)
        os.environ.pop("MLFLOW_RUN_ID", None)  # used once, as mlflow.start_run() does
    else:
        run_id = runs.start_run(
            mlflow_client, target.experiment_id, tags, spec.tracking.run_name, target.parent_run_id
        )
    if source is not None:
        mlflow_client.log_text(run_id, source, CELL_SOURCE)
    return run_id, str(mlflow_client.get_run(run_id).info.run_name)


def start_job(
    store: JobStore,
    spec: JobSpec,
    payload: bytes | None,
    job_id: str | None = None,
    watch_pid: int | None = None,
    owner: str | None = None,
    grants: tuple[Grant, ...] = (),
    parent_id: str | None = None,
) -> Job:
    """Record the job (owned by ``owner``, the OS user by default, with ``grants``, a
    child of ``parent_id``) and start its supervisor in a session of its own: the last
    step of ``submit``.

    With ``watch_pid`` the job is cancelled when that process (the kernel) dies. The
    supervisor is reaped by a thread of this process as it exits: a kernel or scheduler
    that submits many jobs keeps no zombie of theirs.
    """
    job = store.create(spec, job_id=job_id, owner=owner, grants=grants, parent_id=parent_id)
    if spec.tracking.tracking_uri and not spec.tracking.first_run_id:
        ensure_running(store.home, spec.tracking.tracking_uri)  # the tail process makes the run
    job_dir = JobDir(store.job_dir(job.id))
    if payload is not None:
        write_private(job_dir.payload, payload)
    argv = [sys.executable, "-m", "jupyter_air.jobs.supervision.supervisor", job.id]
    if watch_pid is not None:
        argv += ["--watch-pid", str(watch_pid)]
    with open(job_dir.supervisor_log, "ab", opener=private_opener) as out:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "AIR_HOME": str(store.home)},
        )
    threading.Thread(target=process.wait, name=f"air-reap-{job.id}", daemon=True).start()
    store.update(job.id, supervisor_pid=process.pid, supervisor_host=socket.gethostname())
    return store.get(job.id)
