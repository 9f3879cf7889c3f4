"""GPU-seconds allocated and idle, per holder of the GPU (user, job, notebook).

Counted from the sampler's samples, at each scrape, for the samples taken since the
previous one: each sample stands for the time since the sample before it (at most one
sampling interval, so a paused sampler charges nobody for its pause), charged to the
GPU's holders at the scrape, shared evenly when several hold it. A sample whose
utilization is under the idle threshold is idle time as well.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Holder:
    """Who holds a GPU: the user, the job ("" for none) and the notebook ("" unknown)."""

    user: str
    job: str
    notebook: str


@dataclass(frozen=True)
class Usage:
    """A holder's GPU-seconds so far."""

    holder: Holder
    allocated: float
    idle: float


class GpuUsage:
    """The counters, kept for the life of the process; a holder unseen for
    ``forget_after`` seconds (of sample time) leaves them."""

    def __init__(self, idle_threshold: float, forget_after: float) -> None:
        self.idle_threshold = idle_threshold
        self.forget_after = forget_after
        self._lock = threading.Lock()
        self._allocated: dict[Holder, float] = {}
        self._idle: dict[Holder, float] = {}
        self._seen: dict[Holder, float] = {}
        #: The newest sample counted; samples up to it are never counted again.
        self.counted_until: float | None = None

    def charge(
        self,
        times: Sequence[float],
        utils: Sequence[Sequence[float | None]],
        holders: Sequence[frozenset[Holder]],
        interval: float,
    ) -> None:
        """Count the samples taken at ``times`` (ascending), with each GPU's utilization
        column in ``utils`` and each GPU's holders. Samples not after ``counted_until``
        are skipped; the first call only starts the count at its newest sample (who held
        the GPUs before it is not known)."""
        with self._lock:
            previous = self.counted_until
            if previous is None:
                self.counted_until = times[-1] if times else None
                return
            for i, t in enumerate(times):
                if previous is not None and t <= previous:
                    continue
                span = min(t - previous, interval)
                previous = t
                for gpu_holders, util in zip(holders, utils, strict=True):
                    if gpu_holders:
                        self._add(gpu_holders, span, util[i], t)
            self.counted_until = previous

    def _add(self, holders: frozenset[Holder], span: float, util: float | None, t: float) -> None:
        share = span / len(holders)
        idle = util is not None and util < self.idle_threshold
        for holder in holders:
            self._allocated[holder] = self._allocated.get(holder, 0.0) + share
            if idle:
                self._idle[holder] = self._idle.get(holder, 0.0) + share
            self._seen[holder] = t

    def usages(self, now: float) -> Iterator[Usage]:
        """Every holder's counters, in a stable order; forgets the long-unseen first."""
        with self._lock:
            for holder in [h for h, t in self._seen.items() if now - t > self.forget_after]:
                del self._seen[holder], self._allocated[holder]
                self._idle.pop(holder, None)
            found = [Usage(h, self._allocated[h], self._idle.get(h, 0.0)) for h in self._seen]
        return iter(sorted(found, key=lambda u: u.holder))
