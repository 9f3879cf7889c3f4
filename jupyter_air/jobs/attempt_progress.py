"""An attempt's progress, ETA and MFU as every display shows them: the jobs API, ``air
get`` and ``air list``, the cell's status line. Read from the attempt's ``perf/``
folder, where its ranks mark their steps (``perf.progress``, ``perf.mfu``).

What is not known is not said: an ended attempt has no ETA, and where some of a cluster
attempt's ranks marked their steps on a node without the store's disk (their files are
not here), the job's throughput is not the sum of those here, so none is given.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..job_dir import AttemptDir, JobDir
from ..perf import marks, mfu, progress
from .sessions import cells


@dataclass(frozen=True)
class Shown:
    """An attempt's progress, and its MFU (or why it has none)."""

    progress: progress.Progress
    mfu: mfu.Mfu

    def line(self, now: float | None = None) -> str:
        return with_mfu(self.progress.line(now), self.mfu.value)

    def to_json(self) -> dict[str, Any]:
        """The attempt's ``progress`` in the jobs API, its ``mfu`` in it. A figure that is
        not a number (a rank's batch size given as NaN) is unknown: JSON has no NaN, and
        one would break every page that lists the job."""
        doc = {key: _finite(value) for key, value in self.progress.to_json().items()}
        doc["mfu"] = {"value": _finite(self.mfu.value), "why": self.mfu.why}
        return doc


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def with_mfu(line: str, value: float | None) -> str:
    """``step 4,210 / 10,000 (42 %), ETA 18:40 (23 min) · MFU 41 %``: the progress line,
    and the MFU when known."""
    return line if value is None else f"{line} · MFU {percent(value)}"


def percent(fraction: float) -> str:
    """An MFU (a fraction of the peak) as said: ``41 %``, with a decimal below 10 %."""
    value = fraction * 100
    return f"{value:.1f} %" if value < 10 else f"{value:.0f} %"


def of_attempt(files: AttemptDir, running: bool, world_size: int | None = None) -> Shown | None:
    """What the attempt's marks say (a warm session's cell's: ``files.late_cell(N)``), or
    None before its first step (or with marks off). ``running``: it may still step (an
    ETA is said). ``world_size``: its ranks, to tell a cluster attempt's throughput that
    some nodes' marks are missing from (None: not checked, for a caller that shows the
    line only, which says no throughput)."""
    folder = files.perf
    read = _reader(folder).read()
    if read is None:
        return None
    found, efficiency = read
    if not running:
        found = dataclasses.replace(found, eta_s=None)
    on_nodes = bool(files.read_nodes())
    if on_nodes and world_size is not None and len(marks.rank_files(folder)) < world_size:
        found = dataclasses.replace(found, samples_per_s=None, tokens_per_s=None)
    return Shown(found, efficiency)


#: Seconds an attempt's MFU is said again before its ranks' FLOPs lines are read again.
MFU_EVERY = 30.0
#: The attempts whose readers a process keeps (the jobs a server or a kernel shows).
KEPT = 64


class _Reader:
    """One attempt's marks, for a process that shows them again and again (a server
    polled by its panels, a kernel's status line): each read parses only what the ranks
    appended since the last (``progress.Follower``), and the MFU's FLOPs lines at most
    every ``MFU_EVERY`` seconds (a long job's read costs what a short one's does)."""

    def __init__(self, folder: Path) -> None:
        self._follower = progress.Follower(folder)
        self._lock = threading.Lock()
        self._mfu: mfu.Mfu | None = None
        self._mfu_read = 0.0
        self._mfu_timed = False  # computed with a step time

    def read(self) -> tuple[progress.Progress, mfu.Mfu] | None:
        with self._lock:
            found = self._follower.update()
            if found is None:
                return None
            now = time.monotonic()
            timed = found.step_time_s is not None
            if self._mfu is None or now - self._mfu_read >= MFU_EVERY or timed > self._mfu_timed:
                self._mfu = mfu.of_job(self._follower.perf_dir, found.step_time_s)
                self._mfu_read, self._mfu_timed = now, timed
            return found, self._mfu


_readers: OrderedDict[Path, _Reader] = OrderedDict()
_readers_lock = threading.Lock()


def _reader(folder: Path) -> _Reader:
    """The attempt's reader, kept (the least recently read go past ``KEPT``)."""
    with _readers_lock:
        reader = _readers.pop(folder, None) or _Reader(folder)
        _readers[folder] = reader
        while len(_readers) > KEPT:
            _readers.popitem(last=False)
        return reader


def of_session(files: JobDir) -> tuple[AttemptDir, bool] | None:
    """A warm session's latest cell's files, and whether it runs (None before its first
    cell): its marks are the session's progress."""
    cell = cells.latest(files)
    if cell is None:
        return None
    return files.attempt(1).late_cell(cell.cell), cell.ended is None
