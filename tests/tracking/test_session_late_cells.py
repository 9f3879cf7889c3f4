"""A session cell that ran before its run could be made (``--tracking deferred``, the
server down): what the tail process does with it once the server answers. Its run is
made under the session's, named and tagged as the cell's, filled from the cell's own
journal only, given its source and its end, and made once however often it is tried;
the cells file then names that run."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient

from jupyter_air.job_dir import AttemptDir, JobDir
from jupyter_air.jobs.sessions import cells as session_cells
from jupyter_air.jobs.sessions.cells import CellRecord, SessionRun
from jupyter_air.tracking import backlog, run_tails
from jupyter_air.tracking.journal import ATTEMPT_RUN, Writer
from jupyter_air.tracking.run_tails import Answer, TailProcess

#: Each test drives a kernel, a session or a job with its supervisor and ranks.
pytestmark = pytest.mark.heavy


@pytest.fixture
def session(tmp_path: Path) -> SessionRun:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("sessions", artifact_location=str(tmp_path / "art"))
    parent = client.create_run(experiment, tags={"air.job_id": "s1"}).info.run_id
    return SessionRun("s1", uri, experiment, parent)


def journal(path: Path, run_id: str, losses: list[float]) -> None:
    writer = Writer(path)
    for step, loss in enumerate(losses):
        writer.append(run_id, {"loss": loss}, step)
    writer.close()


def test_a_late_cell_gets_its_run_under_the_session_with_its_own_points_once(
    tmp_path: Path, session: SessionRun
) -> None:
    job = JobDir(tmp_path / "jobs" / "s1")
    attempt = job.attempt(1).make()
    client = MlflowClient(session.tracking_uri)
    cell_1 = client.create_run(session.experiment_id).info.run_id
    journal(attempt.metrics_journal, cell_1, [9.0])  # another cell's, in the session's journal
    late = attempt.late_cell(2).make()
    journal(late.metrics_journal, ATTEMPT_RUN, [1.0, 0.5, 0.25])  # as rank 0 wrote them
    record = CellRecord(2, "", "nb-cell", 10.0, 12.0, "SUCCEEDED")
    session_cells.record(job, record)
    tags = {"air.session_cell": "2", "mlflow.runName": "cell 2", "air.cell_id": "nb-cell"}
    tail = session_cells.late_tail(session, record, late, "x = 1\n", tags)

    assert TailProcess(tmp_path).finish(tail) == Answer()
    assert TailProcess(tmp_path).finish(tail) == Answer()  # a second try makes no second run

    (run,) = client.search_runs(
        [session.experiment_id], "tags.`air.session_cell` = '2'"
    )  # one, once
    run_id = run.info.run_id
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "cell 2"
    assert run.data.tags["mlflow.parentRunId"] == session.run_id
    assert run.data.tags["air.job_id"] == "s1"
    assert run.data.tags["air.cell_id"] == "nb-cell"
    history = client.get_metric_history(run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(0, 1.0), (1, 0.5), (2, 0.25)]
    assert client.get_metric_history(cell_1, "loss") == []  # left to the session's shipper
    code = client.download_artifacts(run_id, "code/cell.py", str(tmp_path))
    assert Path(code).read_text() == "x = 1\n"
    assert late.read_late_run() == (run_id, session.experiment_id)
    assert attempt.read_late_run() is None  # the session's own run is not this one
    assert [c.run_id for c in session_cells.cells(job)] == [run_id]


def test_a_late_cell_whose_server_does_not_answer_keeps_all_of_it_for_the_next_try(
    tmp_path: Path, session: SessionRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    job = JobDir(tmp_path / "jobs" / "s1")
    late = AttemptDir(job.attempt(1).make().path).late_cell(3).make()
    journal(late.metrics_journal, ATTEMPT_RUN, [1.0])
    record = CellRecord(3, "", None, 10.0, 12.0, "FAILED")
    tags = {"air.session_cell": "3", "mlflow.runName": "cell 3"}
    down = SessionRun(session.job_id, "http://127.0.0.1:9", session.experiment_id, session.run_id)
    tail = session_cells.late_tail(down, record, late, "", tags)
    answer = TailProcess(tmp_path).finish(tail)
    assert answer.error() is not None
    assert late.read_late_run() is None
    (kept,) = run_tails.pending(tmp_path / "tails")  # tried again until the server answers
    assert kept.name == tail.name == "tail-s1-1-cell-3"
    assert kept.run_id == ""
    assert kept.new_run is not None
    assert tail.new_run is not None
    assert run_tails.NewRun(**kept.new_run) == run_tails.NewRun(**tail.new_run)
    assert {"metrics", "end"} <= set(kept.parts)
    assert not backlog.refused_for_good(late.for_cell(3))  # a passing failure: tried again
    session_cells.record(job, record)
    assert [c.run_id for c in session_cells.cells(job)] == [""]  # no run yet, said as none
