"""A sweep is its owner's: another user sees it only through a grant (the workload's
``permissions:``), stops or resumes it only with CAN_MANAGE_RUN, as for jobs; its
store is private to the user on disk; it cannot hold more ranks at once than the
machine."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from jupyter_air.identity import Identity
from jupyter_air.jobs.capacity import CPU_RANKS_PER_CORE, usable_cores
from jupyter_air.jobs.permissions import Forbidden, Level
from jupyter_air.jobs.service import Refused
from jupyter_air.jobs.store import JobStore
from jupyter_air.sweeps.service import SweepService
from jupyter_air.sweeps.store import Sweep, SweepStatus, SweepStore, UnknownSweep
from jupyter_air.sweeps.sweep_file import SweepFile

ALICE, BOB, MALLORY = Identity("alice"), Identity("bob"), Identity("mallory")


@pytest.fixture
def jobs(tmp_path: Path) -> JobStore:
    return JobStore(tmp_path / "air")


def made(jobs: JobStore) -> Sweep:
    spec = SweepFile.model_validate(
        {
            "experiment_name": "toy",
            "command": "python train.py",
            "permissions": ["bob:CAN_VIEW"],
            "space": {"x": {"type": "float", "low": -4, "high": 4}},
            "objective": {"minimize": "loss"},
            "trials": 3,
        }
    )
    return SweepStore(jobs.home).create(
        spec, owner="alice", working_dir=jobs.home, tracking_uri="sqlite:///x.db", user="alice"
    )


def test_another_user_can_neither_see_nor_stop_nor_resume_a_sweep(jobs: JobStore) -> None:
    sweep = made(jobs)
    mallory = SweepService(jobs, MALLORY)
    assert mallory.sweeps() == []
    for attempt in (mallory.get, mallory.stop, mallory.resume):
        with pytest.raises(Forbidden):
            attempt(sweep.id)
    assert SweepService(jobs, ALICE).get(sweep.id).status is SweepStatus.RUNNING
    with pytest.raises(UnknownSweep):
        mallory.get("sw-00000000")
    with pytest.raises(UnknownSweep):
        mallory.get("../jobs")


def test_a_grant_to_view_shows_the_sweep_and_stops_nothing(jobs: JobStore) -> None:
    sweep = made(jobs)
    bob = SweepService(jobs, BOB)
    assert [s.id for s in bob.sweeps()] == [sweep.id]
    assert bob.document(bob.get(sweep.id))["owner"] == "alice"
    with pytest.raises(Forbidden) as err:
        bob.stop(sweep.id)
    assert err.value.needed is Level.CAN_MANAGE_RUN
    assert bob.get(sweep.id).status is SweepStatus.RUNNING


def test_the_sweeps_store_is_private_to_its_user(jobs: JobStore) -> None:
    made(jobs)
    folder = jobs.home / "sweeps"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "optuna.db").stat().st_mode) == 0o600


def test_a_sweep_cannot_run_more_ranks_at_once_than_this_machine_holds(
    jobs: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``parallel`` trials of ``nproc_per_node`` ranks each are refused, naming
    ``parallel``, before anything is made (here: no GPU, 4 CPU ranks a core)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the CPU's rule, on any machine
    too_many = usable_cores() * CPU_RANKS_PER_CORE // 2 + 1
    spec = SweepFile.model_validate(
        {
            "experiment_name": "toy",
            "command": "python train.py",
            "compute": {"nproc_per_node": 2},
            "space": {"x": [1, 2]},
            "objective": {"minimize": "loss"},
            "trials": 4,
            "parallel": too_many,
        }
    )
    with pytest.raises(Refused) as err:
        SweepService(jobs, ALICE).create(spec, jobs.home, "sqlite:///x.db", "alice")
    assert err.value.field == "parallel"
    assert str(err.value).startswith(f"{too_many} trials of 2 rank(s) at once: ")
    assert SweepStore(jobs.home).sweeps() == []
