"""One trial as one job: its request to the jobs service, and its objective's points.

A trial is the sweep's workload with the trial's parameters in every rank's
environment (``AIR_PARAMS``, read by ``jupyter_air.params()``), its runs nested under
the sweep's run (MLflow's parent tag), tagged with the sweep and the trial. Its
objective is read from the job's tracking journal, where rank 0's ``log_metrics``
lands first: points as they are logged (for the pruner), the last one at the end, with
no wait for MLflow.
"""

from __future__ import annotations

import json
from typing import Any

from ..job_dir import AttemptDir
from ..jobs.request import Defaults, JobRequest, Program
from ..jobs.spec import JobKind
from ..jobs.store import JobStore
from ..redact import redact
from ..tracking import journal
from ..tracking.targets import ExperimentRef
from .params import PARAMS_ENV
from .store import Sweep

#: Tags of a trial's runs (and of its job), and of the sweep's own run.
SWEEP_TAG = "air.sweep_id"
TRIAL_TAG = "air.sweep_trial"
#: MLflow's nesting: a run with this tag is shown under that run.
PARENT_TAG = "mlflow.parentRunId"


def request(
    sweep: Sweep,
    number: int,
    params: dict[str, Any],
    parent_run_id: str | None,
    payload: bytes | None = None,
) -> JobRequest:
    """Trial ``number``'s job: the sweep's workload with ``params``, its runs children of
    the sweep's run (``None`` before that exists: the driver nests them then), telling
    nobody of its end unless the workload says whom (the sweep is what its owner
    follows). Its runs are made as any ``air run`` job's are, off the driver's path: the
    next trial starts as soon as one ends. A notebook's sweep runs its cell's or
    function's ``payload`` there, as that cell's own job would."""
    spec = sweep.spec
    submission = spec.model_copy(
        update={
            "env": {**spec.env, PARAMS_ENV: json.dumps(params)},
            "notify": spec.notify if spec.notify is not None else [],
        }
    )
    return JobRequest(
        submission,
        Program(
            JobKind.COMMAND if sweep.code is None else JobKind.PYTHON,
            command=spec.argv if sweep.code is None else (),
            payload=payload,
            source=None if sweep.code is None else sweep.code.source,
            background=True,  # nobody's kernel: it outlives whoever started the sweep
            working_dir=sweep.working_dir,
            run_name=f"{spec.run_name}-trial-{number}",
        ),
        ExperimentRef(sweep.tracking_uri, spec.experiment_name, spec.mlflow_artifact_location),
        sweep.user,
        defaults=Defaults(nproc_per_node=spec.compute.nproc_per_node),
        grants=sweep.grants,
        tags={
            **sweep.tags,
            SWEEP_TAG: sweep.id,
            TRIAL_TAG: str(number),
            "air.command": redact(spec.command),
            **({PARENT_TAG: parent_run_id} if parent_run_id else {}),
        },
    )


def tagged(store: JobStore, sweep: Sweep, number: int) -> str | None:
    """The job of trial ``number`` submitted by a driver killed before it could record
    it, if there is one (its tags say which), else None."""
    for job in store.jobs():
        if job.created < sweep.created:
            break  # newest first: older jobs cannot be the sweep's
        tags = job.spec.tracking.tags
        if tags.get(SWEEP_TAG) == sweep.id and tags.get(TRIAL_TAG) == str(number):
            return job.id
    return None


class MetricReader:
    """The points of one metric that a job's journal gained since the last read: its
    latest attempt's, from the start of each new attempt."""

    def __init__(self, store: JobStore, job_id: str, metric: str) -> None:
        self.store = store
        self.job_id = job_id
        self.metric = metric
        self.attempt = 0
        self.offset = 0
        #: The last point read: (step, value).
        self.last: tuple[int, float] | None = None

    def read(self) -> list[tuple[int, float]]:
        """The new (step, value) points, in the order they were logged."""
        attempts = self.store.attempts(self.job_id)
        if not attempts:
            return []
        latest = attempts[-1].attempt
        if latest != self.attempt:
            self.attempt, self.offset, self.last = latest, 0, None
        path = AttemptDir(self.store.attempt_dir(self.job_id, latest)).metrics_journal
        found: list[tuple[int, float]] = []
        while lines := journal.read(path, self.offset):
            for points, end in lines:
                found += [(p.step, p.value) for p in points if p.key == self.metric]
                self.offset = end
        if found:
            self.last = found[-1]
        return found
