"""Rank 0's metrics and the nodes' system samples, journaled in the attempt's directory,
then shipped to MLflow.

``log_metrics`` in a rank appends one JSON line to the attempt's journal and returns: no
MLflow import, no network, a few microseconds, so a training loop runs as fast whatever
the tracking server does, and the cell's live chart reads its points from the file at
once. The supervisor appends each system-metrics sample the same way
(``append_samples``), so a server that is down loses none of them either. The journal is
shipped to each line's run in the background, in order, in batches of at most
``MAX_BATCH`` points (MLflow's limit for ``log_batch``), and after each batch the
journal's mark records how far it got, so a shipper that dies or restarts resumes there:
the supervisor ships while the attempt runs (once it has MLflow loaded), the user's tail
process ships the rest before it ends the run, and again later for as long as the server
does not take it (``run_tails``); one shipper at a time. A batch sent again after a
crash between the batch and its mark lands once: MLflow's SQL stores keep one row per
(run, key, step, timestamp, value).

A line is ``{"r": run id, "t": ms, "s": step, "m": {key: value}}``; one cut short by a
crash (no newline yet) is neither read nor shipped until it is whole.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..job_dir import AttemptDir
from ..paths import write_private
from .sampling import Sample

#: Where a rank journals its metrics (set by the supervisor for every rank).
JOURNAL_ENV = "AIR_METRICS_JOURNAL"
#: A line's run when its attempt has none yet (``tracking: deferred`` while its server
#: did not answer): the attempt's run, whichever it turns out to be.
ATTEMPT_RUN = ""
#: MLflow's most metrics in one ``log_batch``.
MAX_BATCH = 1000
#: Bytes read at most per look, so catching up with a long journal costs bounded memory.
READ_CHUNK = 4 << 20


@dataclass(frozen=True)
class Point:
    run_id: str
    key: str
    value: float
    timestamp: int  # milliseconds, as MLflow stores them
    step: int


class Writer:
    """Appends lines to one journal: opened once, one ``write`` per line (O_APPEND: a
    line is never interleaved with another writer's)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def append(
        self,
        run_id: str,
        metrics: Mapping[str, float],
        step: int | None,
        timestamp: float | None = None,
    ) -> None:
        """One line for the call (a bad value refuses the whole call, writing nothing);
        ``timestamp``: when it was measured (seconds), if not now."""
        values = {}
        for key, value in metrics.items():
            try:
                values[str(key)] = float(value)
            except (TypeError, ValueError):
                raise TypeError(f"log_metrics: {key!r} is not a number: {value!r}") from None
        t = time.time() if timestamp is None else timestamp
        line = {"r": run_id, "t": int(t * 1000), "s": int(step or 0), "m": values}
        os.write(self._fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


def append_samples(
    files: AttemptDir, run_id: str, prefix: str, samples: Sequence[Sample], steps: Sequence[int]
) -> None:
    """System-metrics samples into the attempt's journal, a line each, at its own time
    and step: shipped with rank 0's metrics, so a server that is down loses none."""
    writer = Writer(files.metrics_journal)
    try:
        for sample, step in zip(samples, steps, strict=True):
            metrics = {prefix + name: value for name, value in sample.metrics.items()}
            writer.append(run_id, metrics, step, sample.t)
    finally:
        writer.close()


def read(path: Path, offset: int, limit: int = READ_CHUNK) -> list[tuple[list[Point], int]]:
    """The whole lines after byte ``offset`` (about ``limit`` bytes of them at most):
    each line's points and the offset just after it."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            chunk = f.read(limit)
    except FileNotFoundError:
        return []
    lines = []
    start = 0
    while (newline := chunk.find(b"\n", start)) >= 0:
        lines.append((list(_points(chunk[start:newline])), offset + newline + 1))
        start = newline + 1
    return lines


def _points(raw: bytes) -> Iterator[Point]:
    """A line's points; a line that is not ours (hand-edited, a bug) is skipped, not
    allowed to stop the journal behind it."""
    try:
        line = json.loads(raw)
        run_id, t, step = str(line["r"]), int(line["t"]), int(line["s"])
        for key, value in line["m"].items():
            yield Point(run_id, str(key), float(value), t, step)
    except (ValueError, KeyError, TypeError, AttributeError):
        return


def shipped(files: AttemptDir) -> int:
    """How many bytes of the journal have landed in MLflow."""
    try:
        return int(files.metrics_shipped.read_text())
    except (FileNotFoundError, ValueError):
        return 0


def waiting(files: AttemptDir) -> int:
    """How many bytes of the journal wait to be shipped."""
    try:
        size = files.metrics_journal.stat().st_size
    except FileNotFoundError:
        return 0
    return max(0, size - shipped(files))


def waiting_points(files: AttemptDir) -> int:
    """How many points of the journal wait to be shipped."""
    count, offset = 0, shipped(files)
    while lines := read(files.metrics_journal, offset):
        count += sum(len(points) for points, _ in lines)
        offset = lines[-1][1]
    return count


class NoRunYet(RuntimeError):
    """Lines of the attempt's own run wait for that run to be made."""


def ship(client: Any, files: AttemptDir, attempt_run: str | None = None) -> int:
    """Ship every whole line after the mark, in order, in batches (``client.log_batch``
    of an ``MlflowClient``), moving the mark past the lines each batch completes; the
    number of points shipped. Lines of ``ATTEMPT_RUN`` go to ``attempt_run``; without
    one, the shipping stops before them (``NoRunYet``), as at any other error. One
    shipper at a time (a lock beside the mark): a kernel and the supervisor never send
    one batch twice, nor move the mark back."""
    from mlflow.entities import Metric

    total = 0
    with _shipping(files):
        while lines := read(files.metrics_journal, shipped(files)):
            for run_id, batch, done in _batches(lines):
                if run_id == ATTEMPT_RUN:
                    if not attempt_run:
                        raise NoRunYet("the attempt's run is not made yet")
                    run_id = attempt_run
                metrics = [Metric(p.key, p.value, p.timestamp, p.step) for p in batch]
                client.log_batch(run_id, metrics=metrics)
                total += len(batch)
                if done is not None:
                    _mark(files, done)
            _mark(files, lines[-1][1])  # lines without points (skipped) included
    return total


@contextlib.contextmanager
def _shipping(files: AttemptDir) -> Iterator[None]:
    lock = files.metrics_shipped.with_name(f".{files.metrics_shipped.name}.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing lets the lock go


def _mark(files: AttemptDir, offset: int) -> None:
    tmp = files.metrics_shipped.with_name(f".{files.metrics_shipped.name}.tmp")
    write_private(tmp, str(offset))
    tmp.replace(files.metrics_shipped)


def _batches(
    lines: list[tuple[list[Point], int]],
) -> Iterator[tuple[str, list[Point], int | None]]:
    """Consecutive points of one run, at most ``MAX_BATCH`` at a time, in order, each
    with the offset after the last line it completes (None if it completes none: a
    line longer than a batch)."""
    batch: list[Point] = []
    done: int | None = None
    for points, end in lines:
        for point in points:
            if batch and (point.run_id != batch[0].run_id or len(batch) == MAX_BATCH):
                yield batch[0].run_id, batch, done
                batch, done = [], None
            batch.append(point)
        done = end
    if batch:
        yield batch[0].run_id, batch, done
