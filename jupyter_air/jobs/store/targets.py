"""The job store's notifications: whom each job tells, and the record of what was sent."""

from __future__ import annotations

import json
import time

from ...identity import Identity
from ...notify.outbox import Outbox
from ...notify.targets import Target
from ...notify.targets import from_json as target_from_json
from ...status import JobStatus
from ..permissions import OwnerOnly
from ..spec import JobSpec
from .records import JobEnded, UnknownJob
from .tables import Tables


class Targets(Tables):
    """The job store's part that holds the targets a job's owner added, and its outbox."""

    @property
    def outbox(self) -> Outbox:
        """The notifications sent (or to send) of this store's jobs and schedules."""
        return Outbox(self.db.path, self.db.busy_timeout)

    def targets(self, job_id: str) -> tuple[Target, ...]:
        """Whom the job tells: its spec's targets, then those its owner added since."""
        with self._connect() as db:
            row = db.execute("SELECT workload FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise UnknownJob(job_id)
            added = db.execute(
                "SELECT target FROM job_targets WHERE job_id = ? ORDER BY position", (job_id,)
            ).fetchall()
        spec = JobSpec.from_json(row["workload"])
        return spec.notify + tuple(target_from_json(json.loads(r["target"])) for r in added)

    def add_targets(self, job_id: str, who: Identity, targets: tuple[Target, ...]) -> None:
        """Add targets to a job that runs, if ``who`` owns it: a grant shows a job, it does
        not send the job's lines where the grantee chooses."""
        with self._write() as db:
            row = db.execute(
                "SELECT owner, status, workload FROM jobs WHERE id = ?", (job_id,)
            ).fetchone()
            if row is None:
                raise UnknownJob(job_id)
            if row["owner"] != who.name:
                raise OwnerOnly(job_id, row["owner"], "add a notification to it")
            if not JobStatus(row["status"]).active:
                raise JobEnded(f"job {job_id} already ended ({row['status'].lower()})")
            first = len(JobSpec.from_json(row["workload"]).notify) + int(
                db.execute(
                    "SELECT count(*) FROM job_targets WHERE job_id = ?", (job_id,)
                ).fetchone()[0]
            )
            now = time.time()
            db.executemany(
                "INSERT INTO job_targets (job_id, position, target, added) VALUES (?, ?, ?, ?)",
                [(job_id, first + i, json.dumps(t.to_json()), now) for i, t in enumerate(targets)],
            )
