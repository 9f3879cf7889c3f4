"""A change of a job's grants, also made on its MLflow experiment.

Every path that grants (submission, ``air permissions``, ``PUT .../permissions``) calls
``mirror`` after the job's grants are recorded: the job grant holds whatever MLflow says.
It makes network calls (bounded in time by ``tracking.permissions``): off the event loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .permissions import Grant, Principal
from .store import Job, JobStore

if TYPE_CHECKING:
    from ..tracking.permissions import MirrorReport


def mirror(
    store: JobStore, job: Job, grants: Iterable[Grant], revoke: Iterable[Principal] = ()
) -> MirrorReport | None:
    """Set on the job's experiment what the changed principals now hold there; None when
    the job has no MLflow experiment or nothing changed.

    Called after the change is recorded. MLflow keeps one permission per user and
    experiment, while grants are per job and many jobs share an experiment: a principal
    gets the highest level any job of the experiment grants them, and loses the
    permission only when none grants them anything (revoking bob on one job must not
    take away what another job of the same experiment still gives him).
    """
    from ..tracking import permissions, run_tails

    uri, experiment_id = job.spec.tracking.tracking_uri, job.experiment_id
    changed = list(dict.fromkeys([*(g.principal for g in grants), *revoke]))  # in order
    if changed and uri and not experiment_id:  # a deferred run not made yet: given then
        run_tails.regrant(store.home / "tails", job.id, as_changes(store.access(job.id).grants))
    if not changed or not uri or not experiment_id:
        return None
    levels = store.experiment_levels(uri, experiment_id, set(changed))
    changes = [
        permissions.PermissionChange(
            p.name, levels[p].name if p in levels else None, p.kind == "group"
        )
        for p in changed
    ]
    return permissions.mirror_grants(uri, experiment_id, changes)


def as_changes(grants: Iterable[Grant]) -> tuple[tuple[str, str, bool], ...]:
    """Grants as ``tracking.permissions.PermissionChange`` fields (grantee, level, group),
    for a process that mirrors them without the store (the tail process)."""
    return tuple((g.principal.name, g.level.name, g.principal.kind == "group") for g in grants)
