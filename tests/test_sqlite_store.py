"""The SQLite plumbing every store of ours shares: a write is all or nothing, and a
write waits for another process's lock as long as the store says, then says why."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_air.sqlite_store import Database, immediate


@pytest.fixture
def database(tmp_path: Path) -> Database:
    database = Database(tmp_path / "t.db", busy_timeout=0.5)
    with database.connect() as db:
        db.execute("CREATE TABLE t (n INTEGER PRIMARY KEY)")
    return database


def insert(db: sqlite3.Connection, *ns: int) -> None:
    """One write of these numbers."""
    with immediate(db):
        db.executemany("INSERT INTO t VALUES (?)", [(n,) for n in ns])


def numbers(database: Database) -> list[int]:
    with database.connect() as db:
        return [row["n"] for row in db.execute("SELECT n FROM t ORDER BY n")]


def test_a_write_that_raises_leaves_nothing_and_one_inside_another_is_part_of_it(
    database: Database,
) -> None:
    with database.connect() as db:
        with pytest.raises(sqlite3.IntegrityError):
            insert(db, 1, 1)
        assert not db.in_transaction
        with immediate(db):
            insert(db, 2)  # a part of the outer write: no commit of its own
            insert(db, 3)
            assert numbers(database) == [], "nothing is seen before the outer write ends"
    assert numbers(database) == [2, 3]


LOCKER = (
    "import sqlite3, sys, time\n"
    "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "db.execute('BEGIN IMMEDIATE')\n"
    "print('locked', flush=True)\n"
    "time.sleep(float(sys.argv[2]))\n"
    "db.execute('COMMIT')\n"
)


def hold_lock(path: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process holding the write lock of ``path`` for ``seconds``, from now."""
    locker = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(path), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert locker.stdout is not None
    assert locker.stdout.readline() == "locked\n"  # or "" had it failed
    return locker


def test_a_write_waits_for_another_process_s_lock_up_to_the_busy_timeout(
    database: Database,
) -> None:
    locker = hold_lock(database.path, 30)
    try:
        started = time.monotonic()
        with database.connect() as db, pytest.raises(sqlite3.OperationalError, match="locked"):
            insert(db, 1)
        assert time.monotonic() - started >= 0.4
    finally:
        locker.kill()
        locker.wait()
    assert numbers(database) == []

    database.busy_timeout = 60
    locker = hold_lock(database.path, 0.5)
    with database.connect() as db:
        insert(db, 1)
    assert locker.wait(timeout=60) == 0
    assert numbers(database) == [1]


def test_a_new_database_another_process_is_writing_to_opens_once_that_write_ends(
    tmp_path: Path,
) -> None:
    """Two kernels' first cells and ``air run`` open a new home's store at once. SQLite
    refuses a switch to WAL that meets another's lock at once, without its busy
    timeout: the opener waits for the lock like any write."""
    path = tmp_path / "new.db"
    locker = hold_lock(path, 0.5)  # the file exists, empty, another process writing
    database = Database(path, busy_timeout=60)
    assert locker.wait(timeout=60) == 0
    assert database.wal
    with database.connect() as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
