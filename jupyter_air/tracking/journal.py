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

A line is ``{"r": run id, "t": ms, "s": step, "m": {key: value}}``, or a run's tags,
``{"r": run id, "t": ms, "g": {key: text}}`` (the supervisor's hints, where a retry
resumed from: they too wait for the server, in order with the points); one cut short by
a crash (no newline yet) is neither read nor shipped until it is whole.
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
#: MLflow's most metrics, and most tags, in one ``log_batch``.
MAX_BATCH = 1000
MAX_TAGS = 100
#: Bytes read at most per look, so catching up with a long journal costs bounded memory.
READ_CHUNK = 4 << 20


@dataclass(frozen=True)
class Point:
    run_id: str
    key: str
    value: float
    timestamp: int  # milliseconds, as MLflow stores them
    step: int


@dataclass(frozen=True)
class Tag:
    run_id: str
    key: str
    value: str


@dataclass(frozen=True)
class Line:
    """One whole line: its points or its tags, and the offset just after it."""

    points: list[Point]
    tags: list[Tag]
    end: int


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
        self._write({"r": run_id, "t": int(t * 1000), "s": int(step or 0), "m": values})

    def tag(self, run_id: str, tags: Mapping[str, str]) -> None:
        """One line of tags for the run."""
        texts = {str(key): str(value) for key, value in tags.items()}
        self._write({"r": run_id, "t": int(time.time() * 1000), "g": texts})

    def _write(self, line: dict[str, Any]) -> None:
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


def append_tags(files: AttemptDir, run_id: str, tags: Mapping[str, str]) -> None:
    """Tags for a run, shipped in order with the journal's points: a server that is
    down loses none, and nobody waits for it."""
    writer = Writer(files.metrics_journal)
    try:
        writer.tag(run_id, tags)
    finally:
        writer.close()


def read(path: Path, offset: int, limit: int = READ_CHUNK) -> list[tuple[list[Point], int]]:
    """The whole lines after byte ``offset`` (about ``limit`` bytes of them at most):
    each line's points (none for a line of tags) and the offset just after it."""
    return [(line.points, line.end) for line in read_lines(path, offset, limit)]


def read_lines(path: Path, offset: int, limit: int = READ_CHUNK) -> list[Line]:
    """``read``, with each line's tags."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            chunk = f.read(limit)
    except FileNotFoundError:
        return []
    lines = []
    start = 0
    while (newline := chunk.find(b"\n", start)) >= 0:
        points, tags = _parse(chunk[start:newline])
        lines.append(Line(points, tags, offset + newline + 1))
        start = newline + 1
    return lines


def _parse(raw: bytes) -> tuple[list[Point], list[Tag]]:
    """A line's points and tags; a line that is not ours (hand-edited, a bug) has none,
    and is not allowed to stop the journal behind it."""
    try:
        line = json.loads(raw)
        run_id = str(line["r"])
        if "g" in line:
            return [], [Tag(run_id, str(k), str(v)) for k, v in line["g"].items()]
        t, step = int(line["t"]), int(line["s"])
        return [Point(run_id, str(k), float(v), t, step) for k, v in line["m"].items()], []
    except (ValueError, KeyError, TypeError, AttributeError):
        return [], []


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
    from mlflow.entities import Metric, RunTag

    total = 0
    with _shipping(files):
        while lines := read_lines(files.metrics_journal, shipped(files)):
            for batch in _batches(lines):
                run_id = batch.run_id
                if run_id == ATTEMPT_RUN:
                    if not attempt_run:
                        raise NoRunYet("the attempt's run is not made yet")
                    run_id = attempt_run
                metrics = [Metric(p.key, p.value, p.timestamp, p.step) for p in batch.points]
                tags = [RunTag(t.key, t.value) for t in batch.tags]
                client.log_batch(run_id, metrics=metrics, tags=tags)
                total += len(batch.points)
                if batch.done is not None:
                    _mark(files, batch.done)
            _mark(files, lines[-1].end)  # lines with nothing (skipped) included
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


@dataclass
class _Batch:
    """Consecutive points and tags of one run for one ``log_batch``, and the offset after
    the last line it completes (None if it completes none: a line longer than a batch)."""

    run_id: str
    points: list[Point]
    tags: list[Tag]
    done: int | None = None

    def full(self, run_id: str, point: bool) -> bool:
        if run_id != self.run_id:
            return True
        return len(self.points) == MAX_BATCH if point else len(self.tags) == MAX_TAGS


def _batches(lines: list[Line]) -> Iterator[_Batch]:
    """The lines' points and tags, a run at a time, at most ``MAX_BATCH`` points and
    ``MAX_TAGS`` tags a batch, in order."""
    batch: _Batch | None = None
    for line in lines:
        entries: list[Point | Tag] = [*line.points, *line.tags]
        for entry in entries:
            if batch is not None and batch.full(entry.run_id, isinstance(entry, Point)):
                yield batch
                batch = None
            if batch is None:
                batch = _Batch(entry.run_id, [], [])
            if isinstance(entry, Point):
                batch.points.append(entry)
            else:
                batch.tags.append(entry)
        if batch is not None:
            batch.done = line.end
    if batch is not None:
        yield batch
