"""Helpers for code running on the ranks: log from rank 0 only.

As the managed product advises, metrics are logged once per step from rank 0, not
once per rank. These helpers are no-ops on every other rank.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import ParamSpec, TypeVar

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


@rank_zero_only
def log_metrics(metrics: dict[str, float], step: int | None = None) -> None:
    """``mlflow.log_metrics`` into the job's run, from rank 0 only.

    The job's run is MLFLOW_RUN_ID (MLflow's own start/end calls leave it set in a
    rank); a run the code started itself is used when no job run is set.
    """
    import mlflow

    run_id = os.environ.get("MLFLOW_RUN_ID")
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
