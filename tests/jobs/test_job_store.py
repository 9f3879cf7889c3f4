"""The job store: its view of jobs whose supervisor is gone, and how its commits reach the disk."""

from __future__ import annotations

import gc
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from jupyter_air.identity import Identity, os_identity
from jupyter_air.jobs.cancel import Elsewhere, cancel
from jupyter_air.jobs.documents import job_documents
from jupyter_air.jobs.permissions import parse_grant
from jupyter_air.jobs.store import JobStore
from tests.factories import job_spec


def ended_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def orphan(store: JobStore) -> str:
    """A running job whose supervisor died without recording the end."""
    job = store.create(job_spec("command", command=["true"]))
    store.update(job.id, status="RUNNING", supervisor_pid=ended_pid())
    store.start_attempt(job.id, 1, None)
    return job.id


def recorded_status(store: JobStore, job_id: str) -> str:
    """The status in the database itself, not as a read shows it."""
    with closing(sqlite3.connect(store.path)) as db:
        return str(db.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()[0])


def test_a_job_whose_supervisor_died_unrecorded_is_failed_and_leaves_the_active_list(
    tmp_path: Path,
) -> None:
    store = JobStore(tmp_path)
    job = store.create(job_spec("command", command=["true"]))
    pid = ended_pid()
    store.update(job.id, status="RUNNING", supervisor_pid=pid)
    store.start_attempt(job.id, 1, None)

    assert store.jobs(active_only=True) == []
    settled = store.get(job.id)
    assert settled.status == "FAILED"
    assert settled.message == f"its supervisor (pid {pid}) ended without recording the end"
    (attempt,) = store.attempts(job.id)
    assert (attempt.status, attempt.message) == ("FAILED", settled.message)


def test_a_job_whose_supervisor_lives_or_recorded_its_end_is_left_alone(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    running = store.create(job_spec("command", command=["true"]))
    store.update(running.id, status="RUNNING", supervisor_pid=os.getpid())
    done = store.create(job_spec("command", command=["true"]))
    store.update(done.id, status="SUCCEEDED", supervisor_pid=ended_pid())

    assert [j.id for j in store.jobs(active_only=True)] == [running.id]
    assert store.get(running.id).status == "RUNNING"
    assert store.get(done.id).status == "SUCCEEDED"


def test_a_job_supervised_on_another_machine_is_left_to_that_machine(tmp_path: Path) -> None:
    """A job store on a shared disk: a pid means nothing on another host."""
    store = JobStore(tmp_path)
    job = store.create(job_spec("command", command=["true"]))
    store.update(job.id, status="RUNNING", supervisor_pid=ended_pid(), supervisor_host="gpu-b")
    assert store.get(job.id).status == "RUNNING"
    with pytest.raises(Elsewhere, match="is supervised on gpu-b: cancel it there"):
        cancel(store, job.id)


def test_a_pid_reused_by_a_later_process_is_not_the_supervisor(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job = store.create(job_spec("command", command=["true"]))
    # The job says its supervisor was running in 1970; the process that holds that pid
    # now (this test) started much later: the pid was reused, the supervisor is gone.
    store.update(job.id, status="RUNNING", supervisor_pid=os.getpid(), started=1.0)
    assert store.get(job.id).status == "FAILED"


def test_active_jobs_whose_supervisor_died_do_not_take_the_places_of_live_ones(
    tmp_path: Path,
) -> None:
    store = JobStore(tmp_path)
    running = store.create(job_spec("command", command=["true"]))
    store.update(running.id, status="RUNNING", supervisor_pid=os.getpid())
    orphans = [orphan(store) for _ in range(3)]  # newer than the live job

    assert [j.id for j in store.jobs(active_only=True, limit=1)] == [running.id]
    assert [j.id for j in store.jobs(active_only=True, limit=2)] == [running.id]
    assert [j.id for j in store.jobs(limit=2)] == orphans[:-3:-1]


def test_a_page_of_job_documents_reads_the_store_a_fixed_number_of_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JobStore(tmp_path)
    statements: list[str] = []
    connect = store._connect

    @contextmanager
    def traced() -> Iterator[sqlite3.Connection]:
        with connect() as db:
            db.set_trace_callback(statements.append)
            yield db

    monkeypatch.setattr(store, "_connect", traced)

    def page_of(count: int) -> int:
        for _ in range(count):
            job = store.create(job_spec("command", command=["true"]))
            store.start_attempt(job.id, 1, "run-1")
            store.start_attempt(job.id, 2, "run-2")
        statements.clear()
        documents = job_documents(store, store.jobs(limit=count), os_identity())
        assert [len(d["attempts"]) for d in documents] == [2] * count
        return len(statements)

    assert page_of(2) == page_of(25) == 3  # the jobs, their attempts, their children


# -- commits: no fsync each in WAL mode, durable across a process killed outright -----------

SYNCHRONOUS = {1: "NORMAL", 2: "FULL"}  # PRAGMA synchronous's numbers


def synchronous(store: JobStore) -> str:
    with store.connect() as db:
        return SYNCHRONOUS[int(db.execute("PRAGMA synchronous").fetchone()[0])]


def test_a_wal_store_commits_without_an_fsync_and_keeps_jobs_of_a_process_killed_outright(
    tmp_path: Path,
) -> None:
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, pathlib, signal, sys\n"
            "from jupyter_air.jobs.spec import JobKind, job_spec\n"
            "from jupyter_air.jobs.store import JobStore\n"
            "job = JobStore(pathlib.Path(sys.argv[1])).create(job_spec(JobKind.COMMAND))\n"
            "print(job.id, flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -9, killed.stderr
    store = JobStore(tmp_path)
    assert store.wal
    assert synchronous(store) == "NORMAL"
    assert store.get(killed.stdout.strip()).status == "PENDING"


def test_a_store_on_a_network_filesystem_keeps_an_fsync_per_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_air import paths

    monkeypatch.setattr(paths, "filesystem_type", lambda path: "nfs4")
    store = JobStore(tmp_path)
    assert not store.wal
    assert synchronous(store) == "FULL"


def test_a_wal_store_keeps_its_wal_between_calls_and_lets_it_go_when_dropped(
    tmp_path: Path,
) -> None:
    """The last connection's close checkpoints and deletes the WAL, which the next call
    would re-create: an idle connection of the store's own keeps any call from being last."""
    store = JobStore(tmp_path)
    store.create(job_spec("command"))
    assert (tmp_path / "jobs.db-wal").exists()
    del store
    gc.collect()
    with closing(sqlite3.connect(tmp_path / "jobs.db")) as db:
        db.execute("SELECT count(*) FROM jobs").fetchone()
    assert not (tmp_path / "jobs.db-wal").exists()  # that close was the last


def test_a_store_of_an_earlier_version_reads_its_flat_workloads_as_specs(tmp_path: Path) -> None:
    JobStore(tmp_path).close()
    flat = {
        "kind": "command",
        "command": ["python", "train.py"],
        "nproc_per_node": 2,
        "nnodes": 2,
        "backend": "ray",
        "ray_address": "10.0.0.1:6379",
        "max_retries": 1,
        "tracking_uri": "sqlite:///m.db",
        "experiment_id": "7",
        "run_name": "old",
        "tags": {"air.notebook": "a.ipynb", "air.first_run_id": "r1"},
    }
    with closing(sqlite3.connect(tmp_path / "jobs.db")) as db, db:
        db.execute("ALTER TABLE jobs DROP COLUMN experiment_id")
        db.execute(
            "INSERT INTO jobs (id, created, owner, status, workload) VALUES (?, 0, 'me', ?, ?)",
            ("20261101-000000-abcdef", "SUCCEEDED", json.dumps(flat)),
        )
    job = JobStore(tmp_path).get("20261101-000000-abcdef")
    spec = job.spec
    assert (spec.kind, spec.program.command) == ("command", ("python", "train.py"))
    assert (spec.compute.nproc_per_node, spec.compute.nnodes, spec.policy.max_retries) == (2, 2, 1)
    assert (spec.backend.name, dict(spec.backend.settings)) == ("ray", {"address": "10.0.0.1:6379"})
    assert (spec.tracking.first_run_id, dict(spec.tracking.tags)) == (
        "r1",
        {"air.notebook": "a.ipynb"},
    )
    assert job.experiment_id == "7"
    with closing(sqlite3.connect(tmp_path / "jobs.db")) as db:
        stored = json.loads(db.execute("SELECT workload FROM jobs").fetchone()[0])
    assert "program" in stored, "migrated once, in the database"


def test_a_spec_does_not_change_once_built() -> None:
    spec = job_spec("command", env={"A": "1"}, tags={"t": "1"})
    with pytest.raises(TypeError, match="does not change"):
        spec.program.env["A"] = "2"  # type: ignore[index]
    with pytest.raises(AttributeError):
        spec.compute.nnodes = 3  # type: ignore[misc]


# -- children: jobs submitted from inside a job ------------------------------------------


def test_a_job_submitted_from_inside_another_is_its_child_with_its_grants(
    tmp_path: Path,
) -> None:
    store = JobStore(tmp_path)
    task = store.create(job_spec("command"), owner="alice", grants=(parse_grant("bob:CAN_VIEW"),))
    first = store.create(job_spec("python"), owner="alice", parent_id=task.id)
    second = store.create(
        job_spec("python"),
        owner="alice",
        parent_id=task.id,
        grants=(parse_grant("carol:CAN_VIEW"),),
    )
    assert (first.parent_id, second.parent_id) == (task.id, task.id)
    assert store.children([task.id], Identity("alice")) == {task.id: [first.id, second.id]}
    assert store.children([task.id], Identity("bob")) == {task.id: [first.id, second.id]}
    assert store.children([task.id], Identity("carol")) == {task.id: [second.id]}
    assert store.children([task.id], Identity("mallory")) == {task.id: []}
    assert store.children([first.id], Identity("alice")) == {first.id: []}


def test_a_job_never_lands_under_someone_elses_or_an_unknown_job(tmp_path: Path) -> None:
    """The parent comes from the environment, which the submitter controls."""
    store = JobStore(tmp_path)
    victim = store.create(job_spec("command"), owner="alice")
    planted = store.create(job_spec("python"), owner="mallory", parent_id=victim.id)
    orphan = store.create(job_spec("python"), owner="alice", parent_id="20260101-000000-000000")
    assert (planted.parent_id, orphan.parent_id) == (None, None)
    assert store.children([victim.id], Identity("alice")) == {victim.id: []}
    assert store.access(planted.id).grants == (), "nothing of alice's job is inherited"


def test_a_store_of_an_earlier_version_gains_the_parent_column(tmp_path: Path) -> None:
    with closing(sqlite3.connect(tmp_path / "jobs.db")) as db, db:
        db.execute(
            "CREATE TABLE jobs (id TEXT PRIMARY KEY, created REAL NOT NULL, owner TEXT NOT NULL,"
            " status TEXT NOT NULL, workload TEXT NOT NULL, supervisor_pid INTEGER,"
            " started REAL, ended REAL, message TEXT)"
        )
    store = JobStore(tmp_path)
    parent = store.create(job_spec("command"), owner="alice")
    child = store.create(job_spec("python"), owner="alice", parent_id=parent.id)
    assert store.get(child.id).parent_id == parent.id
    assert store.get(parent.id).parent_id is None
