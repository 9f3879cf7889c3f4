"""What running jobs show beside their processes, for the GPU panel: the nodes of a
multi-node job's latest attempt, its efficiency hints, a warm session's activity.

Read from the store and the attempts' files; who may see which job is the service's
to decide (``JobService.running_nodes`` and ``running_details``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..job_dir import AttemptDir
from ..status import JobStatus
from .node.hints import read_hints
from .sessions.activity import activity_of
from .store import Job, JobStore, UnknownJob


def job_details(store: JobStore, job_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """For each running job: the hints of its last attempt, as its supervisor last wrote
    them (``hints``, when there are some), and a session's activity (``session``)."""
    found: dict[str, dict[str, Any]] = {}
    for job_id in job_ids:
        try:
            job = store.get(job_id)
        except UnknownJob:
            continue
        attempts = store.attempts(job_id) if job.status is JobStatus.RUNNING else []
        details: dict[str, Any] = {}
        if attempts:
            doc = read_hints(store.attempt_dir(job_id, attempts[-1].attempt))
            if doc["hints"]:
                details["hints"] = [hint["text"] for hint in doc["hints"]]
        if (activity := activity_of(store, job)) is not None:
            details["session"] = activity.to_json()
        if details:
            found[job_id] = details
    return found


def job_nodes(store: JobStore, jobs: Iterable[Job]) -> list[dict[str, Any]]:
    """The nodes of the latest attempt of each of these jobs that runs and lists its
    nodes (the multi-node ones): one query and one small file per running job."""
    nodes = []
    for job in jobs:
        attempts = store.attempts(job.id) if job.status is JobStatus.RUNNING else []
        if not attempts:
            continue  # pending, or between the job's start and its first attempt
        attempt = attempts[-1].attempt
        for node in AttemptDir(store.attempt_dir(job.id, attempt)).read_nodes():
            nodes.append(
                {
                    "job": job.id,
                    "attempt": attempt,
                    "node": node.get("node"),
                    "node_id": node.get("node_id"),
                    "ip": node.get("ip"),
                    "hostname": node.get("hostname"),
                }
            )
    return nodes
