"""A change of a job's grants, also made on its MLflow experiment.

Every path that grants (submission, ``air permissions``, ``PUT .../permissions``) calls
``mirror`` after the job's grants are recorded: the job grant holds whatever MLflow says.
It makes network calls (bounded in time by ``tracking.permissions``): off the event loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .permissions import Grant, Principal
from .store import Job

if TYPE_CHECKING:
    from ..tracking.permissions import MirrorReport


def mirror(
    job: Job, grants: Iterable[Grant], revoke: Iterable[Principal] = ()
) -> MirrorReport | None:
    """The grants and revokes set on the job's experiment; None when the job has no
    MLflow experiment or nothing changed."""
    from ..tracking import permissions

    w = job.workload
    changes = [
        permissions.Grant(g.principal.name, g.level.name, g.principal.kind == "group")
        for g in grants
    ] + [permissions.Grant(p.name, None, p.kind == "group") for p in revoke]
    if not changes or not w.tracking_uri or not w.experiment_id:
        return None
    return permissions.mirror_grants(w.tracking_uri, w.experiment_id, changes)
