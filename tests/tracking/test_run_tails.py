"""The runs' tail process: one per user, private, gone once idle (docs/security.md)."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.job_dir import AttemptDir
from jupyter_air.logs.capture import RankLog
from jupyter_air.paths import private_dir, write_private
from jupyter_air.tracking import backlog, run_tails, targets
from jupyter_air.tracking.backlog import Part
from jupyter_air.tracking.journal import Writer
from jupyter_air.tracking.run_tails import (
    Answer,
    MadeRun,
    NewRun,
    NoAnswer,
    RunNotMade,
    Tail,
    TailProcess,
)
from tests.notify_servers import free_port
from tests.waits import until

NOBODY = 65534


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


@pytest.mark.heavy
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


@pytest.mark.heavy
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


def serve_once(home: Path) -> None:
    """What the process does with the requests it finds (without starting one)."""
    process = TailProcess(home)
    for request in process._pending():
        process._take(request)
    process._tails.shutdown(wait=True)


def test_requests_are_private_and_answered_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only this user can ask (the spool is 0700, each request and answer 0600): nobody
    else can make the process end or tag someone's runs, nor read what it answers."""
    done: list[str] = []
    seen_modes: list[int] = []
    real_answer = TailProcess._answer

    def finish(self: TailProcess, tail: Tail) -> Answer:
        seen_modes.append(mode(self.spool / f"{tail.name}.taken"))
        done.append(tail.name)
        return Answer(logs_error="no artifact store" if tail.attempt == 2 else None)

    def answer(self: TailProcess, taken: Path, body: dict[str, object]) -> None:
        real_answer(self, taken, body)
        seen_modes.append(mode(taken.with_suffix(".done")))

    monkeypatch.setattr(TailProcess, "finish", finish)
    monkeypatch.setattr(TailProcess, "_answer", answer)
    monkeypatch.setattr(run_tails, "ensure_running", serve_once)
    answers = [
        run_tails.hand_over(tmp_path, Tail("j", n, f"r{n}", "SUCCEEDED", "u", "d", False))
        for n in (1, 2)
    ]
    assert done == ["tail-j-1", "tail-j-2"]
    assert answers == [Answer(), Answer(logs_error="no artifact store")]
    assert mode(tmp_path / "tails") == 0o700
    assert seen_modes == [0o600] * 4
    assert list((tmp_path / "tails").glob("tail-j-*")) == [], "requests and answers are removed"


def new_run(uri: str, attempt: int = 1, experiment_id: str | None = None) -> NewRun:
    return NewRun(
        "j", attempt, uri, experiment_id, "named only", None, {"air.job_id": "j"}, "sweep", None
    )


@pytest.mark.heavy
def test_a_new_run_is_made_with_its_experiment_and_tags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow import MlflowClient

    monkeypatch.setattr(run_tails, "ensure_running", serve_once)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    first = run_tails.make_run(tmp_path, new_run(uri))
    retry = run_tails.make_run(tmp_path, new_run(uri, 2, first.experiment_id))
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("named only")
    assert experiment is not None
    assert first.experiment_id == retry.experiment_id == experiment.experiment_id
    run = client.get_run(first.run_id)
    assert (run.info.status, run.info.run_name) == ("RUNNING", "sweep")
    assert run.data.tags["air.job_id"] == "j"
    assert "air logs j" in run.data.tags["mlflow.note.content"], "its page links to the logs"
    assert retry.run_id != first.run_id
    assert list((tmp_path / "tails").glob("run-*")) == []


@pytest.mark.heavy
def test_mlflow_refusing_the_run_is_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_tails, "ensure_running", serve_once)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with pytest.raises(RunNotMade, match="999"):
        run_tails.make_run(tmp_path, new_run(uri, experiment_id="999"))


def test_nobody_taking_a_run_request_withdraws_it_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor then makes the run itself: the request must not be made later."""
    monkeypatch.setattr(run_tails, "ensure_running", lambda home: None)
    with pytest.raises(NoAnswer):
        run_tails.make_run(tmp_path, new_run("sqlite:///x.db"), take_timeout=0.2)
    assert list((tmp_path / "tails").iterdir()) == []


def test_a_tail_nobody_answers_is_kept_for_the_next_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No process could start, or it died, or it refused what it could not read (an
    earlier version): the run's end and logs are not lost with the supervisor."""
    monkeypatch.setattr(run_tails, "ensure_running", lambda home: None)
    attempt = AttemptDir(tmp_path / "jobs" / "j" / "attempt_1").make()
    tail = Tail("j", 1, "r", "FAILED", "u", str(attempt.path), sample=True)
    answer = run_tails.hand_over(tmp_path, tail, timeout=0.2)
    assert answer.left() == {Part.END, Part.LOGS}
    assert run_tails.pending(tmp_path / "tails") == [dataclasses.replace(tail, sample=False)]


def test_a_process_that_died_with_the_request_taken_is_no_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def take_and_die(home: Path) -> None:
        for request in (home / "tails").glob("*.json"):
            request.rename(request.with_suffix(".taken"))

    monkeypatch.setattr(run_tails, "ensure_running", take_and_die)
    with pytest.raises(NoAnswer):
        run_tails.make_run(tmp_path, new_run("sqlite:///x.db"))


def test_a_new_run_is_not_kept_waiting_by_a_tail_under_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large log being attached must not delay the next job's ranks."""
    attaching, release = threading.Event(), threading.Event()

    def finish(self: TailProcess, tail: Tail) -> Answer:
        attaching.set()
        release.wait(30)
        return Answer()

    monkeypatch.setattr(TailProcess, "finish", finish)
    monkeypatch.setattr(
        TailProcess, "make", lambda self, request: {"run_id": "r", "experiment_id": "1"}
    )
    monkeypatch.setattr(run_tails, "ensure_running", lambda home: None)
    monkeypatch.setattr(run_tails, "IDLE_EXIT", 0.2)
    spool = private_dir(tmp_path / "tails")
    fd = os.open(spool / run_tails.LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    serving = threading.Thread(target=TailProcess(tmp_path).serve, args=(fd,))
    serving.start()
    tail = Tail("a", 1, "r0", "SUCCEEDED", "u", "d", False)
    handed: list[Answer] = []
    handing = threading.Thread(target=lambda: handed.append(run_tails.hand_over(tmp_path, tail)))
    handing.start()
    try:
        assert attaching.wait(10)
        assert run_tails.make_run(tmp_path, new_run("u"), take_timeout=10) == MadeRun("r", "1")
        assert not handed, "made while the tail was still under way"
    finally:
        release.set()
        handing.join(10)
        serving.join(10)
        os.close(fd)
    assert handed == [Answer()]
    assert not serving.is_alive()


def test_a_request_the_user_did_not_write_is_refused_unanswered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[NewRun] = []

    def make(self: TailProcess, request: NewRun) -> dict[str, str]:
        made.append(request)
        return {}

    monkeypatch.setattr(TailProcess, "make", make)
    spool = private_dir(tmp_path / "tails")
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(asdict(new_run("u"))))
    (spool / "run-j-1.json").symlink_to(elsewhere)
    loose = spool / "run-j-2.json"
    loose.write_text(json.dumps(asdict(new_run("u", 2))))
    loose.chmod(0o666)
    if os.geteuid() == 0:
        foreign = spool / "run-j-3.json"
        foreign.write_text(json.dumps(asdict(new_run("u", 3))))
        os.chown(foreign, NOBODY, NOBODY)
    serve_once(tmp_path)
    assert made == []
    assert list(spool.iterdir()) == [], "refused, and nothing answered"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_another_user_can_neither_ask_nor_read_an_answer() -> None:
    home = Path(tempfile.mkdtemp())
    try:
        home.chmod(0o755)  # the store's own folder readable: only the spool's mode stops them
        spool = private_dir(home / "tails")
        write_private(spool / "run-j-1.done", json.dumps({"run_id": "secret"}))
        attack = f"""
import os, sys
assert "tails" in os.listdir({str(home)!r}), "the store can be seen"
for attempt in (
    lambda: open({str(spool / "run-x-1.json")!r}, "w"),
    lambda: open({str(spool / "run-j-1.done")!r}).read(),
    lambda: os.listdir({str(spool)!r}),
):
    try:
        attempt()
    except PermissionError:
        continue
    sys.exit("allowed")
"""
        result = subprocess.run(
            ["/usr/bin/python3", "-c", attack], user=NOBODY, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        assert sorted(p.name for p in spool.iterdir()) == ["run-j-1.done"]
    finally:
        shutil.rmtree(home)


def serves_and_leaves(home: Path) -> bool:
    """Whether a process serving ``home``'s spool (holding its lock, as ``main`` does)
    left within 10 s, letting the lock go for the next one."""
    spool = private_dir(home / "tails")
    fd = os.open(spool / run_tails.LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        serving = threading.Thread(target=TailProcess(home).serve, args=(fd,))
        serving.start()
        serving.join(10)
        if serving.is_alive():
            return False
        other = os.open(spool / run_tails.LOCK, os.O_RDWR)
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if still held
        finally:
            os.close(other)
    finally:
        os.close(fd)
    return True


def test_the_process_leaves_once_idle_and_at_once_without_its_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_tails, "IDLE_EXIT", 0.2)
    assert serves_and_leaves(tmp_path), "it stayed although nothing came"
    monkeypatch.setattr(run_tails, "IDLE_EXIT", 3600.0)
    gone = tmp_path / "gone"
    (gone / "tails").mkdir(parents=True)
    serving = threading.Thread(target=TailProcess(gone).serve, args=(-1,))
    serving.start()
    shutil.rmtree(gone / "tails")  # the store was removed (a test's, a user's cleanup)
    serving.join(10)
    assert not serving.is_alive()


@pytest.mark.parametrize("kind", ["run", "tail"])
def test_a_request_of_a_newer_version_is_given_back_and_the_process_leaves_for_it(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an upgrade, the process still running the old code must not drop, nor half
    do, a request with fields it does not know: it puts the request back, does the
    others, and exits; the newer sender (which looks every second) starts a process of
    its own version."""
    monkeypatch.setattr(TailProcess, "finish", lambda self, tail: Answer())
    spool = private_dir(tmp_path / "tails")
    mine = spool / "tail-k-1.json"
    write_private(mine, json.dumps(asdict(Tail("k", 1, "r", "SUCCEEDED", "u", "d", False))))
    if kind == "run":
        body: dict[str, Any] = {**asdict(new_run("u")), "quota": 3}
    else:
        body = asdict(Tail("j", 1, "", "SUCCEEDED", "u", "d", False))
        body["new_run"] = {**asdict(new_run("u")), "quota": 3}
    request = spool / f"{kind}-j-1.json"
    write_private(request, json.dumps(body))
    assert serves_and_leaves(tmp_path), "it stayed, holding the lock the newer one needs"
    assert request.read_text() == json.dumps(body), "the request is back, untouched"
    assert json.loads((spool / "tail-k-1.done").read_text())["end_error"] is None
    assert sorted(p.name for p in spool.iterdir()) == sorted(
        [run_tails.LOCK, run_tails.WAKE, request.name, "tail-k-1.done"]
    )


def test_a_request_leaves_out_what_it_does_not_use_so_an_earlier_version_reads_it(
    tmp_path: Path,
) -> None:
    spool = private_dir(tmp_path / "tails")
    plain = Tail("j", 1, "r", "SUCCEEDED", "u", str(tmp_path), False)
    run_tails.keep(spool, plain)
    body = json.loads((run_tails.pending_dir(spool) / "tail-j-1.json").read_text())
    assert set(body) == {
        "job_id", "attempt", "run_id", "status", "tracking_uri", "attempt_dir", "sample"
    }  # fmt: skip
    assert Tail(**body) == plain


def test_grants_changed_after_the_attempt_are_the_ones_its_late_run_gets(
    tmp_path: Path,
) -> None:
    spool = private_dir(tmp_path / "tails")
    recipe = asdict(dataclasses.replace(new_run("u"), grants=(("bob", "CAN_VIEW", False),)))
    waiting = Tail("j", 1, "", "SUCCEEDED", "u", str(tmp_path), False, new_run=recipe)
    other = Tail("k", 1, "", "SUCCEEDED", "u", str(tmp_path), False, new_run=recipe)
    for tail in (waiting, other):
        run_tails.keep(spool, tail)
    run_tails.regrant(spool, "j", (("carol", "CAN_MANAGE", False),))  # bob revoked
    kept = {t.job_id: t for t in run_tails.pending(spool)}
    assert kept["j"].new_run is not None
    assert kept["j"].new_run["grants"] == [["carol", "CAN_MANAGE", False]]
    assert kept["k"].new_run is not None
    assert kept["k"].new_run["grants"] == [["bob", "CAN_VIEW", False]], "another job's: as kept"
    assert dataclasses.replace(kept["k"], new_run=None) == dataclasses.replace(other, new_run=None)


def test_only_one_process_serves_a_store(tmp_path: Path) -> None:
    spool = tmp_path / "tails"
    spool.mkdir(mode=0o700)
    fd = os.open(spool / run_tails.LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert run_tails.main([str(tmp_path)]) == 0  # returns at once: one serves already
    finally:
        os.close(fd)


@pytest.mark.heavy
def test_a_process_started_for_a_submission_opens_its_store_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ahead of the run the job's ranks will wait for (a new store is migrated then)."""
    monkeypatch.setattr(run_tails, "IDLE_EXIT", 0.1)
    private_dir(tmp_path / "tails")
    assert run_tails.main([str(tmp_path), f"sqlite:///{tmp_path}/mlflow.db"]) == 0
    assert (tmp_path / "mlflow.db").stat().st_size > 0


@pytest.mark.heavy
def test_what_the_server_did_not_take_is_kept_and_lands_once_it_answers(
    tmp_path: Path, mlflow_run: tuple[str, str]
) -> None:
    from mlflow import MlflowClient

    uri, run_id = mlflow_run
    attempt = attempt_with_a_log(tmp_path)
    writer = Writer(attempt.metrics_journal)
    writer.append(run_id, {"loss": 0.5}, 0)
    writer.close()
    tail = Tail("j", 1, run_id, "SUCCEEDED", uri, str(attempt.path), sample=False)

    def down(_: str) -> Any:
        raise ConnectionError("Failed to establish a new connection: Connection refused")

    spool = private_dir(tmp_path / "tails")
    answer = run_tails.finish(down, tail)
    run_tails.keep_pending(spool, tail, answer)
    assert answer.left() == {Part.METRICS, Part.END, Part.LOGS}
    [kept] = run_tails.pending(spool)
    assert kept == dataclasses.replace(tail, parts=("end", "logs", "metrics"))
    waiting = backlog.read(attempt)
    assert waiting is not None
    assert waiting.line("j").endswith(
        "(connection refused); 1 point, the run's end and its logs waiting"
    )

    process = TailProcess(tmp_path)  # the server answers again
    assert process.retry_pending()
    process._tails.shutdown(wait=True)
    assert run_tails.pending(spool) == []
    assert backlog.read(attempt) is None
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.metrics == {"loss": 0.5}
    assert [a.path for a in client.list_artifacts(run_id, "logs/node_0")] == [
        "logs/node_0/rank_0.log"
    ]


@pytest.mark.heavy
def test_a_refusal_for_good_is_kept_for_air_sync_not_retried_and_a_removed_job_is_let_go(
    tmp_path: Path, mlflow_run: tuple[str, str]
) -> None:
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST

    uri, run_id = mlflow_run
    attempt = attempt_with_a_log(tmp_path)
    tail = Tail("j", 1, run_id, "SUCCEEDED", uri, str(attempt.path), sample=False)

    def deleted(_: str) -> Any:
        raise MlflowException("Run not found", error_code=RESOURCE_DOES_NOT_EXIST)

    spool = private_dir(tmp_path / "tails")
    run_tails.keep_pending(spool, tail, run_tails.finish(deleted, tail))
    assert backlog.refused_for_good(attempt)
    assert not TailProcess(tmp_path).retry_pending(), "nothing due: only air sync retries"
    assert len(run_tails.pending(spool)) == 1, "kept, never dropped"

    shutil.rmtree(attempt.path)
    assert run_tails.pending(spool) == []
    assert not list((spool / "pending").iterdir())


def test_a_server_down_for_long_is_said_once_not_at_each_try(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tail process logs to a file while it retries a server down for days: one line
    when tails start waiting and one when they land, none per try or per HTTP retry."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")  # one retry, no back-off
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    connections = logging.getLogger("urllib3.connectionpool")
    monkeypatch.setattr(connections, "level", connections.level)  # restored afterwards
    targets.quiet_retries()  # as the process's main does
    caplog.set_level(logging.DEBUG)
    attempt = attempt_with_a_log(tmp_path)
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    tail = Tail("j", 1, "0" * 32, "SUCCEEDED", down, str(attempt.path), sample=False)
    spool = private_dir(tmp_path / "tails")
    run_tails.keep(spool, tail)
    process = TailProcess(tmp_path)

    for _ in range(3):
        assert process.retry_pending()
        until(lambda: not process._busy(), "the try to end", timeout=60)
    assert len(run_tails.pending(spool)) == 1, "still kept"
    (spool / "pending" / f"{tail.name}.json").unlink()  # as once it landed
    assert not process.retry_pending()
    process._tails.shutdown(wait=True)

    said = [(r.name, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    assert said == [
        (
            "jupyter_air.run_tails",
            "1 tail(s) kept pending: tried again every 20 s at most till taken",
        ),
        ("jupyter_air.run_tails", "every tail kept pending has landed"),
    ]


def serving(home: Path) -> tuple[threading.Thread, int]:
    """A process serving ``home``'s spool in a thread, holding its lock as ``main`` does."""
    spool = private_dir(home / "tails")
    fd = os.open(spool / run_tails.LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    thread = threading.Thread(target=TailProcess(home).serve, args=(fd,))
    thread.start()
    return thread, fd


@pytest.mark.heavy
def test_a_live_attempt_is_shipped_and_kept_running_until_its_supervisor_takes_it_back(
    tmp_path: Path, mlflow_run: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No supervisor imports MLflow: while an attempt's ranks run, the tail process ships
    its journal and puts its run back to running when a rank's ``with mlflow.start_run``
    ended it; once taken back (the ranks ended, before anyone is told), neither."""
    from mlflow import MlflowClient

    uri, run_id = mlflow_run
    client = MlflowClient(uri)
    for name, value in {"SHIP_INTERVAL": 0.1, "REOPEN_INTERVAL": 0.1, "IDLE_EXIT": 0.5}.items():
        monkeypatch.setattr(run_tails, name, value)
    monkeypatch.setattr(run_tails, "ensure_running", lambda home: None)
    attempt = AttemptDir(tmp_path / "jobs" / "j" / "attempt_1").make()
    journal = Writer(attempt.metrics_journal)
    journal.append(run_id, {"loss": 1.0}, 0)
    client.set_terminated(run_id, "FINISHED")  # a rank's ``with mlflow.start_run(...)``
    live = run_tails.Live("j", 1, run_id, uri, str(attempt.path), os.getpid(), time.time())
    run_tails.follow(tmp_path, live)
    assert mode(run_tails.live_dir(tmp_path / "tails") / "j-1.json") == 0o600
    thread, fd = serving(tmp_path)
    try:
        until(lambda: client.get_metric_history(run_id, "loss"), "the point shipped", 60)
        until(lambda: client.get_run(run_id).info.status == "RUNNING", "the run re-opened", 60)
        run_tails.unfollow(tmp_path, "j", 1)
        client.set_terminated(run_id, "FINISHED")  # as the kernel ends it, told of the end
        journal.append(run_id, {"loss": 0.5}, 1)
        thread.join(30)
        assert not thread.is_alive(), "it left once nothing was live nor asked"
    finally:
        journal.close()
        os.close(fd)
    assert client.get_run(run_id).info.status == "FINISHED", "never re-opened after its end"
    assert [m.step for m in client.get_metric_history(run_id, "loss")] == [0], "left to its tail"


def test_an_idle_process_sleeps_until_a_live_attempt_wakes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It stays minutes after a job (the next finds MLflow loaded) without looking four
    times a second; the next job's attempt is followed at once all the same."""
    for name, value in {"TICK": 0.05, "IDLE_TICK": 3600.0, "IDLE_EXIT": 7200.0}.items():
        monkeypatch.setattr(run_tails, name, value)
    monkeypatch.setattr(run_tails, "ensure_running", lambda home: None)
    shipped: list[str] = []
    monkeypatch.setattr(
        TailProcess, "_ship_live", lambda self, path, live: shipped.append(live.name)
    )
    naps: list[float] = []
    sleep = TailProcess._sleep
    monkeypatch.setattr(
        TailProcess, "_sleep", lambda self, seconds: (naps.append(seconds), sleep(self, seconds))
    )
    thread, fd = serving(tmp_path)
    try:
        until(lambda: 3600.0 in naps, "a long sleep once idle", 30)
        live = run_tails.Live("j", 1, "r", "u", str(tmp_path), os.getpid(), time.time())
        run_tails.follow(tmp_path, live)
        until(lambda: shipped, "the live attempt shipped", 30)
    finally:
        (tmp_path / "tails").rename(tmp_path / "gone")
        run_tails.wake(tmp_path / "gone")
        thread.join(30)
        os.close(fd)
    assert not thread.is_alive()
    assert shipped[0] == "j-1"


def test_an_attempt_whose_supervisor_died_or_that_is_not_the_users_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A supervisor killed with its attempt live would keep the process forever; a file
    someone else put there is nobody's attempt to ship (its run, its journal)."""
    shipped: list[str] = []
    monkeypatch.setattr(
        TailProcess, "_ship_live", lambda self, path, live: shipped.append(live.name)
    )
    monkeypatch.setattr(run_tails, "ensure_running", lambda home: None)
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()
    died = run_tails.Live("dead", 1, "r", "u", str(tmp_path), gone.pid, time.time())
    run_tails.follow(tmp_path, died)
    alive = run_tails.Live("alive", 1, "r", "u", str(tmp_path), os.getpid(), time.time())
    run_tails.follow(tmp_path, alive)
    where = run_tails.live_dir(tmp_path / "tails")
    foreign = where / "foreign-1.json"
    foreign.write_text(json.dumps(asdict(dataclasses.replace(alive, job_id="foreign"))))
    foreign.chmod(0o666)
    process = TailProcess(tmp_path)
    assert process._follow_live(), "one attempt is live"
    process._tails.shutdown(wait=True)
    assert shipped == ["alive-1"]
    assert not (where / "dead-1.json").exists(), "let go"
    assert foreign.exists(), "left alone, unread"


def test_a_request_wakes_the_process_at_once_which_otherwise_sleeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No wakeups while it waits (it may follow a job for hours), no wait for a request:
    a byte in a named pipe only this user can open."""
    monkeypatch.setattr(run_tails, "TICK", 3600.0)
    monkeypatch.setattr(
        TailProcess, "make", lambda self, request: {"run_id": "r", "experiment_id": "1"}
    )
    monkeypatch.setattr(run_tails, "ensure_running", lambda home: None)
    pipe = tmp_path / "tails" / run_tails.WAKE
    thread, fd = serving(tmp_path)
    try:
        until(pipe.exists, "the wake pipe made", 30)
        assert stat.S_ISFIFO(pipe.stat().st_mode)
        assert mode(pipe) == 0o600
        assert run_tails.make_run(tmp_path, new_run("u"), take_timeout=30) == MadeRun("r", "1")
    finally:
        (tmp_path / "tails").rename(tmp_path / "gone")  # the store removed, then woken
        run_tails.wake(tmp_path / "gone")
        thread.join(30)
        os.close(fd)
    assert not thread.is_alive()
