"""Grants: who besides its owner may see or manage a job (or a schedule).

Jobs and schedules keep their grants alike, each in a table of its own keyed by the
granted row's id; ``GrantTable`` is the SQL both share.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from ...identity import Identity
from ..permissions import Grant, JobAccess, Level, Principal, check_change
from .records import UnknownJob
from .tables import Tables


@dataclass(frozen=True)
class GrantTable:
    """``table`` holds grants on the rows of ``of`` (which have an ``id`` and an
    ``owner``), each naming its row in the column ``key``."""

    table: str
    key: str
    of: str

    @property
    def schema(self) -> str:
        """The table's ``CREATE`` statement."""
        return f"""
CREATE TABLE IF NOT EXISTS {self.table} (
    {self.key} TEXT NOT NULL REFERENCES {self.of}(id),
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    level TEXT NOT NULL,
    PRIMARY KEY ({self.key}, kind, name)
);""".strip()

    def access(self, db: sqlite3.Connection, row_id: str) -> JobAccess | None:
        """The row's owner and grants; None if no row has this id."""
        row = db.execute(f"SELECT owner FROM {self.of} WHERE id = ?", (row_id,)).fetchone()
        if row is None:
            return None
        grants = db.execute(
            f"SELECT kind, name, level FROM {self.table} WHERE {self.key} = ? "
            "ORDER BY kind DESC, name",
            (row_id,),
        ).fetchall()
        return JobAccess(
            row_id,
            row["owner"],
            tuple(Grant(Principal(g["kind"], g["name"]), Level[g["level"]]) for g in grants),
        )

    def put(self, db: sqlite3.Connection, row_id: str, grants: tuple[Grant, ...]) -> None:
        """Add these grants, each replacing its principal's level."""
        db.executemany(
            f"INSERT OR REPLACE INTO {self.table} ({self.key}, kind, name, level) "
            "VALUES (?, ?, ?, ?)",
            [(row_id, g.principal.kind, g.principal.name, g.level.name) for g in grants],
        )

    def revoke(
        self, db: sqlite3.Connection, row_id: str, principals: tuple[Principal, ...]
    ) -> None:
        """Take these principals' grants away."""
        db.executemany(
            f"DELETE FROM {self.table} WHERE {self.key} = ? AND kind = ? AND name = ?",
            [(row_id, p.kind, p.name) for p in principals],
        )

    def clear(self, db: sqlite3.Connection, row_id: str) -> None:
        """Take every grant on the row away."""
        db.execute(f"DELETE FROM {self.table} WHERE {self.key} = ?", (row_id,))

    def visible(self, who: Identity) -> tuple[str, list[str]]:
        """The SQL condition on ``of`` (and its parameters) of the rows ``who`` may view:
        owned, or granted to them or to one of their groups (any level includes CAN_VIEW)."""
        groups = sorted(who.groups)
        sql = (
            f"(owner = ? OR id IN (SELECT {self.key} FROM {self.table} WHERE kind = 'user' "
            f"AND name = ? UNION SELECT {self.key} FROM {self.table} WHERE kind = 'group' "
            f"AND name IN ({', '.join('?' * len(groups))})))"
        )
        return sql, [who.name, who.name, *groups]


JOB_GRANTS = GrantTable("grants", key="job_id", of="jobs")


def job_access(db: sqlite3.Connection, job_id: str) -> JobAccess:
    """The job's owner and grants, read in the caller's transaction."""
    access = JOB_GRANTS.access(db, job_id)
    if access is None:
        raise UnknownJob(job_id)
    return access


class GrantRows(Tables):
    """The job store's part that reads and changes jobs' grants."""

    def access(self, job_id: str) -> JobAccess:
        """The job's owner and grants."""
        with self._connect() as db:
            return job_access(db, job_id)

    def experiment_levels(
        self, tracking_uri: str, experiment_id: str, principals: set[Principal]
    ) -> dict[Principal, Level]:
        """The highest level each principal holds on any job tracked in this experiment
        (absent: none). MLflow keeps one permission per user and experiment, and many
        jobs share an experiment, so this is what the experiment should give them."""
        if not principals:
            return {}
        with self._connect() as db:
            rows = db.execute(
                "SELECT g.kind, g.name, g.level FROM grants g JOIN jobs j ON j.id = g.job_id "
                "WHERE json_extract(j.workload, '$.tracking.tracking_uri') = ? "
                "AND j.experiment_id = ?",
                (tracking_uri, experiment_id),
            ).fetchall()
        levels: dict[Principal, Level] = {}
        for row in rows:
            principal, level = Principal(row["kind"], row["name"]), Level[row["level"]]
            if principal in principals and level > levels.get(principal, 0):
                levels[principal] = level
        return levels

    def change_access(
        self,
        job_id: str,
        who: Identity,
        grants: tuple[Grant, ...] = (),
        revoke: tuple[Principal, ...] = (),
    ) -> JobAccess:
        """Grant (replacing a principal's level) and revoke, if ``who`` holds CAN_MANAGE:
        the check and the change are one transaction, so a concurrent revoke of ``who``'s
        own grant cannot slip between them."""
        with self._write() as db:
            before = job_access(db, job_id)
            before.require(who, Level.CAN_MANAGE)
            check_change(before.owner, grants, revoke)
            JOB_GRANTS.revoke(db, job_id, revoke)
            JOB_GRANTS.put(db, job_id, grants)
            return job_access(db, job_id)
