"""A fixed-size ring of samples, stored column by column.

Two hours of 8 GPUs at 10 s is 720 rows of 35 numbers: typed ``array`` columns hold
that in about 100 KB and serialise straight into the columnar JSON the panel reads.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Per-GPU columns: (name in JSON, decimals kept; 0 means an integer).
GPU_COLUMNS: tuple[tuple[str, int], ...] = (("util", 0), ("mem", 0), ("temp", 0), ("power", 1))
#: Host columns, same convention.
HOST_COLUMNS: tuple[tuple[str, int], ...] = (("cpu", 1), ("mem", 0))

NAN = float("nan")


@dataclass(frozen=True)
class Row:
    """One sample: host figures and, per GPU, the values of ``GPU_COLUMNS`` (None = n/a)."""

    t: float
    host: tuple[float | None, ...]
    gpus: Sequence[tuple[float | None, ...]]


class SampleHistory:
    """Keeps the samples of the last ``span`` seconds, at most ``capacity`` of them."""

    def __init__(self, capacity: int, n_gpus: int, span: float) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.n_gpus = n_gpus
        self.span = span
        self._t = array("d", [NAN]) * capacity
        self._host = [array("f", [NAN]) * capacity for _ in HOST_COLUMNS]
        self._gpu = [[array("f", [NAN]) * capacity for _ in GPU_COLUMNS] for _ in range(n_gpus)]
        self._start = 0
        self._len = 0

    def __len__(self) -> int:
        return self._len

    @property
    def last_t(self) -> float | None:
        """Time of the newest sample, if any."""
        return self._t[self._slot(self._len - 1)] if self._len else None

    def append(self, row: Row) -> None:
        """Add a sample; the oldest falls out once the ring is full."""
        if len(row.gpus) != self.n_gpus:
            raise ValueError(f"expected {self.n_gpus} GPUs in the sample, got {len(row.gpus)}")
        t = round(row.t, 3)  # what clients see and send back as `since`
        last = self.last_t
        if last is not None and t <= last:
            raise ValueError("samples must be appended in time order, at least 1 ms apart")
        if self._len < self.capacity:
            slot = self._slot(self._len)
            self._len += 1
        else:
            slot = self._start
            self._start = (self._start + 1) % self.capacity
        self._t[slot] = t
        _store(self._host, slot, row.host)
        for columns, values in zip(self._gpu, row.gpus, strict=True):
            _store(columns, slot, values)

    def columns(self, since: float | None, now: float) -> dict[str, Any]:
        """Samples taken after ``since`` and within ``span`` of ``now``, as JSON-ready columns."""
        lower = now - self.span  # inclusive: a sample exactly `span` old is still kept
        if since is not None:
            lower = max(lower, math.nextafter(since, math.inf))  # strictly after `since`
        slots = [self._slot(i) for i in range(self._len)]
        chosen = slots[bisect_left(slots, lower, key=lambda s: self._t[s]) :]
        return {
            "t": [self._t[s] for s in chosen],
            **{
                name: _column(values, chosen, digits)
                for (name, digits), values in zip(HOST_COLUMNS, self._host, strict=True)
            },
            "gpu": [
                {
                    name: _column(values, chosen, digits)
                    for (name, digits), values in zip(GPU_COLUMNS, gpu, strict=True)
                }
                for gpu in self._gpu
            ],
        }

    def nbytes(self) -> int:
        """Bytes held by the column buffers."""
        arrays = [self._t, *self._host, *(c for gpu in self._gpu for c in gpu)]
        return sum(a.itemsize * len(a) for a in arrays)

    def _slot(self, i: int) -> int:
        return (self._start + i) % self.capacity


def _store(columns: list[array[float]], slot: int, values: Sequence[float | None]) -> None:
    for column, value in zip(columns, values, strict=True):
        column[slot] = NAN if value is None else value


def _column(values: array[float], slots: list[int], digits: int) -> list[float | int | None]:
    out: list[float | int | None] = []
    for s in slots:
        v = values[s]
        if v != v:  # NaN: not reported
            out.append(None)
        elif digits:
            out.append(round(v, digits))
        else:
            out.append(round(v))
    return out
