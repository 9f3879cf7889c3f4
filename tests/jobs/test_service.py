"""The jobs service, without processes: each call checks its caller against the job's
grants, says why it cannot act, and places a submission on its backend."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.identity import Identity
from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs import backends
from jupyter_air.jobs.backends.base import (
    AttemptContext,
    Backend,
    BackendRefused,
    Nodes,
    Placement,
)
from jupyter_air.jobs.permissions import Forbidden, Principal, parse_grant
from jupyter_air.jobs.request import JobRequest, Program
from jupyter_air.jobs.service import Conflict, JobService, NoLogs, Refused
from jupyter_air.jobs.spec import JobKind
from jupyter_air.jobs.store import JobStore, UnknownJob
from jupyter_air.jobs.workload_file import Submission
from jupyter_air.status import JobStatus
from jupyter_air.tracking import probe, run_tails
from jupyter_air.tracking.targets import ExperimentRef, RunTarget
from tests.factories import job_spec

ALICE, BOB, CAROL = Identity("alice"), Identity("bob"), Identity("carol", frozenset({"ml"}))


@pytest.fixture
def store(tmp_path: Path) -> JobStore:
    return JobStore(tmp_path)


def alices_job(store: JobStore, *grants: str) -> str:
    spec = job_spec("command", command=["true"])
    return store.create(spec, owner="alice", grants=tuple(map(parse_grant, grants))).id


def test_a_job_is_read_by_its_owner_and_whom_it_is_granted_to_only(store: JobStore) -> None:
    job_id = alices_job(store, "bob:CAN_VIEW", "group:ml:CAN_VIEW")
    for who in (ALICE, BOB, CAROL):
        assert JobService(store, who).get(job_id).id == job_id
    with pytest.raises(Forbidden, match=f"You don't have CAN_VIEW on job {job_id}"):
        JobService(store, Identity("mallory")).get(job_id)
    assert [j.id for j in JobService(store, Identity("mallory")).jobs()] == []
    assert [j.id for j in JobService(store, CAROL).jobs()] == [job_id]


def test_an_id_that_is_not_a_job_id_is_unknown_without_reading_the_store(store: JobStore) -> None:
    with pytest.raises(UnknownJob):
        JobService(store, ALICE).get("../../etc/passwd")


def test_a_viewer_can_neither_cancel_nor_share(store: JobStore) -> None:
    job_id = alices_job(store, "bob:CAN_VIEW")
    bob = JobService(store, BOB)
    with pytest.raises(Forbidden, match="CAN_MANAGE_RUN"):
        bob.cancel(job_id)
    with pytest.raises(Forbidden, match="CAN_MANAGE"):
        bob.change_access(job_id, (parse_grant("carol:CAN_VIEW"),))
    assert [g.principal.name for g in bob.access(job_id).grants] == ["bob"]


def test_a_grant_changed_before_a_deferred_run_is_made_is_the_one_it_gets(
    store: JobStore,
) -> None:
    """The job ended without a run (its server was down): the tail process will make it,
    and mirror the grants it is given then; a revoke after the end must reach it."""
    spec = job_spec("command", command=["true"], tracking_uri="http://mlflow.team:5000")
    job = store.create(spec, owner="alice", grants=(parse_grant("bob:CAN_VIEW"),))
    spool = store.home / "tails"
    made = run_tails.NewRun(job.id, 1, "u", None, "e", None, {}, None, None)
    recipe = {**dataclasses.asdict(made), "grants": [["bob", "CAN_VIEW", False]]}
    attempt = AttemptDir(store.attempt_dir(job.id, 1)).make()
    ended = run_tails.Tail(job.id, 1, "", "SUCCEEDED", "u", str(attempt.path), False)
    run_tails.keep(spool, dataclasses.replace(ended, new_run=recipe))

    JobService(store, ALICE).change_access(
        job.id, (parse_grant("carol:CAN_MANAGE_RUN"),), (Principal("user", "bob"),)
    )
    (kept,) = run_tails.pending(spool)
    assert kept.new_run is not None
    assert kept.new_run["grants"] == [["carol", "CAN_MANAGE_RUN", False]]


def test_a_job_that_ended_or_runs_elsewhere_cannot_be_cancelled_here(store: JobStore) -> None:
    ended = alices_job(store)
    store.update(ended, status=JobStatus.SUCCEEDED)
    alice = JobService(store, ALICE)
    with pytest.raises(Conflict, match=f"job {ended} already ended \\(succeeded\\)"):
        alice.cancel(ended)
    elsewhere = alices_job(store)
    store.update(elsewhere, status=JobStatus.RUNNING, supervisor_pid=1, supervisor_host="gpu-7")
    with pytest.raises(Conflict, match="supervised on gpu-7: cancel it there"):
        alice.cancel(elsewhere)


def test_logs_are_of_an_attempt_that_exists_until_they_expire(store: JobStore) -> None:
    job_id = alices_job(store)
    alice = JobService(store, ALICE)
    with pytest.raises(NoLogs, match="has no attempt yet"):
        alice.log_attempt(alice.get(job_id))
    store.start_attempt(job_id, 1, None)
    store.start_attempt(job_id, 2, None)
    latest = alice.log_attempt(alice.get(job_id))
    assert dataclasses.astuple(latest) == (2, 2, store.attempt_dir(job_id, 2))
    assert alice.log_attempt(alice.get(job_id), 1).attempt == 1
    with pytest.raises(NoLogs, match=r"attempt 3 of job .*: it has 1 to 2"):
        alice.log_attempt(alice.get(job_id), 3)
    store.job_dir(job_id).rmdir()
    with pytest.raises(NoLogs, match="have expired"):
        alice.log_attempt(alice.get(job_id))
    assert alice.log_attempt(alice.get(job_id), empty=True).attempt == 2  # a view reads nothing


def test_a_view_reads_a_job_without_attempts_as_its_first_attempt_empty(store: JobStore) -> None:
    job_id = alices_job(store)
    alice = JobService(store, ALICE)
    place = alice.log_attempt(alice.get(job_id), empty=True)
    assert (place.attempt, place.attempts, place.directory.exists()) == (1, 0, False)
    with pytest.raises(NoLogs, match=r"attempt 2 of job .*: it has 1 to 1"):
        alice.log_attempt(alice.get(job_id), 2, empty=True)


class Recording(Backend):
    """A backend that runs nothing: it keeps what it was asked, refuses on demand."""

    name = "recording"
    multi_node = True

    def __init__(self) -> None:
        self.asked: list[Placement] = []

    def prepare(self, placement: Placement) -> dict[str, Any]:
        self.asked.append(placement)
        if placement.settings.get("queue") == "full":
            raise BackendRefused(None, "the queue is full")
        return {"queue": placement.settings.get("queue", "default")}

    def start(self, attempt: AttemptContext) -> Nodes:
        raise AssertionError("no job is started here")


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> Recording:
    backend = Recording()
    monkeypatch.setattr(backends, "names", lambda: ["local", "recording"])
    real = backends.get
    monkeypatch.setattr(backends, "get", lambda n: backend if n == "recording" else real(n))
    return backend


def test_place_asks_the_submission_s_backend_and_the_spec_keeps_its_answer(
    store: JobStore, recording: Recording
) -> None:
    submission = Submission.model_validate({"backend": "recording", "compute": {"nnodes": 3}})
    placed = JobService(store, ALICE).place(submission, settings={"queue": "gpu"})
    [asked] = recording.asked
    assert (asked.nnodes, asked.nproc_per_node, dict(asked.settings)) == (3, 1, {"queue": "gpu"})
    spec = placed.spec(Program(JobKind.PYTHON))
    assert (spec.backend.name, dict(spec.backend.settings)) == ("recording", {"queue": "gpu"})
    assert spec.compute.nnodes == 3
    with pytest.raises(Refused, match="the queue is full") as refused:
        JobService(store, ALICE).place(submission, settings={"queue": "full"})
    assert refused.value.field is None


def test_grants_the_caller_may_not_give_are_refused_before_the_backend_is_asked(
    store: JobStore, recording: Recording
) -> None:
    submission = Submission.model_validate(
        {"backend": "recording", "permissions": ["alice:CAN_VIEW"]}
    )
    with pytest.raises(Refused, match="owns the job") as refused:
        JobService(store, ALICE).place(submission)
    assert refused.value.field == "permissions"
    assert recording.asked == []


# -- start: one request in, refused with nothing started -----------------------------


class Destination:
    """A kernel's destination that says which of its questions ``start`` asked."""

    def __init__(self, tracking_uri: str) -> None:
        self.tracking_uri = tracking_uri
        self.asked: list[str] = []

    def resolve(self) -> RunTarget:
        self.asked.append("resolve")
        raise AssertionError("the experiment is resolved only once nothing can refuse")

    def unanswered(self) -> ExperimentRef:
        self.asked.append("unanswered")
        raise OfflineOnly("named offline")


class OfflineOnly(Exception):
    """What the test's destination raises when it is asked for the offline name."""


def request(destination: Destination, **fields: Any) -> JobRequest:
    return JobRequest(
        Submission.model_validate({"backend": "recording", **fields}),
        Program(JobKind.PYTHON, payload=b"x"),
        destination,
        "alice",
    )


def closed_uri() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_a_request_whose_tracking_server_does_not_answer_is_refused_in_one_line(
    store: JobStore, recording: Recording
) -> None:
    destination = Destination(closed_uri())
    with pytest.raises(probe.Unreachable) as refused:
        JobService(store, ALICE).start(request(destination))
    assert "does not answer (connection refused)" in refused.value.refusal()
    assert "nothing was started" in refused.value.refusal()
    assert (destination.asked, store.jobs(), len(recording.asked)) == ([], [], 1)


def test_a_deferred_request_names_its_experiment_offline_when_the_server_does_not_answer(
    store: JobStore, recording: Recording
) -> None:
    destination = Destination(closed_uri())
    with pytest.raises(OfflineOnly):
        JobService(store, ALICE).start(request(destination, tracking="deferred"))
    assert destination.asked == ["unanswered"]
    assert store.jobs() == []


def test_a_checkpoint_place_nobody_can_write_is_refused_before_the_tracking_server_is_asked(
    store: JobStore, recording: Recording, tmp_path: Path
) -> None:
    destination = Destination(closed_uri())  # would refuse too, if it were asked
    locked = tmp_path / "locked"
    locked.write_text("a file, not a folder")
    with pytest.raises(Refused) as refused:
        JobService(store, ALICE).start(request(destination, checkpoint_dir=str(locked)))
    assert refused.value.field == "checkpoint_dir"
    assert (destination.asked, store.jobs()) == ([], [])


def test_a_job_to_resume_that_is_not_the_caller_s_is_refused_before_anything_starts(
    store: JobStore, recording: Recording
) -> None:
    job_id = alices_job(store)
    destination = Destination(closed_uri())
    with pytest.raises(Refused, match=f"cannot resume from job {job_id}") as refused:
        JobService(store, BOB).start(request(destination, resume=job_id))
    assert refused.value.field == "resume"
    assert destination.asked == []
    assert [job.id for job in store.jobs()] == [job_id]
