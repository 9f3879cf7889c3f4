"""An SQLite database of AIR_HOME, opened as every store of ours opens it.

SQLite is on every machine and lets many readers (the server, the CLI, several
kernels, the scheduler) work beside one writer at a time; each write is one short
transaction. On a local disk the database is in WAL mode, where readers never wait for
the writer. WAL needs memory shared by every process using the file, which a network
file system does not give: there the database keeps SQLite's rollback journal.

In WAL mode commits use ``synchronous=NORMAL``: no fsync per commit (only at a
checkpoint). SQLite documents it as consistent in WAL mode and durable across any
application crash; only a power loss or OS crash may roll back the last transactions,
which also ends every job they described. A full fsync per commit cost a trivial job
about 0.17 s on a loaded disk. The rollback journal keeps the default ``FULL``, which
SQLite needs there to be safe from corruption on power loss.

The file and the journals SQLite puts beside it are the user's alone (0600), whatever
the umask: they hold what every job ran and who may see it.
"""

from __future__ import annotations

import logging
import sqlite3
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .paths import make_private, on_network_filesystem, tighten

log = logging.getLogger(__name__)

#: The files SQLite keeps beside a database (it gives them the database's mode).
SIDECARS = ("-wal", "-shm", "-journal")


class StoreError(RuntimeError):
    """The database cannot be used safely where it is."""


class Database:
    """One SQLite file: private, its journal chosen for its disk, a connection per call.

    ``busy_timeout`` is how long a call waits for another process's write lock:
    writers (supervisors) wait long rather than fail; a server answering requests
    gives up sooner (``sqlite3.OperationalError``, "database is locked").
    """

    def __init__(self, path: Path, busy_timeout: float = 30.0) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.wal = False  # known after the journal mode is settled below
        new = not path.exists() or path.stat().st_size == 0
        make_private(path)  # never opens an existing file: see ``make_private``
        for sidecar in SIDECARS:
            tighten(path.with_name(path.name + sidecar))
        with self.connect() as db:
            self.wal = self._journal_mode(db, new) == "wal"
        # Held open, unused, for the database's life in WAL mode. When the last connection
        # to a WAL database closes, SQLite checkpoints (syncing, even with NORMAL) and
        # deletes the WAL, and the next open re-creates it: with a connection per call and
        # no other open, every call paid that (about 5 ms on a quiet disk, against 0.1 ms).
        # With this one open, no call's close is the last; the WAL is checkpointed as it
        # fills.
        self._keeper: weakref.finalize[[], Database] | None = None
        if self.wal:
            keeper = sqlite3.connect(path, check_same_thread=False)
            keeper.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the file
            self._keeper = weakref.finalize(self, keeper.close)

    def close(self) -> None:
        """Let go of the idle connection now rather than when the database is dropped;
        calls still work (each with a connection of its own, which may then be the last)."""
        if self._keeper is not None:
            self._keeper()

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        """A connection of its own, in autocommit (a write that needs several statements
        says so: ``immediate``), its rows read by column name."""
        db = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        try:
            db.row_factory = sqlite3.Row
            if self.wal:
                db.execute("PRAGMA synchronous=NORMAL")  # per connection; see the docstring
            yield db
        finally:
            db.close()

    def _journal_mode(self, db: sqlite3.Connection, new: bool) -> str:
        """WAL for a new database on a local disk; the rollback journal on a network file
        system, where a WAL database (made by an earlier version) is switched. A
        database in rollback mode stays so: another machine may reach it over the network.
        The mode the database is in, after this."""
        network = on_network_filesystem(self.path.parent)
        mode = str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        if network is None:
            return self._switch_to_wal(db) if new else mode
        if mode != "wal":
            return mode
        try:
            mode = db.execute("PRAGMA journal_mode=DELETE").fetchone()[0].lower()
        except sqlite3.OperationalError as err:
            mode = str(err)
        if mode != "delete":
            raise StoreError(
                f"{self.path} is on a network file system ({network}) in WAL mode, which "
                f"corrupts it there, and could not be switched to a rollback journal "
                f"({mode}): stop every process using it (Jupyter servers, kernels, air "
                f"commands, on every machine) and try again"
            )
        log.warning("%s is on %s: switched from WAL to a rollback journal", self.path, network)
        return mode

    def _switch_to_wal(self, db: sqlite3.Connection) -> str:
        """``PRAGMA journal_mode=WAL``, asked again until the busy timeout. Processes that
        open a new database at once (two kernels' first cells and ``air run``) all
        switch it, and SQLite answers a switch that meets another "database is locked"
        at once, without waiting: the loser waits here instead."""
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                return str(db.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
            except sqlite3.OperationalError as err:
                busy = err.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY  # or an extended code
                if not busy or time.monotonic() > deadline:
                    raise
            time.sleep(0.01)


@contextmanager
def immediate(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction on ``db``: committed when the block ends, rolled back if it
    raises; inside a transaction already open, a part of that one.

    It takes the write lock at once (``BEGIN IMMEDIATE``), waiting up to the busy
    timeout for it: a transaction that read first and then wrote would fail at once
    ("database is locked") had another process written in between."""
    if db.in_transaction:
        yield db
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
