"""The tick, driven by an injected clock and a launcher that records jobs without
starting them: due runs, catch-up, max_concurrent_runs, task chains, repair, and two
processes ticking one store at once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.identity import Identity
from jupyter_air.jobs.permissions import Level
from jupyter_air.jobs.store import JobStore
from jupyter_air.schedules.model import (
    MISSED,
    RunStatus,
    Schedule,
    ScheduleRun,
    TaskSpec,
    TaskStatus,
)
from jupyter_air.schedules.service import ScheduleForbidden, Schedules
from jupyter_air.schedules.store import ScheduleStore
from jupyter_air.schedules.sweep_task import sweep_of
from jupyter_air.schedules.tick import tick
from jupyter_air.sweeps import space
from jupyter_air.sweeps.store import SweepStatus, SweepStore
from tests.factories import job_spec

ME = Identity("alice", frozenset({"ml"}))


class FakeLaunch:
    """Records each submission as a PENDING job in the store (no supervisor)."""

    def __init__(self, jobs: JobStore) -> None:
        self.jobs = jobs
        self.launched: list[tuple[int, str, str]] = []  # (run id, task key, job id)
        self.fail: set[str] = set()  # task keys whose submission raises

    def __call__(self, schedule: Schedule, run: ScheduleRun, task: TaskSpec) -> str:
        if task.task_key in self.fail:
            raise RuntimeError("the tracking store is unreachable")
        if task.sweep is not None:  # its sweep's record, with no driver
            sweep = SweepStore(self.jobs.home).create(
                sweep_of(schedule.spec, schedule.owner, task),
                owner=schedule.owner,
                working_dir=self.jobs.home,
                tracking_uri="sqlite:///x.db",
                user=schedule.owner,
            )
            self.launched.append((run.id, task.task_key, sweep.id))
            return sweep.id
        job = self.jobs.create(job_spec("command"), owner=schedule.owner)
        self.launched.append((run.id, task.task_key, job.id))
        return job.id

    def job(self, task_key: str, run_id: int | None = None) -> str:
        return next(
            j for r, k, j in reversed(self.launched) if k == task_key and run_id in (None, r)
        )


class Clock:
    """The service's clock, moved by the tests."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0  # 2027-01-15 08:00 UTC

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def schedules(tmp_path: Path, clock: Clock) -> Schedules:
    return Schedules(JobStore(tmp_path / "air"), clock)


@pytest.fixture
def launch(schedules: Schedules) -> FakeLaunch:
    return FakeLaunch(schedules.jobs)


def chain(**extra: Any) -> dict[str, Any]:
    """prep -> train (ALL_SUCCESS), every 10 s (Quartz)."""
    doc: dict[str, Any] = {
        "name": "nightly",
        "schedule": {"quartz_cron_expression": "*/10 * * * * ?"},
        "tasks": [
            {"task_key": "prep", "workload": {"command": "python prep.py"}},
            {
                "task_key": "train",
                "depends_on": [{"task_key": "prep"}],
                "workload": {"command": "python train.py"},
            },
        ],
    }
    doc.update(extra)
    return doc


def create(schedules: Schedules, tmp_path: Path, doc: dict[str, Any]) -> Schedule:
    return schedules.create(ME, schedules.parse(doc, tmp_path), tracking_uri="sqlite:///x.db")


def finish(schedules: Schedules, job_id: str, status: str) -> None:
    schedules.jobs.update(job_id, status=status)


def test_a_due_time_fires_once_and_its_chain_follows_its_jobs(
    schedules: Schedules, launch: FakeLaunch, tmp_path: Path
) -> None:
    s = create(schedules, tmp_path, chain())
    assert s.next_due is not None
    due = s.next_due
    assert tick(schedules.store, launch, due - 0.5).started == []  # not yet
    fired = tick(schedules.store, launch, due)
    assert len(fired.started) == 1
    assert [k for _, k, _ in launch.launched] == ["prep"]
    assert tick(schedules.store, launch, due + 0.1).started == []  # the same time: never again
    assert [k for _, k, _ in launch.launched] == ["prep"]  # train waits for prep's job
    finish(schedules, launch.job("prep"), "SUCCEEDED")
    tick(schedules.store, launch, due + 0.5)
    assert [k for _, k, _ in launch.launched] == ["prep", "train"]
    finish(schedules, launch.job("train"), "SUCCEEDED")
    ended = tick(schedules.store, launch, due + 1)
    run = schedules.run(ME, fired.started[0])
    assert ended.ended == [run.id]
    assert run.status is RunStatus.SUCCEEDED
    assert run.scheduled_time == due
    assert {t.task_key: t.status for t in run.tasks} == {
        "prep": TaskStatus.SUCCEEDED,
        "train": TaskStatus.SUCCEEDED,
    }


def test_all_success_skips_train_after_prep_failed_and_the_run_fails(
    schedules: Schedules, launch: FakeLaunch, tmp_path: Path
) -> None:
    s = create(schedules, tmp_path, chain())
    assert s.next_due is not None
    run_id = tick(schedules.store, launch, s.next_due).started[0]
    finish(schedules, launch.job("prep"), "FAILED")
    tick(schedules.store, launch, s.next_due + 1)
    run = schedules.run(ME, run_id)
    assert [k for _, k, _ in launch.launched] == ["prep"]
    assert run.status is RunStatus.FAILED
    train = next(t for t in run.tasks if t.task_key == "train")
    assert train.status is TaskStatus.SKIPPED
    assert train.message == "run_if ALL_SUCCESS: prep FAILED"


@pytest.mark.parametrize(("run_if", "runs"), [("ALL_DONE", True), ("NONE_FAILED", False)])
def test_run_if_after_a_failure(
    schedules: Schedules, launch: FakeLaunch, tmp_path: Path, run_if: str, runs: bool
) -> None:
    doc = chain()
    doc["tasks"][1]["run_if"] = run_if
    s = create(schedules, tmp_path, doc)
    assert s.next_due is not None
    tick(schedules.store, launch, s.next_due)
    finish(schedules, launch.job("prep"), "FAILED")
    tick(schedules.store, launch, s.next_due + 1)
    assert ("train" in [k for _, k, _ in launch.launched]) is runs


def test_a_task_that_cannot_be_submitted_fails_and_says_why(
    schedules: Schedules, launch: FakeLaunch, tmp_path: Path
) -> None:
    s = create(schedules, tmp_path, chain())
    assert s.next_due is not None
    launch.fail.add("prep")
    run_id = tick(schedules.store, launch, s.next_due).started[0]
    run = schedules.run(ME, run_id)
    assert run.status is RunStatus.FAILED
    assert run.tasks[0].message == "could not submit: the tracking store is unreachable"


def test_a_time_due_while_max_concurrent_runs_run_is_skipped_with_the_reason(
    schedules: Schedules, launch: FakeLaunch, tmp_path: Path
) -> None:
    s = create(schedules, tmp_path, chain())
    assert s.next_due is not None
    first = tick(schedules.store, launch, s.next_due).started
    second = tick(schedules.store, launch, s.next_due + 10)  # prep still running
    assert first
    assert second.started == []
    assert len(second.skipped) == 1
    skipped = schedules.run(ME, second.skipped[0])
    assert skipped.status is RunStatus.SKIPPED
    assert skipped.message == "max_concurrent_runs (1) run was still running"
    assert skipped.tasks == ()


def test_catch_up_latest_fires_the_latest_missed_time_and_skips_the_others(
    schedules: Schedules, launch: FakeLaunch, tmp_path: Path
) -> None:
    s = create(schedules, tmp_path, chain(catch_up="latest"))
    assert s.next_due is not None
    later = s.next_due + 45  # the scheduler was down: 5 times passed (0, 10, 20, 30, 40)
    result = tick(schedules.store, launch, later)
    runs = schedules.runs(ME, s.id)
    assert [r.scheduled_time - s.next_due for r in runs] == [40, 30, 20, 10, 0]
    assert runs[0].status is RunStatus.RUNNING
    assert result.started == [runs[0].id]
    assert all(r.status is RunStatus.SKIPPED and r.message == MISSED for r in runs[1:])


def test_catch_up_none_skips_every_missed_time(
    schedules: Schedules, launch: FakeLaunch, tmp_path: Path
) -> None:
    s = create(schedules, tmp_path, chain(catch_up="none"))
    assert s.next_due is not None
    result = tick(schedules.store, launch, s.next_due + 47)  # 40 is late by more than 5 s
    assert result.started == []
    assert len(result.skipped) == 5
    assert launch.launched == []
    # and the next time, on time, fires
    assert tick(schedules.store, launch, s.next_due + 50).started


def test_a_long_downtime_records_the_latest_missed_times_and_counts_the_rest(
    schedules: Schedules, launch: FakeLaunch, tmp_path: Path
) -> None:
    s = create(schedules, tmp_path, chain(catch_up="none"))
    assert s.next_due is not None
    tick(schedules.store, launch, s.next_due + 10 * 200)  # 201 times missed
    runs = schedules.runs(ME, s.id, limit=1000)
    assert len(runs) == 101
    assert runs[-1].message == f"{MISSED} (and 100 earlier times not listed)"


def test_pause_stops_firing_and_resume_does_not_catch_up_the_pause(
    schedules: Schedules, launch: FakeLaunch, tmp_path: Path, clock: Clock
) -> None:
    s = create(schedules, tmp_path, chain())
    paused = schedules.pause(ME, s.id)
    assert paused.next_due is None
    assert schedules.next_fire_times(paused) == []
    clock.now += 100  # paused for 100 s: 10 times pass
    assert tick(schedules.store, launch, clock.now).started == []
    resumed = schedules.resume(ME, s.id)
    assert resumed.next_due == clock.now + 10 - clock.now % 10
    result = tick(schedules.store, launch, resumed.next_due)
    assert len(result.started) == 1
    assert result.skipped == []  # the times while paused are not "missed"
    assert len(schedules.runs(ME, s.id)) == 1


def test_run_now_runs_even_when_paused(
    schedules: Schedules, launch: FakeLaunch, tmp_path: Path
) -> None:
    s = create(schedules, tmp_path, chain())
    schedules.pause(ME, s.id)
    run = schedules.run_now(ME, s.id)
    assert run.status is RunStatus.RUNNING
    assert run.trigger.value == "RUN_NOW"
    tick(schedules.store, launch, run.scheduled_time + 0.1)
    assert [k for _, k, _ in launch.launched] == ["prep"]


def test_repair_reruns_the_failed_task_and_what_was_skipped_after_it(
    schedules: Schedules, launch: FakeLaunch, tmp_path: Path
) -> None:
    s = create(schedules, tmp_path, chain())
    assert s.next_due is not None
    run_id = tick(schedules.store, launch, s.next_due).started[0]
    with pytest.raises(ValueError, match="is still running"):
        schedules.repair(ME, run_id)
    failed_job = launch.job("prep")
    finish(schedules, failed_job, "FAILED")
    tick(schedules.store, launch, s.next_due + 1)
    repaired = schedules.repair(ME, run_id)
    assert repaired.status is RunStatus.RUNNING
    prep = next(t for t in repaired.tasks if t.task_key == "prep")
    assert prep.status is TaskStatus.PENDING
    assert prep.previous_job_ids == (failed_job,)
    tick(schedules.store, launch, s.next_due + 2)
    finish(schedules, launch.job("prep"), "SUCCEEDED")
    tick(schedules.store, launch, s.next_due + 3)
    finish(schedules, launch.job("train"), "SUCCEEDED")
    tick(schedules.store, launch, s.next_due + 4)
    assert schedules.run(ME, run_id).status is RunStatus.SUCCEEDED
    with pytest.raises(ValueError, match="no failed task"):
        schedules.repair(ME, run_id)


def test_a_sweep_task_starts_a_sweep_and_ends_as_it_does(
    schedules: Schedules, launch: FakeLaunch, tmp_path: Path
) -> None:
    """Its run links the sweep; no trial completed fails it (and skips what follows),
    a repair starts a new sweep, whose best trial succeeds it; a stopped one cancels."""
    sweep = {
        "command": "python train.py",
        "space": {"lr": {"type": "float", "low": 0.001, "high": 0.1}},
        "objective": {"minimize": "val_loss"},
        "trials": 2,
    }
    doc = chain(experiment_name="searches")
    doc["tasks"][0] = {"task_key": "prep", "sweep": sweep}
    s = create(schedules, tmp_path, doc)
    assert s.next_due is not None
    fired = tick(schedules.store, launch, s.next_due)
    run_id = fired.started[0]
    first = launch.job("prep")
    assert (fired.sweeps, fired.submitted) == ([first], [])
    prep = schedules.run(ME, run_id).tasks[0]
    assert (prep.status, prep.sweep_id, prep.job_id) == (TaskStatus.RUNNING, first, None)
    sweeps = SweepStore(schedules.jobs.home)
    found = sweeps.get(first)
    assert (found.owner, found.spec.experiment_name) == ("alice", "searches")
    tick(schedules.store, launch, s.next_due + 1)
    assert schedules.run(ME, run_id).status is RunStatus.RUNNING  # while the sweep runs

    sweeps.end(first, SweepStatus.COMPLETED)
    tick(schedules.store, launch, s.next_due + 2)
    run = schedules.run(ME, run_id)
    assert run.status is RunStatus.FAILED
    assert [(t.status, t.message) for t in run.tasks] == [
        (TaskStatus.FAILED, f"no trial of sweep {first} completed"),
        (TaskStatus.SKIPPED, "run_if ALL_SUCCESS: prep FAILED"),
    ]

    repaired = schedules.repair(ME, run_id)
    assert repaired.tasks[0].previous_sweep_ids == (first,)
    tick(schedules.store, launch, s.next_due + 3)
    second = launch.job("prep")
    assert second != first
    study = sweeps.study(sweeps.get(second))
    study.tell(study.ask(space.distributions(sweeps.get(second).spec)), 0.25)
    sweeps.end(second, SweepStatus.COMPLETED)
    tick(schedules.store, launch, s.next_due + 4)
    prep = schedules.run(ME, run_id).tasks[0]
    assert (prep.status, prep.sweep_id) == (TaskStatus.SUCCEEDED, second)
    assert prep.message == "best: trial 0, val_loss 0.25"
    assert [k for _, k, _ in launch.launched] == ["prep", "prep", "train"]

    later = schedules.run_now(ME, s.id)
    tick(schedules.store, launch, s.next_due + 5)
    sweeps.end(launch.job("prep", later.id), SweepStatus.STOPPED)
    tick(schedules.store, launch, s.next_due + 6)
    assert schedules.run(ME, later.id).tasks[0].status is TaskStatus.CANCELLED


def test_repair_rerun_dependent_also_reruns_what_succeeded_after(
    schedules: Schedules, launch: FakeLaunch, tmp_path: Path
) -> None:
    doc = chain()
    doc["tasks"][1]["run_if"] = "ALL_DONE"
    s = create(schedules, tmp_path, doc)
    assert s.next_due is not None
    run_id = tick(schedules.store, launch, s.next_due).started[0]
    finish(schedules, launch.job("prep"), "FAILED")
    tick(schedules.store, launch, s.next_due + 1)
    finish(schedules, launch.job("train"), "SUCCEEDED")
    tick(schedules.store, launch, s.next_due + 2)
    plain = {t.task_key for t in schedules.run(ME, run_id).tasks if t.status.done}
    assert plain == {"prep", "train"}
    repaired = schedules.repair(ME, run_id, rerun_dependent=True)
    assert {t.task_key: t.status for t in repaired.tasks} == {
        "prep": TaskStatus.PENDING,
        "train": TaskStatus.PENDING,
    }


def test_an_update_never_fires_what_was_due_before_it(
    schedules: Schedules, launch: FakeLaunch, tmp_path: Path
) -> None:
    s = create(schedules, tmp_path, chain())
    updated = schedules.update(ME, s.id, schedules.parse(chain(name="renamed"), tmp_path))
    assert updated.name == "renamed"
    assert updated.id == s.id
    assert updated.handled_through >= s.handled_through


def test_grants_decide_who_sees_and_who_acts(schedules: Schedules, tmp_path: Path) -> None:
    s = create(schedules, tmp_path, chain(permissions=["bob:CAN_VIEW", "group:ops:CAN_MANAGE_RUN"]))
    bob, carol, ops = Identity("bob"), Identity("carol"), Identity("dave", frozenset({"ops"}))
    assert [x.id for x in schedules.visible(bob)] == [s.id]
    assert schedules.visible(carol) == []
    with pytest.raises(
        ScheduleForbidden, match=r"CAN_MANAGE_RUN on schedule \w+: its owner, alice"
    ):
        schedules.run_now(bob, s.id)
    with pytest.raises(ScheduleForbidden):
        schedules.get(carol, s.id)
    assert schedules.run_now(ops, s.id).status is RunStatus.RUNNING
    with pytest.raises(ScheduleForbidden, match="CAN_MANAGE on schedule"):
        schedules.pause(ops, s.id)
    with pytest.raises(ScheduleForbidden):
        schedules.delete(bob, s.id)
    assert schedules.level(ops, s.id) is Level.CAN_MANAGE_RUN
    schedules.delete(ME, s.id)
    assert schedules.visible(ME) == []


def test_a_name_is_unique_per_owner(schedules: Schedules, tmp_path: Path) -> None:
    from jupyter_air.schedules.service import NameTaken

    create(schedules, tmp_path, chain())
    with pytest.raises(NameTaken, match="you already have a schedule named 'nightly'"):
        create(schedules, tmp_path, chain())
    assert len(schedules.visible(ME)) == 1
    other = Identity("bob")
    schedules.create(other, schedules.parse(chain(), tmp_path), tracking_uri="sqlite:///x.db")


# -- two processes, one store ------------------------------------------------------------


def race(home: str, start: float, out: str) -> None:
    """One racer: tick the store at each second of 20 s, recording what it launched."""
    jobs = JobStore(Path(home))
    launch = FakeLaunch(jobs)
    schedules = Schedules(jobs)
    for i in range(200):
        tick(schedules.store, launch, start + i * 0.1)
        for _, _, job_id in launch.launched:
            jobs.update(job_id, status="SUCCEEDED")
    Path(out).write_text(json.dumps(launch.launched))


@pytest.mark.heavy
def test_two_processes_ticking_one_store_never_fire_a_time_or_a_task_twice(
    schedules: Schedules, tmp_path: Path
) -> None:
    doc = chain(max_concurrent_runs=5)
    doc["schedule"] = {"quartz_cron_expression": "* * * * * ?"}  # every second
    s = create(schedules, tmp_path, doc)
    assert s.next_due is not None
    racers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from tests.schedules.test_schedule_tick import race; "
                "race(sys.argv[1], float(sys.argv[2]), sys.argv[3])",
                str(schedules.jobs.home),
                repr(s.next_due),
                str(tmp_path / f"racer{i}.json"),
            ],
            cwd=Path(__file__).parents[2],
        )
        for i in range(2)
    ]
    assert [p.wait(timeout=120) for p in racers] == [0, 0]
    launched = [
        tuple(x) for i in range(2) for x in json.loads((tmp_path / f"racer{i}.json").read_text())
    ]
    last = FakeLaunch(schedules.jobs)  # the runs the racers left running end here
    while schedules.store.active_runs():
        tick(schedules.store, last, s.next_due + 19.95)
        for _, _, job_id in last.launched:
            finish(schedules, job_id, "SUCCEEDED")
    launched += last.launched
    runs = schedules.runs(ME, s.id, limit=1000)
    times = [r.scheduled_time for r in runs]
    assert len(times) == len(set(times)) == 20  # one run per second of the 20 s
    keys = [(run_id, key) for run_id, key, _ in launched]
    assert len(keys) == len(set(keys)) == 40  # prep and train of each run, once
    assert {r.status for r in runs} == {RunStatus.SUCCEEDED}


def test_a_task_claimed_by_a_scheduler_that_died_fails_one_on_another_host_waits(
    schedules: Schedules, launch: FakeLaunch, tmp_path: Path
) -> None:
    import socket

    s = create(schedules, tmp_path, chain())
    first = schedules.run_now(ME, s.id)
    second = schedules.store.add_run_now(s, schedules.clock() + 1)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    gone = f"{socket.gethostname()}:{dead.stdout.strip()}:{time.time()}"
    assert schedules.store.claim(first.id, "prep", gone)
    assert schedules.store.claim(second, "prep", "elsewhere:4242:1.0")
    tick(schedules.store, launch, schedules.clock() + 2)
    prep = {r.id: r.tasks[0] for r in schedules.runs(ME, s.id)}
    assert prep[first.id].status is TaskStatus.FAILED
    assert prep[first.id].message == "the scheduler submitting it stopped before it was submitted"
    assert prep[second].status is TaskStatus.SUBMITTING  # its scheduler runs elsewhere
    assert launch.launched == []


def test_a_store_made_before_sweep_tasks_gains_their_columns(tmp_path: Path) -> None:
    jobs = JobStore(tmp_path / "air")
    with jobs.connect() as db:
        db.execute(
            "CREATE TABLE schedule_tasks (run_id INTEGER NOT NULL, task_key TEXT NOT NULL, "
            "status TEXT NOT NULL, job_id TEXT, message TEXT, claimed_by TEXT, "
            "previous_job_ids TEXT NOT NULL DEFAULT '[]', PRIMARY KEY (run_id, task_key))"
        )
        db.execute(
            "INSERT INTO schedule_tasks (run_id, task_key, status, job_id) "
            "VALUES (1, 'train', 'SUCCEEDED', 'j-1')"
        )
    ScheduleStore(jobs)
    ScheduleStore(jobs)  # a second opening finds them there
    with jobs.connect() as db:
        row = db.execute(
            "SELECT job_id, sweep_id, previous_sweep_ids FROM schedule_tasks"
        ).fetchone()
    assert tuple(row) == ("j-1", None, "[]")
