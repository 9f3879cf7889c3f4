"""The live view's metric feed: each poll answers only the points logged since the last."""

from __future__ import annotations

import math
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric

from jupyter_air.job_dir import AttemptDir
from jupyter_air.tracking import metric_feed as metric_feed_module
from jupyter_air.tracking.journal import Writer, ship
from jupyter_air.tracking.metric_feed import (
    ClientFeed,
    Point,
    SqliteFeed,
    metric_feed,
    sqlite_path,
)
from tests.waits import until


@pytest.fixture
def store(tmp_path: Path) -> tuple[MlflowClient, str, str]:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("feed")
    run = client.create_run(experiment).info.run_id
    return client, uri, run


def log(client: MlflowClient, run: str, key: str, steps: range, t0: int = 1_000) -> None:
    client.log_batch(run, [Metric(key, float(s), t0 + s, s) for s in steps])


def test_each_poll_answers_only_the_new_points(store: tuple[MlflowClient, str, str]) -> None:
    client, uri, run = store
    feed = metric_feed(uri, run)
    assert isinstance(feed, SqliteFeed)
    assert feed.incremental
    assert feed.poll() == []
    log(client, run, "train_loss", range(3))
    first = feed.poll()
    assert [(p.key, p.step, p.value) for p in first] == [("train_loss", s, s) for s in range(3)]
    log(client, run, "train_loss", range(3, 5))
    client.log_metric(run, "system/gpu_0_utilization_percentage", 40.0, step=0)
    assert [(p.key, p.step) for p in feed.poll()] == [
        ("train_loss", 3),
        ("train_loss", 4),
        ("system/gpu_0_utilization_percentage", 0),
    ]
    assert feed.poll() == []
    feed.close()


def test_a_point_logged_late_with_an_older_timestamp_is_still_read(
    store: tuple[MlflowClient, str, str],
) -> None:
    client, uri, run = store
    feed = metric_feed(uri, run)
    log(client, run, "loss", range(10, 12), t0=50_000)
    feed.poll()
    log(client, run, "system/node_1/cpu_utilization_percentage", range(2), t0=1_000)
    assert [p.key for p in feed.poll()] == ["system/node_1/cpu_utilization_percentage"] * 2


def test_other_runs_and_nan_values(store: tuple[MlflowClient, str, str]) -> None:
    client, uri, run = store
    other = client.create_run(client.get_run(run).info.experiment_id).info.run_id
    log(client, other, "loss", range(5))
    client.log_metric(run, "loss", math.nan, step=7)
    [point] = metric_feed(uri, run).poll()
    assert point.step == 7
    assert math.isnan(point.value)


def test_the_query_seeks_the_run_index_from_the_last_row(
    store: tuple[MlflowClient, str, str],
) -> None:
    """What makes the feed incremental: SQLite answers from the run_uuid index, starting
    after the last rowid, rather than scanning the run's history."""
    _, uri, run = store
    feed = SqliteFeed(sqlite_path(uri) or Path(), run)
    plan = str(feed._connect().execute(f"EXPLAIN QUERY PLAN {feed.QUERY}", (run, 0, 1)).fetchall())
    assert "SEARCH metrics USING INDEX index_metrics_run_uuid (run_uuid=? AND rowid>?)" in plan
    assert "TEMP B-TREE" not in plan  # no sort: rows come in rowid order from the index


def test_a_poll_is_bounded_and_the_rest_follows(store: tuple[MlflowClient, str, str]) -> None:
    client, uri, run = store
    feed = SqliteFeed(sqlite_path(uri) or Path(), run, max_rows=4)
    log(client, run, "loss", range(10))
    assert [len(feed.poll()) for _ in range(4)] == [4, 4, 2, 0]


def test_a_poll_waits_out_a_writers_commit_and_gives_up_on_a_lock_held_long(
    store: tuple[MlflowClient, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit beside a poll (a run's tags, a batch of system metrics) delays it by the
    commit's length; a lock held past ``BUSY_WAIT`` leaves the points to the next poll."""
    client, uri, run = store
    log(client, run, "loss", range(3))
    path = sqlite_path(uri)
    assert path is not None
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    feed = metric_feed(uri, run)

    writer.execute("BEGIN EXCLUSIVE")  # a commit in progress: readers are kept out
    threading.Timer(0.05, writer.execute, ["COMMIT"]).start()
    assert [p.step for p in feed.poll()] == [0, 1, 2], "read once the commit ended"

    log(client, run, "loss", range(3, 5))
    monkeypatch.setattr(metric_feed_module, "BUSY_WAIT", 0.05)
    writer.execute("BEGIN EXCLUSIVE")
    assert feed.poll() == []
    writer.execute("COMMIT")
    assert [p.step for p in feed.poll()] == [3, 4], "the next poll has them"
    writer.close()
    feed.close()


def test_the_feed_never_creates_a_store(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    assert metric_feed(f"sqlite:///{missing}", "run").poll() == []
    assert not missing.exists()


def test_other_stores_are_read_through_the_client(
    store: tuple[MlflowClient, str, str],
) -> None:
    client, _, run = store
    feed = ClientFeed(client, run)
    assert not feed.incremental
    log(client, run, "loss", range(2))
    assert [p.step for p in polled(feed)] == [0, 1]
    log(client, run, "loss", range(2, 3))
    assert [p.step for p in polled(feed)] == [2]
    feed.close()


def polled(feed: ClientFeed) -> list[Point]:
    """The points of the reads a poll started (a poll returns the last finished read's)."""
    feed.poll()
    return until(feed.poll, "a read through the client", timeout=30, step=0.01)


def test_a_server_that_never_answers_never_holds_a_poll() -> None:
    asked, answered = threading.Event(), threading.Event()

    class Silent:
        def get_run(self, run_id: str) -> Any:
            asked.set()
            answered.wait(60)  # a tracking server that accepted and never replied
            raise ConnectionError("no answer")

    feed = ClientFeed(Silent(), "run")
    assert feed.poll() == []
    until(asked.is_set, "the feed to ask the server")
    assert [feed.poll(), feed.poll()] == [[], []]  # answered while the read still waits
    assert not answered.is_set()
    answered.set()
    feed.close()


def test_sqlite_paths() -> None:
    assert sqlite_path("sqlite:////tmp/a/mlflow.db") == Path("/tmp/a/mlflow.db")
    assert sqlite_path("sqlite:///relative.db") is None
    assert sqlite_path("http://host:5000") is None


def test_the_journal_gives_rank_zeros_points_first_and_the_store_the_rest(
    store: tuple[MlflowClient, str, str], tmp_path: Path
) -> None:
    client, uri, run = store
    files = AttemptDir(tmp_path / "attempt_1").make()
    writer = Writer(files.metrics_journal)
    feed = metric_feed(uri, run, files.metrics_journal)
    writer.append(run, {"loss": 0.5}, step=0)
    other = client.create_run(client.get_run(run).info.experiment_id).info.run_id
    writer.append(other, {"loss": 9.0}, step=0)  # a session's other cell
    client.log_metric(run, "system/cpu_utilization_percentage", 30.0, step=0)
    assert [(p.key, p.value) for p in feed.poll()] == [
        ("loss", 0.5),
        ("system/cpu_utilization_percentage", 30.0),
    ]
    ship(client, files)  # the journal's points reach the store: read once, not twice
    writer.append(run, {"loss": 0.25}, step=1)
    assert [(p.key, p.step, p.value) for p in feed.poll()] == [("loss", 1, 0.25)]
    assert feed.poll() == []
    feed.close()
