"""The supervisor's attempts and the one stop rule of every backend (issue 17).

The MLflow side is replaced here by recorders (``Tracking.new_run``, ``hand_over``):
what is specified is which outcome each way of ending gets, and that the job's end is
recorded with its real cause whatever fails.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from jupyter_air.jobs import submit
from jupyter_air.jobs.node import ranks
from jupyter_air.jobs.node.hints import HintRecorder
from jupyter_air.jobs.node.launch import RankSpec
from jupyter_air.jobs.node.outcome import AttemptEnd, Stop, StopRule
from jupyter_air.jobs.node.ranks import LocalRanks
from jupyter_air.jobs.store import JobStore
from jupyter_air.jobs.supervision import supervisor
from jupyter_air.status import Outcome
from jupyter_air.tracking.run_tails import (
    Answer,
    Live,
    MadeRun,
    NewRun,
    NoAnswer,
    RunNotMade,
    Tail,
)
from tests.factories import job_spec
from tests.waits import until

# -- the stop rule -------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def failure(rank: int, at: float) -> AttemptEnd:
    return AttemptEnd(Outcome.FAILED, [], rank, f"rank {rank} exited with code 1", at)


def test_nothing_happening_is_a_success() -> None:
    rule = StopRule()
    rule.begin(timeout=None)
    assert rule.due() is None
    assert rule.end([0, 0]) == AttemptEnd(Outcome.SUCCEEDED, [0, 0])


def test_a_failing_rank_stops_the_others_and_the_earliest_failure_is_the_cause() -> None:
    rule = StopRule()
    rule.begin(timeout=None)
    rule.failed(failure(1, at=100.0))
    assert rule.due() is Stop.FAILURE
    assert not Stop.FAILURE.interrupts, "the others go at once (SIGTERM)"
    rule.failed(failure(0, at=100.4))  # its peer, as the collective broke
    rule.failed(failure(2, at=99.0))  # seen later, failed first (another node's clock)
    end = rule.end([1, 1, 1])
    assert (end.status, end.failed_rank, end.failed_at) == (Outcome.FAILED, 2, 99.0)


def test_a_cancel_interrupts_and_what_fails_while_stopping_is_the_cancel() -> None:
    rule = StopRule()
    rule.cancel()  # before the ranks start, as a signal may come
    rule.begin(timeout=None)
    assert rule.due() is Stop.CANCEL
    assert Stop.CANCEL.interrupts
    assert rule.due() is None, "a stop begins once"
    rule.failed(failure(1, at=5.0))  # KeyboardInterrupt's exit code
    assert rule.end([130, 1]) == AttemptEnd(Outcome.CANCELLED, [130, 1], message="cancelled")


def test_a_timeout_fails_the_attempt_saying_so() -> None:
    clock = Clock()
    rule = StopRule(clock)
    rule.begin(timeout=30)
    clock.now = 30.0
    assert rule.due() is None
    clock.now = 30.5
    assert rule.due() is Stop.TIMEOUT
    assert Stop.TIMEOUT.interrupts
    end = rule.end([-2])
    assert (end.status, end.message) == (Outcome.FAILED, "timed out after 30 s")


def test_an_abort_from_another_node_cancels_this_one_with_its_reason() -> None:
    rule = StopRule()
    rule.begin(timeout=None)
    rule.abort("stopped: rank 3 exited with code 1 on node 1")
    assert rule.due() is Stop.ABORT
    end = rule.end([-15])
    assert (end.status, end.message) == (
        Outcome.CANCELLED,
        "stopped: rank 3 exited with code 1 on node 1",
    )


def test_an_outcome_sent_by_a_node_as_its_value_is_the_enum() -> None:
    end = AttemptEnd(**{"status": "FAILED", "exit_codes": [1], "failed_rank": 0})  # type: ignore[arg-type]
    assert end.status is Outcome.FAILED
    assert end.status == "FAILED"  # what the store and MLflow read


# -- the local ranks under the rule ----------------------------------------------------


def specs(tmp_path: Path, *codes: str) -> list[RankSpec]:
    return [
        RankSpec(rank, [sys.executable, "-c", code], {}, tmp_path / f"rank_{rank}.log")
        for rank, code in enumerate(codes)
    ]


SLEEP = "import time; time.sleep(60)"


def test_local_ranks_a_failing_rank_takes_its_peers_down(tmp_path: Path) -> None:
    end = LocalRanks(specs(tmp_path, SLEEP, "raise SystemExit(3)")).run()
    assert (end.status, end.failed_rank, end.message) == (
        Outcome.FAILED,
        1,
        "rank 1 exited with code 3",
    )
    assert end.exit_codes == [-15, 3]


class SeenLate(subprocess.Popen[bytes]):
    """A process whose exit shows only once its output has ended, and whose first look
    after that still misses it: the race CI hit, where a rank SIGKILLed mid-training was
    recorded as succeeded (its pipes closed, the next look ran an instant before its
    exit status was there, and the one after it ended the watch)."""

    missed = False

    def poll(self) -> int | None:
        assert self.stdout is not None
        assert self.stderr is not None
        if not (self.stdout.closed and self.stderr.closed):
            return None
        if not self.missed:
            self.missed = True
            return None
        return self.wait()


def test_local_ranks_a_rank_dying_between_two_looks_still_fails_the_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ranks.subprocess, "Popen", SeenLate)
    monkeypatch.setattr(ranks, "MEMORY_LOOK", float("inf"))  # no other look takes the miss
    killed = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    end = LocalRanks(specs(tmp_path, killed)).run()
    assert (end.status, end.failed_rank, end.exit_codes) == (Outcome.FAILED, 0, [-9])
    assert end.message is not None
    assert "SIGKILL" in end.message


@pytest.mark.parametrize("inherited", [signal.SIG_DFL, signal.SIG_IGN])
def test_local_ranks_time_out_with_an_interrupt_first(
    tmp_path: Path, inherited: signal.Handlers
) -> None:
    """Whoever started the supervisor: a shell's background job (``nohup ... &``)
    ignores SIGINT, and its children would too (CI saw the rank end by SIGTERM)."""
    before = signal.signal(signal.SIGINT, inherited)
    try:
        end = LocalRanks(specs(tmp_path, SLEEP)).run(timeout=0.5)
    finally:
        signal.signal(signal.SIGINT, before)
    assert (end.status, end.message) == (Outcome.FAILED, "timed out after 0.5 s")
    assert end.exit_codes == [-2], "SIGINT ended it (a KeyboardInterrupt), before any SIGTERM"


# -- the supervisor: its guard, and the kernel dying -------------------------------------


@pytest.fixture
def followed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """What the supervisor asks the tail process to follow while ranks run, and takes
    back (no tail process in these tests): ("follow", Live), ("unfollow", the job's
    status then)."""
    said: list[tuple[str, Any]] = []

    def unfollow(home: Path, job_id: str, attempt: int) -> None:
        said.append(("unfollow", JobStore(home).get(job_id).status))

    monkeypatch.setattr(supervisor, "follow", lambda home, live: said.append(("follow", live)))
    monkeypatch.setattr(supervisor, "unfollow", unfollow)
    monkeypatch.setattr(supervisor, "ensure_running", lambda home: None)
    return said


@pytest.fixture
def tails(monkeypatch: pytest.MonkeyPatch, followed: list[tuple[str, Any]]) -> list[Tail]:
    """The runs' tails the supervisor hands over (no MLflow in these tests)."""
    handed: list[Tail] = []

    def hand_over(home: Path, tail: Tail) -> Answer:
        handed.append(tail)
        return Answer()

    monkeypatch.setattr(supervisor, "hand_over", hand_over)
    return handed


def job(store: JobStore, code: str, **fields: Any) -> str:
    workload = job_spec(
        kind="command",
        command=[sys.executable, "-c", code],
        tracking_uri="sqlite:////nonexistent/mlflow.db",
        experiment_id="1",
        first_run_id="run-1",
        **fields,
    )
    return store.create(workload).id


FAIL_FIRST = "import os; raise SystemExit(1 if os.environ['AIR_ATTEMPT'] == '1' else 0)"


def test_a_retry_runs_under_its_own_run_and_each_tail_is_handed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tails: list[Tail]
) -> None:
    store = JobStore(tmp_path)
    job_id = job(store, FAIL_FIRST, max_retries=1)
    monkeypatch.setattr(supervisor.Tracking, "new_run", lambda self, j, n, tags: f"run-{n}")
    assert supervisor.Supervisor(store, job_id, None).run() == 0
    assert [(a.attempt, a.status, a.run_id) for a in store.attempts(job_id)] == [
        (1, "FAILED", "run-1"),
        (2, "SUCCEEDED", "run-2"),
    ]
    assert [(t.run_id, t.status, t.sample) for t in tails] == [
        ("run-1", "FAILED", True),
        ("run-2", "SUCCEEDED", True),
    ]
    assert store.get(job_id).status == "SUCCEEDED"


@pytest.mark.parametrize(
    "error",
    [RuntimeError("the tracking server answered 503"), sqlite3.OperationalError("disk I/O error")],
)
def test_an_error_while_a_retrys_run_is_made_is_the_jobs_recorded_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tails: list[Tail], error: Exception
) -> None:
    """It used to kill the supervisor: the job then read "supervisor ended without
    recording the end"."""
    store = JobStore(tmp_path)
    job_id = job(store, FAIL_FIRST, max_retries=2)

    def new_run(self: Any, job_id: str, attempt: int, tags: dict[str, str]) -> str:
        raise error

    monkeypatch.setattr(supervisor.Tracking, "new_run", new_run)
    assert supervisor.Supervisor(store, job_id, None).run() == 1
    ended = store.get(job_id)
    assert ended.status == "FAILED"
    assert ended.message == f"the supervisor failed: {error!r}"
    assert [(a.attempt, a.status) for a in store.attempts(job_id)] == [(1, "FAILED")]
    assert [t.run_id for t in tails] == ["run-1"], "the first run still ended"


def test_an_error_once_an_attempt_is_recorded_ends_that_attempt_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tails: list[Tail]
) -> None:
    store = JobStore(tmp_path)
    job_id = job(store, "pass")

    def broken(*args: Any, **kwargs: Any) -> None:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(HintRecorder, "__init__", broken)
    assert supervisor.Supervisor(store, job_id, None).run() == 1
    [attempt] = store.attempts(job_id)
    assert attempt.status == "FAILED"
    assert attempt.message == store.get(job_id).message
    assert "database is locked" in (attempt.message or "")


def test_a_kernel_that_died_cancels_its_job(tmp_path: Path, tails: list[Tail]) -> None:
    store = JobStore(tmp_path)
    job_id = job(store, SLEEP)
    kernel = subprocess.Popen([sys.executable, "-c", "pass"])
    kernel.wait()
    assert supervisor.Supervisor(store, job_id, kernel.pid).run() == 1
    ended = store.get(job_id)
    assert (ended.status, ended.message) == ("CANCELLED", "cancelled")
    assert [t.status for t in tails] == ["CANCELLED"]


# -- who makes a job's runs: the tail process, or the supervisor when it cannot ----------


def named_only(store: JobStore, tmp_path: Path) -> str:
    """A job as ``air run`` submits it: an experiment named, no run made yet."""
    workload = job_spec(
        kind="command",
        command=[
            sys.executable,
            "-c",
            "import os, time; print(os.environ['MLFLOW_RUN_ID']); time.sleep(1)",
        ],
        tracking_uri=f"sqlite:///{tmp_path}/mlflow.db",
        experiment_name="named only",
        tags={"air.command": "python -c ..."},
    )
    return store.create(workload).id


def supervisor_of_named_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_run: Callable[[Path, NewRun], MadeRun]
) -> tuple[JobStore, supervisor.Supervisor]:
    """That job's supervisor, whose tail process answers with ``make_run``; it samples
    the system every 0.2 s, so its job outlasts several samples."""
    monkeypatch.setattr(supervisor, "make_run", make_run)
    monkeypatch.setattr(supervisor, "METRICS_INTERVAL", 0.2)
    store = JobStore(tmp_path)
    return store, supervisor.Supervisor(store, named_only(store, tmp_path), None)


def test_the_tail_process_makes_the_run_and_mlflow_is_not_loaded_here(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tails: list[Tail],
    followed: list[tuple[str, Any]],
) -> None:
    asked: list[NewRun] = []

    def make_run(home: Path, request: NewRun) -> MadeRun:
        asked.append(request)
        return MadeRun("run-from-tails", "7")

    store, sup = supervisor_of_named_only(tmp_path, monkeypatch, make_run)
    job_id = sup.job.id
    assert sup.run() == 0
    [request] = asked
    assert (request.experiment_id, request.experiment_name) == (None, "named only")
    assert (request.tags["air.job_id"], request.tags["air.attempt"]) == (job_id, "1")
    assert request.tags["air.command"] == "python -c ..."
    assert [a.run_id for a in store.attempts(job_id)] == ["run-from-tails"]
    assert store.get(job_id).experiment_id == "7", "recorded for the job's links"
    assert sup._tracking._loaded is None, "the supervisor never loaded MLflow"
    (_, live), taken_back = followed
    assert (live.run_id, live.pid) == ("run-from-tails", os.getpid()), "shipped by the tails"
    assert taken_back == ("unfollow", "RUNNING"), "taken back before the job's end is told"
    log = store.attempt_dir(job_id, 1) / "logs" / "node_0" / "rank_0.log"
    assert "run-from-tails" in log.read_text(), "the ranks were given that run"


@pytest.mark.heavy
def test_without_an_answer_from_the_tail_process_the_supervisor_makes_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tails: list[Tail]
) -> None:
    from mlflow import MlflowClient

    def no_answer(home: Path, request: NewRun) -> MadeRun:
        raise NoAnswer("no answer from the tail process")

    store, sup = supervisor_of_named_only(tmp_path, monkeypatch, no_answer)
    job_id = sup.job.id
    assert sup.run() == 0
    [attempt] = store.attempts(job_id)
    assert attempt.run_id is not None
    run = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").get_run(attempt.run_id)
    experiment_id = store.get(job_id).experiment_id
    assert run.info.experiment_id == experiment_id is not None
    assert run.data.tags["air.job_id"] == job_id
    assert [t.run_id for t in tails] == [attempt.run_id]


def test_mlflow_refusing_the_run_in_the_tail_process_is_the_jobs_recorded_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tails: list[Tail]
) -> None:
    def refused(home: Path, request: NewRun) -> MadeRun:
        raise RunNotMade("MlflowException('experiment 7 is deleted')")

    store, sup = supervisor_of_named_only(tmp_path, monkeypatch, refused)
    assert sup.run() == 1
    ended = store.get(sup.job.id)
    assert ended.status == "FAILED"
    assert "experiment 7 is deleted" in (ended.message or "")
    assert store.attempts(sup.job.id) == [], "no rank started without its run"


def test_a_finished_supervisor_is_reaped_by_the_process_that_started_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel or the scheduler submits many jobs and lives on: none of their ended
    supervisors may stay a zombie until its next spawn."""
    real_popen = subprocess.Popen
    started: list[int] = []

    def supervisor_that_ends_at_once(argv: list[str], **kwargs: Any) -> Any:
        process = real_popen([sys.executable, "-c", "pass"], **kwargs)
        started.append(process.pid)
        return process

    monkeypatch.setattr(subprocess, "Popen", supervisor_that_ends_at_once)
    submit.start_job(JobStore(tmp_path), job_spec("command", command=["true"]), None)
    monkeypatch.undo()
    [pid] = started
    until(  # a zombie exists until its parent reaps it
        lambda: not psutil.pid_exists(pid), f"the ended supervisor {pid} reaped", 30, step=0.05
    )


def test_an_attempt_no_longer_followed_starts_no_tail_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, followed: list[tuple[str, Any]]
) -> None:
    """The supervisor starts the tail process again if it died while the ranks run, and
    only then: once the attempt is taken back, or was never written, it stops asking."""
    started: list[Path] = []
    monkeypatch.setattr(supervisor, "ensure_running", started.append)
    monkeypatch.setattr(supervisor, "SHIP_INTERVAL", 0.01)
    live = Live("j", 1, "r", "sqlite:///x.db", str(tmp_path), os.getpid(), time.time())
    before = set(threading.enumerate())
    supervisor.Followed(tmp_path, live)  # ``follow`` wrote nothing: not followed
    (keeper,) = [t for t in threading.enumerate() if t not in before]
    until(lambda: not keeper.is_alive(), "the keeper left", 30)
    assert started == []
    assert followed == [("follow", live)]
