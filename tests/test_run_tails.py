"""The runs' tail process: one per user, private, gone once idle (docs/security.md)."""

from __future__ import annotations

import fcntl
import os
import stat
import threading
from pathlib import Path

import pytest

from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs import run_tails
from jupyter_air.jobs.run_tails import Answer, Tail, TailProcess
from jupyter_air.logs.capture import RankLog


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def mlflow_run(tmp_path: Path) -> tuple[str, str]:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("tails", artifact_location=str(tmp_path / "art"))
    return uri, client.create_run(experiment).info.run_id


def attempt_with_a_log(tmp_path: Path) -> AttemptDir:
    attempt = AttemptDir(tmp_path / "jobs" / "j" / "attempt_1")
    log = RankLog(attempt.rank_log(0, 0))
    log.write("OI", "hello from rank 0")
    log.close()
    return attempt


def test_a_tail_ends_the_run_samples_it_and_attaches_its_logs(
    tmp_path: Path, mlflow_run: tuple[str, str]
) -> None:
    from mlflow import MlflowClient

    uri, run_id = mlflow_run
    attempt = attempt_with_a_log(tmp_path)
    tail = Tail("j", 1, run_id, "FAILED", uri, str(attempt.path), sample=True)
    assert TailProcess(tmp_path).finish(tail) == Answer()
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.info.status == "FAILED"
    assert any(key.startswith("system/") for key in run.data.metrics)
    [artifact] = client.list_artifacts(run_id, "logs/node_0")
    assert artifact.path == "logs/node_0/rank_0.log"


def test_an_artifact_store_that_fails_is_said_on_the_run_and_the_run_still_ends(
    tmp_path: Path, mlflow_run: tuple[str, str]
) -> None:
    from mlflow import MlflowClient

    uri, run_id = mlflow_run
    (tmp_path / "art").write_text("not a directory")
    tail = Tail("j", 1, run_id, "SUCCEEDED", uri, str(attempt_with_a_log(tmp_path).path), False)
    answer = TailProcess(tmp_path).finish(tail)
    assert answer.end_error is None
    assert answer.logs_error is not None
    run = MlflowClient(uri).get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["air.logs"].startswith("not attached: ")


def test_requests_are_private_and_answered_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only this user can ask (the spool is 0700, each request 0600): nobody else can
    make the process end or tag someone's runs."""
    done: list[str] = []
    seen_modes: list[int] = []

    def finish(self: TailProcess, tail: Tail) -> Answer:
        request = self.spool / f"{tail.name}.json"
        seen_modes.append(mode(request))
        done.append(tail.name)
        return Answer(logs_error="no artifact store" if tail.attempt == 2 else None)

    monkeypatch.setattr(TailProcess, "finish", finish)
    monkeypatch.setattr(run_tails, "ensure_running", lambda home: serve_once(home))

    def serve_once(home: Path) -> None:
        """What the process does with the requests it finds (without starting one)."""
        process = TailProcess(home)
        for request in process._pending():
            process._do(request)

    answers = [
        run_tails.hand_over(tmp_path, Tail("j", n, f"r{n}", "SUCCEEDED", "u", "d", False))
        for n in (1, 2)
    ]
    assert done == ["j-1", "j-2"]
    assert answers == [Answer(), Answer(logs_error="no artifact store")]
    assert mode(tmp_path / "tails") == 0o700
    assert seen_modes == [0o600, 0o600]
    assert list((tmp_path / "tails").glob("j-*")) == [], "requests and answers are removed"


def test_the_process_leaves_once_idle_and_at_once_without_its_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_tails, "IDLE_EXIT", 0.2)
    spool = tmp_path / "tails"
    spool.mkdir(mode=0o700)
    fd = os.open(spool / run_tails.LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        serving = threading.Thread(target=TailProcess(tmp_path).serve, args=(fd,))
        serving.start()
        serving.join(10)
        assert not serving.is_alive(), "it stayed although nothing came"
        other = os.open(spool / run_tails.LOCK, os.O_RDWR)
        try:  # it let the lock go: the next request starts a new one
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)
    finally:
        os.close(fd)
    monkeypatch.setattr(run_tails, "IDLE_EXIT", 3600.0)
    gone = tmp_path / "gone"
    (gone / "tails").mkdir(parents=True)
    serving = threading.Thread(target=TailProcess(gone).serve, args=(-1,))
    serving.start()
    (gone / "tails").rmdir()  # the store was removed (a test's, a user's cleanup)
    serving.join(10)
    assert not serving.is_alive()


def test_only_one_process_serves_a_store(tmp_path: Path) -> None:
    spool = tmp_path / "tails"
    spool.mkdir(mode=0o700)
    fd = os.open(spool / run_tails.LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert run_tails.main([str(tmp_path)]) == 0  # returns at once: one serves already
    finally:
        os.close(fd)
