"""Which Jupyter kernel (or job) a GPU process belongs to.

A training script started from a notebook is often a child (or grandchild) of the
kernel, so a process belongs to the nearest ancestor we know about. A rank of a job
belongs to its job first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import psutil

OwnerT = TypeVar("OwnerT")


def job_of(pid: int) -> str | None:
    """The jupyter_air job a process runs for: every rank carries AIR_JOB_ID."""
    try:
        return psutil.Process(pid).environ().get("AIR_JOB_ID")
    except (psutil.Error, OSError):
        return None


def owner_of(pid: int, owners: Mapping[int, OwnerT]) -> OwnerT | None:
    """The owner of ``pid`` itself or of its nearest ancestor, if any is known."""
    if pid in owners:
        return owners[pid]
    try:
        ancestors = psutil.Process(pid).parents()
    except (psutil.Error, OSError):
        return None
    for parent in ancestors:
        if parent.pid in owners:
            return owners[parent.pid]
    return None
