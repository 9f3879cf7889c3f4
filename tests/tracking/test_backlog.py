"""What of an attempt's run waits for its tracking server, and the one line that says so
(issue 23)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST, TEMPORARILY_UNAVAILABLE

from jupyter_air.job_dir import AttemptDir
from jupyter_air.tracking import backlog
from jupyter_air.tracking.backlog import Part
from jupyter_air.tracking.journal import Writer
from tests.waits import until

URI = "http://alice:s3cret@mlflow.team:5000"
#: MLflow's own words for a server that is down, after its retries.
REFUSED = (
    "API request to http://mlflow.team:5000/api/2.0/mlflow/runs/log-batch failed with "
    "exception HTTPConnectionPool(host='mlflow.team', port=5000): Max retries exceeded with "
    "url: /api/2.0/mlflow/runs/log-batch (Caused by NewConnectionError('<urllib3.connection."
    "HTTPConnection object at 0x7f>: Failed to establish a new connection: [Errno 111] "
    "Connection refused'))"
)


@pytest.fixture
def files(tmp_path: Path) -> AttemptDir:
    return AttemptDir(tmp_path / "attempt_1").make()


def points(files: AttemptDir, n: int) -> None:
    writer = Writer(files.metrics_journal)
    for step in range(n):
        writer.append("run", {"loss": 1.0, "acc": 0.5}, step)
    writer.close()


def test_nothing_waits_until_a_server_refused_something(files: AttemptDir) -> None:
    points(files, 3)  # not shipped yet, but nothing failed: no line
    assert backlog.read(files) is None


def test_the_line_names_the_server_without_credentials_since_when_why_and_what_waits(
    files: AttemptDir,
) -> None:
    points(files, 206)
    backlog.failing(files, URI, ConnectionError(REFUSED), {Part.METRICS})
    waiting = backlog.read(files)
    assert waiting is not None
    line = waiting.line("J")
    assert re.fullmatch(
        r"tracking: http://\*\*\*@mlflow\.team:5000 unreachable since \d\d:\d\d:\d\d "
        r"\(connection refused\); 412 points waiting",
        line,
    ), line
    assert "s3cret" not in files.tracking_backlog.read_text()

    backlog.failing(files, URI, TimeoutError("Read timed out"), {Part.END, Part.LOGS})
    again = backlog.read(files)
    assert again is not None
    assert again.since == waiting.since, "since the first failure"
    assert again.line("J").endswith(
        "(no answer in time); 412 points, the run's end and its logs waiting"
    )


def test_what_landed_leaves_the_line_and_the_last_of_it_the_record(files: AttemptDir) -> None:
    points(files, 1)
    backlog.failing(files, URI, ConnectionError(REFUSED), {Part.METRICS, Part.END})
    backlog.landed(files, {Part.END})
    waiting = backlog.read(files)
    assert waiting is not None
    assert waiting.parts == {Part.METRICS}
    backlog.landed(files, {Part.METRICS})
    assert not files.tracking_backlog.exists()
    assert backlog.read(files) is None


def test_a_refusal_no_wait_changes_is_kept_and_named_with_the_command_that_retries(
    files: AttemptDir,
) -> None:
    points(files, 2)
    gone = MlflowException("Run 'abc' not found", error_code=RESOURCE_DOES_NOT_EXIST)
    backlog.failing(files, URI, gone, {Part.METRICS})
    assert backlog.refused_for_good(files)
    waiting = backlog.read(files)
    assert waiting is not None
    assert waiting.line("J") == (
        "tracking: http://***@mlflow.team:5000 refused the run's data (Run 'abc' not found); "
        "4 points kept: air sync J"
    )
    busy = MlflowException("busy", error_code=TEMPORARILY_UNAVAILABLE)
    backlog.failing(files, URI, busy, set())
    assert not backlog.refused_for_good(files), "the last answer decides"


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (REFUSED, "connection refused"),
        (
            "HTTPConnectionPool(host='x', port=1): Read timed out. (read timeout=20)",
            "no answer in time",
        ),
        ("API request to ... failed with exception ... too many 503 error responses", "HTTP 503"),
        ("first line\nsecond", "first line"),
        ("bad token for https://bob:hunter2@mlflow.team", "bad token for https://***@mlflow.team"),
    ],
)
def test_errors_are_said_in_a_few_words_without_credentials(error: str, said: str) -> None:
    assert backlog.describe(RuntimeError(error)) == said


def test_a_request_that_goes_unanswered_is_said_before_mlflow_gives_it_up(
    files: AttemptDir,
) -> None:
    points(files, 1)
    with backlog.watched(files, URI, {Part.METRICS}, after=0.1):
        waiting = until(lambda: backlog.read(files), "the stall said", timeout=30, step=0.02)
    assert waiting.error == "no answer in 0.1 s"
    assert waiting.parts == {Part.METRICS}


def test_a_request_unanswered_after_the_servers_answer_leaves_that_answer_said(
    files: AttemptDir,
) -> None:
    """The next try waits out MLflow's back-off: its stall says no more than the 503."""
    points(files, 1)
    backlog.failing(files, URI, RuntimeError("too many 503 error responses"), {Part.METRICS})
    backlog.failing(files, URI, backlog.NoAnswerYet("no answer in 5 s"), {Part.END})
    waiting = backlog.read(files)
    assert waiting is not None
    assert (waiting.error, waiting.parts) == ("HTTP 503", {Part.METRICS, Part.END})
    gone = MlflowException("Run 'abc' not found", error_code=RESOURCE_DOES_NOT_EXIST)
    backlog.failing(files, URI, gone, set())
    backlog.failing(files, URI, backlog.NoAnswerYet("no answer in 5 s"), set())
    assert backlog.refused_for_good(files), "a stall is no answer: the refusal stands"


#: What MLflow says when the connection breaks in the middle of the server's answer.
DROPPED_MID_ANSWER = (
    "API request to http://127.0.0.1:45885/api/2.0/mlflow/runs/get failed with exception "
    "('Connection broken: IncompleteRead(0 bytes read, 1074 more expected)', "
    "IncompleteRead(0 bytes read, 1074 more expected))"
)


@pytest.mark.parametrize(
    ("error", "passing"),
    [
        (ConnectionError(REFUSED), True),
        (MlflowException(REFUSED), True),  # MLflow's own wrapping of a refused connection
        (MlflowException("API request to x failed: too many 503 error responses"), True),
        (backlog.NoAnswerYet("no answer in 5 s"), True),
        # a server (or its proxy) that dropped the connection in the middle of its answer
        (MlflowException(DROPPED_MID_ANSWER), True),
        (MlflowException("Run not found", error_code=RESOURCE_DOES_NOT_EXIST), False),
        (MlflowException("API request to x failed with error code 403 != 200"), False),
        (NotADirectoryError("[Errno 20] Not a directory: '/art/logs'"), False),
    ],
)
def test_only_a_server_that_does_not_answer_or_fails_is_retried_by_itself(
    error: BaseException, passing: bool
) -> None:
    """Anything else would keep the user's tail process retrying forever: it waits for
    ``air sync``."""
    assert backlog.is_permanent(error) is not passing
