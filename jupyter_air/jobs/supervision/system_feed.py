"""Where an attempt's system-metrics samples go: its run, and a session's running cell.

Every backend's nodes sample with the same loop (``tracking.sampling``): the local
node in the supervisor, each Ray node agent on its node. The supervisor hands each
node's samples to this feed, which writes them on a thread of its own into the
attempt's metrics journal (``tracking.journal``), shipped to MLflow with rank 0's
points, so a tracking server that is down delays them and loses none; under MLflow's
names: ``system/<metric>`` for one node, ``system/node_N/<metric>`` for each of several,
and the job's energy (``tracking.energy.JobEnergy``: its nodes' sum under ``system/``,
and grams of CO2 where the grid's intensity is known).

A warm session's cells are child runs of its run. Each sample goes to the session's run,
and also to the run of the cell whose span holds its time (``session_cells``: the
kernel writes the latest cell's span), at the cell's own steps from 0, so each cell's
run has the system metrics of its time. A cell that ended with no sample in its span
(shorter than the interval) is owed one: the nodes are asked for a sample at once, and
the first each sends after the cell's end goes to that cell too. A sample taken while
the kernel was taking a cell's end (``LatestCell.closing``) waits for that end: the
kernel takes the time first and writes it after, so a look in between cannot tell.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from typing import Any

from ...job_dir import AttemptDir, JobDir
from ...tracking.energy import JobEnergy
from ...tracking.journal import append_samples
from ...tracking.sampling import Sample, prefix
from ..sessions import cells as session_cells
from ..sessions.cells import LatestCell

log = logging.getLogger("jupyter_air.system_metrics")

#: Seconds between two looks at a session's latest cell.
CELL_POLL = 0.25
#: Seconds at least between two samples asked for cells that ended with none.
ASK_GAP = 1.0
#: Seconds after its end a cell still takes the samples of its span.
KEEP = 60.0
#: Seconds the attempt's end waits for the feed's last samples to be journaled.
FINISH_WAIT = 5.0


class SystemMetricsFeed:
    """One attempt's system metrics, from every node, into its journal."""

    def __init__(
        self,
        run_id: str,
        files: AttemptDir,
        nnodes: int,
        session: JobDir | None = None,
        grams_co2_per_kwh: float | None = None,
    ) -> None:
        """``files``: the attempt's, whose journal takes the samples; ``session``: the
        directory of a session job, whose cells get their samples; ``grams_co2_per_kwh``:
        the grid's carbon intensity, if known."""
        self.run_id = run_id
        self._files = files
        self._nnodes = nnodes
        self._session = session
        self._energy = JobEnergy(nnodes, grams_co2_per_kwh)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="air-metrics-log")
        self._pending: list[Future[None]] = []
        self._lock = threading.Lock()
        self.sampled = False  # a sample was handed over
        #: Asks every node for a sample at once; set once the nodes are placed.
        self.ask_sample: Callable[[], None] = lambda: None
        self._cells: dict[int, LatestCell] = {}
        self._cell_steps: dict[tuple[int, int], int] = {}  # (cell, node) -> next step
        self._owed: dict[int, set[int]] = {}  # cell -> nodes whose next sample it gets
        self._fed: set[int] = set()  # cells that got a sample
        self._held: list[tuple[int, Sample]] = []  # (node, sample) waiting for a cell's end
        self._over = threading.Event()
        if session is not None:
            threading.Thread(target=self._watch_cells, name="air-cell-metrics", daemon=True).start()

    def add(self, node: int, samples: Sequence[Sample]) -> None:
        """A node's new samples (on this machine's clock), logged in the background."""
        if not samples:
            return
        with self._lock:
            if self._over.is_set():  # a sample loop that outlived its attempt's end
                return
            self.sampled = True
            self._submit(self._log, node, list(samples))

    def _submit(self, work: Callable[..., None], *args: Any) -> Future[None]:
        """``work`` on the log thread (the lock held: not once the feed is finished)."""
        self._pending = [f for f in self._pending if not f.done()]
        self._pending.append(future := self._executor.submit(work, *args))
        return future

    def _log(self, node: int, samples: list[Sample]) -> None:
        samples, totals = self._energy.add(node, samples)
        steps = [s.step for s in samples]
        append_samples(self._files, self.run_id, prefix(node, self._nnodes), samples, steps)
        if totals:  # a job of several nodes: its GPUs' energy, all nodes summed
            append_samples(self._files, self.run_id, "system/", totals, [s.step for s in totals])
        if self._session is not None:
            self._log_cells([(node, sample) for sample in samples])

    def _log_cells(self, samples: list[tuple[int, Sample]]) -> None:
        """``samples`` (and those held before) into their cells' runs, on the log thread."""
        assert self._session is not None
        self._look()
        for cell, node, got in self._by_cell(samples):
            steps = self._steps(cell.cell, node, got)
            # a cell run before its run was made: into its own journal, for that run
            files = self._files if cell.run_id else self._files.late_cell(cell.cell)
            append_samples(files, cell.run_id, prefix(node, self._nnodes), got, steps)

    def _by_cell(
        self, samples: list[tuple[int, Sample]]
    ) -> list[tuple[LatestCell, int, list[Sample]]]:
        """The samples of each cell and node: those in the cell's span, and the first after
        its end for a cell owed one. Those since the start of a closing cell are held."""
        found: dict[tuple[int, int], list[Sample]] = {}
        with self._lock:
            todo, self._held = self._held + samples, []
            for node, sample in todo:
                if any(
                    c.closing and c.ended is None and sample.t >= c.started
                    for c in self._cells.values()
                ):
                    self._held.append((node, sample))
                    continue
                for cell in self._cells.values():
                    ended = cell.ended if cell.ended is not None else float("inf")
                    inside = cell.started <= sample.t <= ended
                    owed = self._owed.get(cell.cell, set())
                    if inside or (node in owed and sample.t >= ended):
                        found.setdefault((cell.cell, node), []).append(sample)
                        owed.discard(node)
                        self._fed.add(cell.cell)
            for number in [n for n, nodes in self._owed.items() if not nodes]:
                del self._owed[number]
            return [(self._cells[n], node, got) for (n, node), got in found.items()]

    def _steps(self, cell: int, node: int, samples: list[Sample]) -> list[int]:
        first = self._cell_steps.get((cell, node), 0)
        self._cell_steps[(cell, node)] = first + len(samples)
        return list(range(first, first + len(samples)))

    def _look(self) -> None:
        """The session's latest cell, as the kernel last wrote it, read and taken in under
        the lock: a look never undoes a later one (a sample's cell is then the one seen
        after the sample was taken). An ended cell with no sample in its span is owed one.
        Cells ended ``KEEP`` seconds ago are let go (a sample of theirs would have come)."""
        assert self._session is not None
        gone = time.time() - KEEP
        with self._lock:
            latest = session_cells.latest(self._session)
            if latest is None:
                return
            self._cells[latest.cell] = latest
            for number, cell in list(self._cells.items()):
                if cell.ended is None and number < latest.cell:  # its end was not seen
                    ended = latest.previous_ended if number == latest.cell - 1 else None
                    self._cells[number] = cell = replace(cell, ended=ended or latest.started)
                if cell.ended is not None and cell.ended < gone and number not in self._owed:
                    del self._cells[number]
            if latest.ended is not None and latest.cell not in self._fed:
                self._owed.setdefault(latest.cell, set(range(self._nnodes)))

    def _watch_cells(self) -> None:
        assert self._session is not None
        asked = 0.0
        release: Future[None] = Future()
        release.set_result(None)
        while not self._over.wait(CELL_POLL):
            try:
                self._look()
            except Exception as err:  # a bug here costs the cells' metrics only
                log.warning("session cells not read: %s", err)
                continue
            with self._lock:
                owed = bool(self._owed)
                if self._held and release.done() and not self._over.is_set():
                    release = self._submit(self._log_cells, [])  # their cell's end may be known
            if owed and time.monotonic() - asked >= ASK_GAP:
                asked = time.monotonic()
                try:
                    self.ask_sample()
                except Exception as err:  # a node going away: its next poll says so
                    log.warning("no sample asked of the nodes: %s", err)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every sample handed over is journaled, held for its cell's end, or
        its failure said; ``timeout``: seconds at most for all of it (the samples are in
        the journal first: what is left to wait for is MLflow's answer on the run)."""
        with self._lock:
            pending, self._pending = self._pending, []
        deadline = None if timeout is None else time.monotonic() + timeout
        for future in pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                future.result(left)
            except FutureTimeout:
                log.warning("system metrics of run %s: MLflow did not answer in time", self.run_id)
                return
            except Exception as err:
                log.warning("system metrics of run %s not logged: %s", self.run_id, err)

    def finish(self) -> None:
        """Every sample handed over journaled (waited for ``FINISH_WAIT`` seconds at
        most), then no more."""
        with self._lock:
            self._over.set()
        self.flush(FINISH_WAIT)
        self._executor.shutdown(wait=False)
        if self._held:  # a last look at the cell they wait for
            try:
                self._log_cells([])
            except Exception as err:
                log.warning("system metrics of run %s's cells not logged: %s", self.run_id, err)
        if self._held:
            log.warning(
                "%d system samples of a cell whose end never came: in run %s only",
                len(self._held),
                self.run_id,
            )
