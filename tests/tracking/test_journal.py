"""Rank 0's metrics journal: ``log_metrics`` appends and returns; the journal is shipped
to MLflow in order, in batches, resuming at its mark, none twice."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.job_dir import AttemptDir
from jupyter_air.tracking import journal
from jupyter_air.tracking.journal import Writer


class Recorder:
    """An MLflow client that records its batches, and fails the ``fail_at``-th."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.batches: list[tuple[str, list[tuple[str, float, int]]]] = []
        self.tags: list[tuple[int, str, dict[str, str]]] = []  # (batch, run, tags)
        self.fail_at = fail_at

    def log_batch(self, run_id: str, metrics: list[Any], tags: list[Any]) -> None:
        if self.fail_at is not None and len(self.batches) + 1 == self.fail_at:
            self.fail_at = None
            raise ConnectionError("the tracking server does not answer")
        if tags:
            self.tags.append((len(self.batches), run_id, {t.key: t.value for t in tags}))
        self.batches.append((run_id, [(m.key, m.value, m.step) for m in metrics]))

    def points(self) -> list[tuple[str, str, float, int]]:
        return [(run, *point) for run, batch in self.batches for point in batch]


@pytest.fixture
def files(tmp_path: Path) -> AttemptDir:
    return AttemptDir(tmp_path / "attempt_1").make()


def test_a_call_is_one_private_line_and_a_bad_value_writes_nothing(files: AttemptDir) -> None:
    writer = Writer(files.metrics_journal)
    writer.append("run-a", {"loss": 0.5, "acc": 1}, step=3)
    with pytest.raises(TypeError, match="'lr' is not a number: 'fast'"):
        writer.append("run-a", {"loss": 0.4, "lr": "fast"}, step=4)
    (line,) = files.metrics_journal.read_text().splitlines()
    assert json.loads(line)["m"] == {"loss": 0.5, "acc": 1.0}
    assert json.loads(line)["s"] == 3
    assert stat.S_IMODE(files.metrics_journal.stat().st_mode) == 0o600


def test_a_line_cut_short_is_read_once_it_is_whole(files: AttemptDir) -> None:
    Writer(files.metrics_journal).append("run-a", {"loss": 1.0}, step=0)
    whole = files.metrics_journal.read_bytes()
    with files.metrics_journal.open("ab") as f:
        f.write(b'{"r":"run-a","t":1,"s":1,"m":{"lo')
    lines = journal.read(files.metrics_journal, 0)
    assert [[p.value for p in points] for points, _ in lines] == [[1.0]]
    assert lines[-1][1] == len(whole)
    with files.metrics_journal.open("ab") as f:
        f.write(b'ss":0.5}}\n')
    assert [p.value for p in journal.read(files.metrics_journal, len(whole))[0][0]] == [0.5]


def test_shipping_goes_in_order_by_run_in_batches_and_marks_how_far(
    files: AttemptDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal, "MAX_BATCH", 3)
    writer = Writer(files.metrics_journal)
    for step in range(4):
        writer.append("cell-1", {"loss": 1 / (step + 1), "acc": step / 4}, step)
    writer.append("cell-2", {"loss": 9.0}, 0)
    client = Recorder()
    assert journal.ship(client, files) == 9
    assert [(run, len(batch)) for run, batch in client.batches] == [
        ("cell-1", 3),
        ("cell-1", 3),
        ("cell-1", 2),
        ("cell-2", 1),
    ]
    assert [p for p in client.points() if p[1] == "loss"] == [
        ("cell-1", "loss", 1.0, 0),
        ("cell-1", "loss", 0.5, 1),
        ("cell-1", "loss", 1 / 3, 2),
        ("cell-1", "loss", 0.25, 3),
        ("cell-2", "loss", 9.0, 0),
    ]
    assert journal.waiting(files) == 0
    assert journal.ship(client, files) == 0, "nothing twice"


def test_tags_are_shipped_with_the_points_in_order_and_wait_for_a_deferred_run(
    files: AttemptDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hint tagged while the server is down waits in the journal like a point; tags of
    the attempt's run (not made yet) wait for it."""
    monkeypatch.setattr(journal, "MAX_TAGS", 2)
    writer = Writer(files.metrics_journal)
    writer.append(journal.ATTEMPT_RUN, {"loss": 1.0}, 0)
    journal.append_tags(files, journal.ATTEMPT_RUN, {"air.hint.idle_gpu": "GPU 0 idle"})
    writer.append(journal.ATTEMPT_RUN, {"loss": 0.5}, 1)
    journal.append_tags(files, "cell-2", {"a": "1", "b": "2", "c": "3"})
    client = Recorder()
    with pytest.raises(journal.NoRunYet):
        journal.ship(client, files)
    assert client.batches == []
    assert journal.shipped(files) == 0

    assert journal.ship(client, files, attempt_run="run-a") == 2
    assert client.batches == [
        ("run-a", [("loss", 1.0, 0), ("loss", 0.5, 1)]),
        ("cell-2", []),
        ("cell-2", []),
    ]
    assert client.tags == [
        (0, "run-a", {"air.hint.idle_gpu": "GPU 0 idle"}),
        (1, "cell-2", {"a": "1", "b": "2"}),
        (2, "cell-2", {"c": "3"}),
    ]
    assert journal.waiting(files) == 0
    assert journal.read(files.metrics_journal, 0)[1] == (
        [],
        journal.read_lines(files.metrics_journal, 0)[1].end,
    ), "readers of points see a line of tags as empty"


def test_a_failed_batch_leaves_the_mark_after_the_last_whole_lines_that_landed(
    files: AttemptDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal, "MAX_BATCH", 4)
    writer = Writer(files.metrics_journal)
    for step in range(6):
        writer.append("run-a", {"a": step, "b": step, "c": step}, step)
    client = Recorder(fail_at=2)
    with pytest.raises(ConnectionError):
        journal.ship(client, files)
    # The first batch held lines 0 and part of 1: the mark is after line 0.
    first_line = len(files.metrics_journal.read_bytes().splitlines(keepends=True)[0])
    assert journal.shipped(files) == first_line
    assert journal.waiting(files) > 0
    journal.ship(client, files)
    assert journal.waiting(files) == 0
    steps = [step for _, key, _, step in client.points() if key == "a"]
    assert steps == [0, 1, 1, 2, 3, 4, 5], "only the line cut by the failure is sent again"


def test_points_sent_again_after_a_crash_land_once_in_mlflow(files: AttemptDir) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{files.path.parent}/mlflow.db")
    run_id = client.create_run(client.create_experiment("journal")).info.run_id
    writer = Writer(files.metrics_journal)
    for step in range(5):
        writer.append(run_id, {"loss": 1 / (step + 1)}, step)
    journal.ship(client, files)
    files.metrics_shipped.write_text("0")  # the mark was lost: everything is sent again
    assert journal.ship(client, files) == 5
    history = client.get_metric_history(run_id, "loss")
    assert sorted(m.step for m in history) == [0, 1, 2, 3, 4]


LOG_IN_A_RANK = """
import sys, time
from jupyter_air import log_metrics
start = time.perf_counter()
for step in range(1000):
    log_metrics({"loss": 1.0 / (step + 1)}, step=step)
print(time.perf_counter() - start, "mlflow" in sys.modules)
"""


def test_log_metrics_in_a_job_journals_without_importing_mlflow(files: AttemptDir) -> None:
    env = {
        "RANK": "0",
        "MLFLOW_RUN_ID": "run-a",
        "MLFLOW_TRACKING_URI": "http://127.0.0.1:9",  # nothing listens: nothing is asked
        journal.JOURNAL_ENV: str(files.metrics_journal),
    }
    result = subprocess.run(
        [sys.executable, "-c", LOG_IN_A_RANK],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={"PATH": "/usr/bin:/bin", **env},
    )
    _, imported = result.stdout.split()
    assert imported == "False"
    lines = journal.read(files.metrics_journal, 0)
    assert [points[0].step for points, _ in lines] == list(range(1000))
    assert {points[0].run_id for points, _ in lines} == {"run-a"}
