"""GPU-hours per user over a window (the GPU panel's usage view, ``air usage``), from the
jobs' own records: the store's attempts say when each job ran, and each attempt's
journal of system samples says which GPUs it read and how busy they were.

A job's GPUs on a node are the ones its hints file names (a job of one node), else the
first ``nproc_per_node`` GPUs its samples read (ranks get the visible GPUs in order, one
each). An attempt holds them from its start to its end (or now), clipped to the window.
Each sample's utilization is the mean since the sample before it, so that span of a GPU
is idle when the mean is under the threshold; the time after an attempt's last sample
is held but not known idle.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..job_dir import AttemptDir
from ..jobs.node.hints import read_hints
from ..jobs.store import Job, JobStore
from ..jobs.store.attempts import Attempt
from ..tracking import journal

#: A window: a number of hours or days, as ``air usage --since`` takes it.
WINDOW = re.compile(r"(\d{1,4})([hd])")
_UTIL = re.compile(r"system/(?:node_(\d+)/)?gpu_(\d+)_utilization_percentage")


def window_seconds(text: str) -> float:
    """``24h`` or ``7d`` in seconds; a clear error for anything else."""
    found = WINDOW.fullmatch(text.strip())
    if found is None or int(found.group(1)) == 0:
        raise ValueError(f"a window is hours or days, e.g. 24h or 7d; got {text!r}")
    return int(found.group(1)) * (3600 if found.group(2) == "h" else 86400)


@dataclass(frozen=True)
class JobHours:
    """One job's GPU time in the window."""

    job: str
    name: str | None
    gpus: int
    gpu_hours: float
    idle_gpu_hours: float


@dataclass
class UserHours:
    """One user's GPU time in the window, and the jobs that held the GPUs (most first)."""

    user: str
    gpu_hours: float = 0.0
    idle_gpu_hours: float = 0.0
    jobs: list[JobHours] = field(default_factory=list)


@dataclass(frozen=True)
class _Span:
    start: float
    end: float

    def clip(self, a: float, b: float) -> float:
        return max(0.0, min(b, self.end) - max(a, self.start))


def _samples(files: AttemptDir) -> dict[tuple[int, int], list[tuple[float, float]]]:
    """(node, GPU) -> [(t, utilization)] of an attempt's journal, in time order."""
    found: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    offset = 0
    while lines := journal.read_lines(files.metrics_journal, offset):
        for line in lines:
            for point in line.points:
                if key := _UTIL.fullmatch(point.key):
                    node, gpu = int(key.group(1) or 0), int(key.group(2))
                    found[node, gpu].append((point.timestamp / 1000, point.value))
        offset = lines[-1].end
    return {k: sorted(v) for k, v in found.items()}


def _job_gpus(
    job: Job, files: AttemptDir, samples: dict[tuple[int, int], list[tuple[float, float]]]
) -> list[tuple[int, int]]:
    """The (node, GPU) pairs the attempt held."""
    named = read_hints(files.path)["gpus"] if job.spec.compute.nnodes == 1 else []
    if named:
        return [(0, gpu) for gpu in named]
    held: list[tuple[int, int]] = []
    for node in sorted({node for node, _ in samples}):
        read = sorted(gpu for n, gpu in samples if n == node)
        held += [(node, gpu) for gpu in read[: job.spec.compute.nproc_per_node]]
    return held


def _attempt_hours(
    job: Job, attempt: Attempt, files: AttemptDir, window: _Span, threshold: float
) -> tuple[int, float, float]:
    """GPUs held, GPU-seconds and idle GPU-seconds of one attempt in the window."""
    held = _Span(attempt.started, attempt.ended if attempt.ended is not None else window.end)
    counted = _Span(max(held.start, window.start), min(held.end, window.end))
    span = counted.clip(counted.start, counted.end)
    if span <= 0:
        return 0, 0.0, 0.0
    samples = _samples(files)
    gpus = _job_gpus(job, files, samples)
    idle = 0.0
    for pair in gpus:
        before = held.start
        for t, util in samples.get(pair, []):
            if util < threshold:
                idle += counted.clip(before, t)
            before = max(before, t)
    return len(gpus), span * len(gpus), idle


def gpu_hours(
    store: JobStore,
    jobs: Iterable[Job],
    since: float,
    now: float,
    idle_threshold: float,
) -> list[UserHours]:
    """Each user's GPU-hours in ``[since, now]`` from ``jobs`` (the caller chooses whose),
    most first; a job that held no GPU in the window is left out."""
    window = _Span(since, now)
    chosen = [j for j in jobs if j.created <= now and (j.ended is None or j.ended >= since)]
    users: dict[str, UserHours] = {}
    for job in chosen:
        gpus = 0
        seconds = idle = 0.0
        for attempt in store.attempts(job.id):
            files = AttemptDir(store.attempt_dir(job.id, attempt.attempt))
            n, s, i = _attempt_hours(job, attempt, files, window, idle_threshold)
            gpus, seconds, idle = max(gpus, n), seconds + s, idle + i
        if seconds <= 0:
            continue
        user = users.setdefault(job.owner, UserHours(job.owner))
        hours = JobHours(job.id, job.spec.tracking.run_name, gpus, seconds / 3600, idle / 3600)
        user.jobs.append(hours)
        user.gpu_hours += hours.gpu_hours
        user.idle_gpu_hours += hours.idle_gpu_hours
    for user in users.values():
        user.jobs.sort(key=lambda j: -j.gpu_hours)
    return sorted(users.values(), key=lambda u: (-u.gpu_hours, u.user))


def usage_document(
    store: JobStore, owner: str | None, window: str, now: float, idle_threshold: float
) -> dict[str, Any]:
    """The usage view's answer for ``window`` (``24h``, ``7d``) up to ``now``: the jobs of
    ``owner`` only, or everyone's with None (a Hub admin's view). Raises ``ValueError``
    for a bad window."""
    since = now - window_seconds(window)
    jobs = [job for job in store.jobs() if owner is None or job.owner == owner]
    users = gpu_hours(store, jobs, since, now, idle_threshold)
    return {
        "window": window,
        "since": since,
        "now": now,
        "idle_threshold": idle_threshold,
        "users": [asdict(user) for user in users],
    }
