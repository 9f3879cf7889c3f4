"""A sweep's end told to whom its owner asked (``--notify``): one message with the best
trial, posted once however often its end is posted, only to targets that want that end
(fast: a real store and outbox, Optuna's trials told by hand, no job)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_air.jobs.store import JobStore
from jupyter_air.notify.targets import parse_all
from jupyter_air.sweeps import notices
from jupyter_air.sweeps.store import SweepStatus
from tests.sweeps.told import lr_sweep


@pytest.fixture
def jobs(tmp_path: Path) -> JobStore:
    return JobStore(tmp_path / "air")


def ended(jobs: JobStore, status: SweepStatus, values: dict[float, float], notify: str) -> str:
    """A sweep of ``lr`` whose trials ended with ``values`` (lr -> loss), ended ``status``
    and its end posted twice: its id."""
    store, sweep = lr_sweep(jobs.home, list(values.items()), parse_all([notify]))
    store.end(sweep.id, status, "stopped by alice" if status is SweepStatus.STOPPED else None)
    for _ in range(2):  # a driver started again posts it again
        notices.post_end(jobs, store.get(sweep.id), store.trials(sweep.id))
    return sweep.id


def titles(jobs: JobStore) -> list[str]:
    return [r.message.title for r in jobs.outbox.for_lab("alice", 0)]


def test_a_completed_sweep_says_its_best_trial_once(jobs: JobStore) -> None:
    sweep_id = ended(jobs, SweepStatus.COMPLETED, {0.1: 0.5, 0.001: 0.12}, "jupyterlab")
    assert titles(jobs) == [f"sweep {sweep_id} done: best val_loss = 0.12 (trial 1: lr=0.001)"]
    (record,) = jobs.outbox.for_lab("alice", 0)
    assert ("Trials", "2 complete") in record.message.facts
    assert record.message.command == f"air sweep get {sweep_id}"


def test_a_stopped_sweep_tells_only_targets_that_want_a_cancelled_end(jobs: JobStore) -> None:
    ended(jobs, SweepStatus.STOPPED, {0.1: 0.5}, "jupyterlab on:success")
    assert titles(jobs) == []
    sweep_id = ended(jobs, SweepStatus.STOPPED, {}, "jupyterlab on:cancelled")
    assert titles(jobs) == [f"sweep {sweep_id} stopped: no trial completed (stopped by alice)"]
