"""An attempt's step time and throughput, as metrics of its run, while it runs.

Every rank marks its steps in the attempt's ``perf/`` folder (``perf.marks``); the
supervisor follows the files on the system-metrics cadence, reading only what was
appended since its last look (``perf.progress.Follower``), and journals what they say
into the attempt's metrics journal, shipped to MLflow with the rest
(``tracking.journal``): ``perf/step_time`` (seconds, smoothed), ``perf/samples_per_s``
and ``perf/tokens_per_s`` (the job's, every rank together), and with several ranks
marking, each one's ``perf/step_time/rank_R`` (the rank that holds the others back shows
there). A point's step is the job's training step; its time, the latest mark's.

A warm session's ranks mark each cell's steps in the cell's own folder; the feed follows
its latest cell's, into that cell's run (or its own journal, for a run made later).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from ...job_dir import AttemptDir, JobDir
from ...perf.progress import Follower
from ...tracking.journal import ATTEMPT_RUN, Writer
from ..sessions import cells as session_cells

log = logging.getLogger("jupyter_air.perf")

#: Seconds the attempt's end waits for the feed's thread.
STOP_WAIT = 5.0


@dataclass
class _Target:
    """Marks followed into one run: the attempt's, or a session cell's."""

    follower: Follower
    run_id: str
    files: AttemptDir  # whose journal takes the points
    cell: int | None = None
    logged: float | None = None  # the time of the latest mark journaled


class PerfFeed:
    """Follows one attempt's step marks into its run's metrics."""

    def __init__(self, files: AttemptDir, run_id: str, interval: float) -> None:
        """Makes the attempt's marks folder (the ranks' ``AIR_PERF_DIR``) and starts
        looking at it every ``interval`` seconds."""
        self._files = files
        self._job = JobDir(files.path.parent)
        self._target = _Target(Follower(files.perf), run_id, files)
        self._over = threading.Event()
        self._lock = threading.Lock()  # the thread's look, or the last one
        try:
            files.perf.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as err:  # the ranks run without marks
            log.error("no step marks for attempt %d: %s", files.number, err)
        self._thread = threading.Thread(
            target=self._loop, args=(interval,), name="air-perf", daemon=True
        )
        self._thread.start()

    def _loop(self, interval: float) -> None:
        while not self._over.wait(interval):
            self.look()

    def look(self) -> None:
        """Journal what the marks say now, if a step was marked since the last look."""
        with self._lock:
            self._look()

    def _look(self) -> None:
        try:
            self._journal(self._target)
            cell = session_cells.latest(self._job)  # None: no session, or no cell yet
            if cell is not None and cell.cell != self._target.cell:
                late = self._files.late_cell(cell.cell)
                files = self._files if cell.run_id else late
                run_id = cell.run_id or ATTEMPT_RUN
                self._target = _Target(Follower(late.perf), run_id, files, cell.cell)
                self._journal(self._target)
        except Exception as err:  # a bug here costs the run's perf metrics only
            log.warning("step marks of attempt %d not read: %s", self._files.number, err)

    @staticmethod
    def _journal(target: _Target) -> None:
        """Journal what ``target``'s marks say now, if a step was marked since."""
        progress = target.follower.update()
        if progress is None or progress.updated == target.logged:
            return
        metrics = {
            "perf/step_time": progress.step_time_s,
            "perf/samples_per_s": progress.samples_per_s,
            "perf/tokens_per_s": progress.tokens_per_s,
        }
        rates = target.follower.rates()
        if len(rates) > 1:
            for rank, rate in rates.items():
                metrics[f"perf/step_time/rank_{rank}"] = rate.step_time_s
        known = {key: value for key, value in metrics.items() if value is not None}
        target.logged = progress.updated
        if not known:
            return
        writer = Writer(target.files.metrics_journal)
        try:
            writer.append(target.run_id, known, progress.step, progress.updated)
        finally:
            writer.close()

    def finish(self) -> None:
        """A last look, once the ranks have ended: the run gets their last figures."""
        self._over.set()
        self._thread.join(STOP_WAIT)
        self.look()
