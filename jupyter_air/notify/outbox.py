"""The sent-once record of notifications: a table of the job store's database.

Whoever knows of an event (a job's supervisor, the scheduler) ``post``s one row per
target under a key naming the event (``job:ID:end``, ``schedule-run:12:end``), so a
restarted process that posts it again adds nothing. A row is claimed for one try at a
time under a lease (``SENDING``), then recorded ``SENT``, or back to ``PENDING`` with
its next try after a backoff, or ``FAILED`` when the receiver refused it or the tries
ran out; its error and tries are what ``air get`` shows. A process that died holding a
lease loses it when the lease ends, and the row is tried again: a crash between a send
and its record can send it twice, never lose it (receivers can drop the copy by its
Message-ID or ``Idempotency-Key``). JupyterLab's rows are ``SENT`` at once: the
Jupyter server reads them for its owner's open tabs.
"""

from __future__ import annotations

import enum
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .message import Message
from .targets import Channel, Target, from_json

SCHEMA = """
CREATE TABLE IF NOT EXISTS notifications (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL,
    job_id TEXT,
    schedule_id TEXT,
    channel TEXT NOT NULL,
    target TEXT NOT NULL,
    message TEXT NOT NULL,
    state TEXT NOT NULL,
    tries INTEGER NOT NULL DEFAULT 0,
    next_try REAL NOT NULL,
    lease_until REAL,
    error TEXT,
    created REAL NOT NULL,
    done REAL
);
CREATE INDEX IF NOT EXISTS notifications_due ON notifications (state, next_try);
CREATE INDEX IF NOT EXISTS notifications_by_job ON notifications (job_id);
CREATE INDEX IF NOT EXISTS notifications_by_schedule ON notifications (schedule_id);
CREATE INDEX IF NOT EXISTS notifications_for_lab ON notifications (owner, channel, id);
"""

#: Seconds a try may hold its row: more than a delivery's timeout, with room.
LEASE = 120.0
#: Seconds before the second try; each later one waits 3 times longer, up to ``MAX_WAIT``.
FIRST_WAIT = float(os.environ.get("AIR_NOTIFY_RETRY", "5"))
MAX_WAIT = 600.0


class State(enum.StrEnum):
    PENDING = "pending"
    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"


@dataclass(frozen=True)
class Notice:
    """One message for one target, before it is posted."""

    key: str
    owner: str
    target: Target
    message: Message
    job_id: str | None = None
    schedule_id: str | None = None


@dataclass(frozen=True)
class Record:
    id: int
    key: str
    owner: str
    job_id: str | None
    schedule_id: str | None
    target: Target
    message: Message
    state: State
    tries: int
    next_try: float
    error: str | None
    created: float
    done: float | None

    def line(self) -> str:
        """Where it went and how, in one line: "email to me@example.com (failure): sent
        18:03:04"; "webhook https://hooks.example.com/… (failure): failed: connection
        refused, 3 tries"."""
        head = f"{self.target.shown()} ({self.message.event.value})"
        tries = f"{self.tries} tr{'y' if self.tries == 1 else 'ies'}"
        if self.state is State.SENT:
            return f"{head}: sent {_clock(self.done or self.created)}"
        if self.state is State.FAILED:
            return f"{head}: failed: {self.error}, {tries}"
        if self.state is State.SENDING:
            return f"{head}: sending"
        if self.error:
            return f"{head}: not sent yet: {self.error}, {tries}; next try {_clock(self.next_try)}"
        return f"{head}: queued"


def backoff(tries: int) -> float:
    """Seconds before the next try, after ``tries`` failed ones."""
    return float(min(MAX_WAIT, FIRST_WAIT * 3 ** max(0, tries - 1)))


class Outbox:
    """The ``notifications`` table of ``path`` (the job store's database, which makes the
    table: ``jobs.store.SCHEMA``)."""

    def __init__(self, path: Path, busy_timeout: float = 30.0) -> None:
        self.path = path
        self.busy_timeout = busy_timeout

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        try:
            db.row_factory = sqlite3.Row
            yield db
        finally:
            db.close()

    def post(self, notices: Sequence[Notice], now: float | None = None) -> list[int]:
        """Record each notice not recorded yet (by its key); the ids of those new."""
        now = time.time() if now is None else now
        new = []
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            for n in notices:
                lab = n.target.channel is Channel.JUPYTERLAB
                cursor = db.execute(
                    "INSERT OR IGNORE INTO notifications (key, owner, job_id, schedule_id,"
                    " channel, target, message, state, next_try, created, done)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        n.key,
                        n.owner,
                        n.job_id,
                        n.schedule_id,
                        n.target.channel.value,
                        json.dumps(n.target.to_json()),
                        json.dumps(n.message.to_json()),
                        State.SENT if lab else State.PENDING,
                        now,
                        now,
                        now if lab else None,
                    ),
                )
                if cursor.rowcount and cursor.lastrowid is not None:
                    new.append(cursor.lastrowid)
            db.execute("COMMIT")
        return new

    def claim(self, now: float | None = None, ids: Sequence[int] | None = None) -> Record | None:
        """One due row (of ``ids`` only, when given), leased to the caller for a try."""
        now = time.time() if now is None else now
        where = (
            "((state = 'pending' AND next_try <= :now)"
            " OR (state = 'sending' AND lease_until < :now))"
        )
        params: dict[str, object] = {"now": now, "until": now + LEASE}
        if ids is not None:
            if not ids:
                return None
            where += f" AND id IN ({', '.join(str(int(i)) for i in ids)})"
        with self._connect() as db:
            row = db.execute(
                "UPDATE notifications SET state = 'sending', lease_until = :until,"
                " tries = tries + 1 WHERE id = (SELECT id FROM notifications"
                f" WHERE {where} ORDER BY next_try, id LIMIT 1) RETURNING *",
                params,
            ).fetchone()
        return None if row is None else _record(row)

    def sent(self, record: Record, now: float | None = None) -> None:
        now = time.time() if now is None else now
        with self._connect() as db:
            db.execute(
                "UPDATE notifications SET state = 'sent', done = ?, error = NULL,"
                " lease_until = NULL WHERE id = ?",
                (now, record.id),
            )

    def failed(
        self,
        record: Record,
        error: str,
        *,
        permanent: bool,
        max_tries: int,
        now: float | None = None,
    ) -> State:
        """Record a failed try: given up (``FAILED``) or waiting for the next one."""
        now = time.time() if now is None else now
        final = permanent or record.tries >= max_tries
        state = State.FAILED if final else State.PENDING
        with self._connect() as db:
            db.execute(
                "UPDATE notifications SET state = ?, error = ?, lease_until = NULL,"
                " next_try = ?, done = ? WHERE id = ?",
                (state, error, now + backoff(record.tries), now if final else None, record.id),
            )
        return state

    def next_due(self) -> float | None:
        """When the next try is due (a lease's end, for a row some process holds)."""
        with self._connect() as db:
            row = db.execute(
                "SELECT min(CASE state WHEN 'pending' THEN next_try ELSE lease_until END)"
                " FROM notifications WHERE state IN ('pending', 'sending')"
            ).fetchone()
        return None if row[0] is None else float(row[0])

    def records(
        self, *, job_ids: Sequence[str] = (), schedule_id: str | None = None
    ) -> list[Record]:
        """The notifications of these jobs, or of a schedule's runs, oldest first."""
        with self._connect() as db:
            if schedule_id is not None:
                rows = db.execute(
                    "SELECT * FROM notifications WHERE schedule_id = ? ORDER BY id", (schedule_id,)
                ).fetchall()
            else:
                marks = ", ".join("?" * len(job_ids))
                rows = db.execute(
                    f"SELECT * FROM notifications WHERE job_id IN ({marks}) ORDER BY id",
                    list(job_ids),
                ).fetchall()
        return [_record(row) for row in rows]

    def for_lab(self, owner: str, after: int, limit: int = 50) -> list[Record]:
        """The owner's JupyterLab notifications after id ``after``."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT * FROM notifications WHERE owner = ? AND channel = 'jupyterlab'"
                " AND id > ? ORDER BY id LIMIT ?",
                (owner, after, limit),
            ).fetchall()
        return [_record(row) for row in rows]

    def last_id(self) -> int:
        """The newest row's id (0 when none): where a new reader starts."""
        with self._connect() as db:
            row = db.execute("SELECT max(id) FROM notifications").fetchone()
        return int(row[0] or 0)


def _record(row: sqlite3.Row) -> Record:
    return Record(
        id=row["id"],
        key=row["key"],
        owner=row["owner"],
        job_id=row["job_id"],
        schedule_id=row["schedule_id"],
        target=from_json(json.loads(row["target"])),
        message=Message.from_json(json.loads(row["message"])),
        state=State(row["state"]),
        tries=row["tries"],
        next_try=row["next_try"],
        error=row["error"],
        created=row["created"],
        done=row["done"],
    )


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%H:%M:%S")
