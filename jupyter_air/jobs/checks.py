"""The checks before a submission, one path for the magic, the decorator and ``air run``.

The rules on the options themselves are the ``Submission`` model's (``workload_file``);
these are the ones against the world: the grants the submitter may give, the ranks
this machine holds (``capacity``), and a Ray cluster that answers (``ray_cluster``).
Nothing exists yet when one refuses: no job, no run, no process.
"""

from __future__ import annotations

from .capacity import TooManyRanks, check_here
from .permissions import BadGrant, check_change
from .ray_cluster import ClusterError, check_reachable, require_ray, resolve_address
from .workload_file import Submission


class Refused(ValueError):
    """A submission that cannot start; ``field`` is the workload-file field at fault (None
    for the cluster), the message says why and what to do."""

    def __init__(self, field: str | None, reason: str) -> None:
        super().__init__(reason)
        self.field = field


def check_submission(
    submission: Submission,
    owner: str,
    *,
    nproc_per_node: int,
    override: str,
    oversubscribe: bool = False,
    ray_address: str | None = None,
    reach_cluster: bool = True,
) -> str | None:
    """Refuse what ``owner`` cannot start; the Ray cluster's address for a Ray job.

    ``nproc_per_node`` is the ranks per node decided (the kernel's default is one per
    GPU); ``override`` names the option that lifts the capacity limit, which
    ``oversubscribe`` (or the submission's own) does; ``ray_address`` is the default
    cluster (the kernel's configuration) before ``RAY_ADDRESS``; ``reach_cluster=False``
    leaves the cluster alone (a dry run).
    """
    check_grants(owner, submission)
    if submission.backend == "ray":
        address = resolve_address(submission.ray_address or ray_address)
        if reach_cluster:
            try:
                require_ray()
                check_reachable(address)
            except ClusterError as err:
                raise Refused(None, str(err)) from None
        return address
    if not (oversubscribe or submission.compute.oversubscribe):
        try:
            check_here(nproc_per_node, override)
        except TooManyRanks as err:
            raise Refused("compute.nproc_per_node", str(err)) from None
    return None


def check_grants(owner: str, submission: Submission) -> None:
    """The grants of a submission are ones ``owner`` may give (never to themself)."""
    try:
        check_change(owner, submission.grants, ())
    except BadGrant as err:
        raise Refused("permissions", str(err)) from None
