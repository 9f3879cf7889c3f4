"""Helpers for code running on the ranks: log from rank 0 only; ``log_metrics``'s steps
mark the loop's steps too (``perf.hooks``), for its step time, progress and ETA.

As the managed product advises, metrics are logged once per step from rank 0, not
once per rank. These helpers are no-ops on every other rank. In a job, rank 0's
metrics go to the attempt's journal (``tracking.journal``), never straight to MLflow:
a step never waits for a tracking server, nor for MLflow's import.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

from .perf.hooks import loop_step
from .tracking.journal import ATTEMPT_RUN, JOURNAL_ENV, Writer

P = ParamSpec("P")
R = TypeVar("R")


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def rank_zero_only(fn: Callable[P, R]) -> Callable[P, R | None]:
    """Run ``fn`` on rank 0; return None elsewhere."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R | None:
        return fn(*args, **kwargs) if rank() == 0 else None

    return wrapper


#: This process's journal, opened at the first call.
_journal: Writer | None = None


def _journal_writer() -> Writer | None:
    """The attempt's journal, if this rank runs where its attempt's directory is (a
    node of a Ray cluster without the store's disk logs to MLflow directly)."""
    global _journal
    path = os.environ.get(JOURNAL_ENV)
    if not path:
        return None
    if _journal is None or str(_journal.path) != path:
        if not Path(path).parent.is_dir():
            return None
        _journal = Writer(Path(path))
    return _journal


def log_metrics(metrics: dict[str, float], step: int | None = None) -> None:
    """``mlflow.log_metrics`` into the job's run, from rank 0 only.

    The job's run is MLFLOW_RUN_ID (MLflow's own start/end calls leave it set in a
    rank); a run the code started itself is used when no job run is set. In a job the
    points are journaled and shipped in the background (see ``tracking.journal``).
    Every rank that calls it with a ``step`` marks that step (``perf.hooks``): a loop
    that logs on every rank gets each rank's step time, its stragglers and profiles.
    """
    if step is not None:
        loop_step(step)
    if rank() != 0:
        return
    run_id = os.environ.get("MLFLOW_RUN_ID")
    journal = _journal_writer()
    if journal is not None and run_id is not None:  # "": its run is made later (deferred)
        journal.append(run_id or ATTEMPT_RUN, metrics, step)
        return
    import mlflow

    active = mlflow.active_run()
    if active is not None and run_id in (None, active.info.run_id):
        mlflow.log_metrics(metrics, step=step)
        return
    if run_id is None:
        raise RuntimeError(
            "log_metrics: no MLflow run to log into: MLFLOW_RUN_ID is not set and no run "
            "is active (outside %%air_distributed, call mlflow.start_run() first)"
        )
    from mlflow import MlflowClient

    client = MlflowClient()
    for key, value in metrics.items():
        client.log_metric(run_id, key, value, step=step or 0)
