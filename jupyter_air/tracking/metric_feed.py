"""The new points of one MLflow run's metrics, read incrementally for the cell's live view.

MLflow's ``get_metric_history`` answers a metric's whole history at every call, and
the page tokens of its stores are offsets MLflow documents as unstable. The default
store of a job is a local SQLite file, so the feed reads its ``metrics`` rows after the
last row it saw, by rowid: SQLite answers ``run_uuid = ? AND rowid > ?`` from MLflow's
``index_metrics_run_uuid`` index, so a poll costs the new rows only, however long the
history, and a row logged late with an older timestamp (a node's batch of system
metrics) is still read. The file is opened read-only, so the feed never writes to or
migrates a store. Any other store (an MLflow server, a database server) is read
through ``MlflowClient``, whole histories, and the feed says so (``incremental``).

Rank 0's ``log_metrics`` points are read from the attempt's journal (``journal``), where
they are the moment they are logged, whatever MLflow does; the store gives the rest
(system metrics, what the code logged through MLflow itself).
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

#: Rows read at most per poll, so catching up with a long run costs bounded memory.
MAX_ROWS = 50_000
#: Seconds a poll waits at most for a writer's commit, and between two tries. SQLite's
#: own busy wait sleeps 1, 2, 5, 10, 15 ms... between tries: a reader that met a commit
#: of a few milliseconds (a run's tag, a batch of system metrics) lost 10 to 20 ms of the
#: cell's end there.
BUSY_WAIT = 0.5
BUSY_RETRY = 0.0005
#: SQLITE_BUSY and SQLITE_LOCKED (``sqlite3`` names them from Python 3.11).
BUSY_CODES = (5, 6)


@dataclass(frozen=True)
class Point:
    key: str
    step: int
    value: float
    timestamp: int  # milliseconds, as MLflow stores it


class MetricFeed(Protocol):
    #: Whether each poll reads only the rows logged since the last one.
    incremental: bool

    def poll(self) -> list[Point]: ...

    def close(self) -> None: ...


class SqliteFeed:
    """A run's metric rows after the last one read, from an SQLite tracking store."""

    incremental = True
    QUERY = (
        "SELECT rowid, key, value, step, timestamp, is_nan FROM metrics "
        "WHERE run_uuid = ? AND rowid > ? ORDER BY rowid LIMIT ?"
    )

    def __init__(self, path: Path, run_id: str, max_rows: int = MAX_ROWS) -> None:
        self._path = path
        self._run_id = run_id
        self._max_rows = max_rows
        self._last_rowid = 0
        self._db: sqlite3.Connection | None = None

    def poll(self) -> list[Point]:
        """The rows logged since the last poll (none while a writer holds the file for
        more than ``BUSY_WAIT`` seconds)."""
        deadline = time.monotonic() + BUSY_WAIT
        while True:
            try:
                rows = (
                    self._connect()
                    .execute(self.QUERY, (self._run_id, self._last_rowid, self._max_rows))
                    .fetchall()
                )
                break
            except sqlite3.OperationalError as err:  # locked, or not created yet
                code = getattr(err, "sqlite_errorcode", None)  # Python 3.11 and later
                busy = code in BUSY_CODES if code is not None else "locked" in str(err)
                if not busy or time.monotonic() > deadline:
                    return []  # next time
                time.sleep(BUSY_RETRY)
        if rows:
            self._last_rowid = rows[-1][0]
        return [
            Point(key, int(step), math.nan if is_nan else float(value), int(timestamp))
            for _, key, value, step, timestamp, is_nan in rows
        ]

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            uri = f"file:{quote(str(self._path))}?mode=ro"
            self._db = sqlite3.connect(uri, uri=True, timeout=0, check_same_thread=False)
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class ClientFeed:
    """Any other store, through ``MlflowClient``: whole histories, new points kept. A
    tracking server may be slow or down: each read runs on a thread of its own, and a
    poll returns what the last finished read found, so the cell never waits for one."""

    incremental = False

    def __init__(self, client: Any, run_id: str) -> None:
        self._client = client
        self._run_id = run_id
        self._seen: dict[str, int] = {}
        self._reading: Future[list[Point]] | None = None
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="air-metric-feed")

    def poll(self) -> list[Point]:
        points: list[Point] = []
        if self._reading is not None:
            if not self._reading.done():
                return points
            with contextlib.suppress(Exception):  # the server did not answer: next time
                points = self._reading.result()
        self._reading = self._reader.submit(self._read)
        return points

    def _read(self) -> list[Point]:
        points: list[Point] = []
        for key in sorted(self._client.get_run(self._run_id).data.metrics):
            history = self._client.get_metric_history(self._run_id, key)
            seen = self._seen.get(key, 0)
            points += [Point(key, m.step, m.value, m.timestamp) for m in history[seen:]]
            self._seen[key] = len(history)
        return points

    def close(self) -> None:
        """A read under way is left to end on its own."""
        self._reader.shutdown(wait=False, cancel_futures=True)


def sqlite_path(tracking_uri: str) -> Path | None:
    """The file of an ``sqlite:///`` store given by an absolute path, else None."""
    parts = urlsplit(tracking_uri)
    if parts.scheme != "sqlite" or not tracking_uri.startswith("sqlite:///"):
        return None
    path = Path(tracking_uri[len("sqlite:///") :].split("?", 1)[0])
    return path if path.is_absolute() else None


class JournalFeed:
    """One run's points in an attempt's metrics journal, after the last line read; the
    store's points of keys the journal has are its own, shipped: left out."""

    def __init__(self, path: Path, run_id: str, store: MetricFeed) -> None:
        self._path = path
        self._run_id = run_id
        self._offset = 0
        self._store = store
        self._keys: set[str] = set()
        self.incremental = store.incremental

    def poll(self) -> list[Point]:
        from .journal import read

        points: list[Point] = []
        for line, end in read(self._path, self._offset):
            points += [
                Point(p.key, p.step, p.value, p.timestamp) for p in line if p.run_id == self._run_id
            ]
            self._offset = end
        self._keys.update(p.key for p in points)
        points += [p for p in self._store.poll() if p.key not in self._keys]
        return points

    def close(self) -> None:
        self._store.close()


def metric_feed(tracking_uri: str, run_id: str, journal: Path | None = None) -> MetricFeed:
    """The cheapest feed that can read this store (and the attempt's ``journal``)."""
    path = sqlite_path(tracking_uri)
    store: MetricFeed
    if path is not None:
        store = SqliteFeed(path, run_id)
    else:
        from mlflow import MlflowClient

        store = ClientFeed(MlflowClient(tracking_uri), run_id)
    return store if journal is None else JournalFeed(journal, run_id, store)
