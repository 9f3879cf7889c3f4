"""A warm session from the kernel: start it as one job with one MLflow run, run cells on
its ranks (each cell a child run), stop it.

The cell's output streams through the job's logs as a fresh cell's does (``JobView``),
with the same live view: status, the session job's hints, and the chart of the cell's
own run and the job's GPUs, left as a static figure at its end; its failure and
interrupt read as a fresh cell's (``JobFailed``, ``Interrupted``). The child run of the
next cell is made ahead, while none waits (its id is the ranks' ``MLFLOW_RUN_ID``); its
name and tags are written once its cell has run half a second, or after a shorter cell
(until then the runs panel leaves it out), its source, end and the cells file after the
cell: no MLflow write is on a cell's critical path, nor beside the read of its chart.

A tracking server that does not answer meets a cell as it meets any other call: a run
made ahead is used (its end waits in the tail process), one that failed is dropped and
made again once the server answers; meanwhile the cell is refused in one line, the ranks
and their names untouched, or, in a session started with ``--tracking deferred``, runs
at once with its points in a journal of its own, its run made and filled by the tail
process once the server answers (``AttemptDir.late_cell``).

A session that ended (lost process group, a dead rank, the idle timeout) can be started
again with the options it was started with (``restarted``).

With ``--backend ray`` the ranks run on the node agents of a Ray cluster, as a fresh
``--backend ray`` cell's do, and reach the kernel over TCP at this machine's address on
the route to the cluster, with the session's secret (``session_wire``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, ClassVar

import cloudpickle

from ..identity import mlflow_user
from ..job_dir import AttemptDir
from ..jobs import backends
from ..jobs.debugger import Watcher
from ..jobs.follow import LogFollower
from ..jobs.node.hints import read_hints
from ..jobs.request import JobRequest, Program
from ..jobs.service import JobService, Refused
from ..jobs.sessions import cells as session_cells
from ..jobs.sessions import host as session_host
from ..jobs.sessions import rank as session_rank
from ..jobs.sessions.activity import IDLE_TIMEOUT_TAG
from ..jobs.sessions.cells import CellRecord, LatestCell, SessionRun
from ..jobs.sessions.host import Session, SessionEnded
from ..jobs.spec import JobKind
from ..jobs.workload_file import Submission
from ..logs.query import LogFilter
from ..redact import redact
from ..status import AttemptStatus
from ..tracking import probe, run_tails
from ..tracking.backlog import Part
from ..tracking.backlog import describe as describe_error
from ..tracking.targets import CELL_SOURCE, RunTarget
from ..tracking.ui_links import logs_url
from .debug_prompt import CellPrompt
from .destination import KernelDestination
from .display import JobView
from .launch import (
    Interrupted,
    JobFailed,
    announce_grants,
    end_in_time,
    job_links,
    kernel_service,
    take_value,
)
from .options import OptionError, Options, option_error
from .session import cell_id, notebook_path

#: Seconds the ranks get to start and reach the kernel.
START_WAIT = 300.0
#: Seconds the ranks' last lines get to reach the logs once every rank answered.
DRAIN = 2.0
#: Seconds between two updates of a running cell's status and hints (as a fresh cell's).
STATUS_EVERY = 0.5
#: What every message that ends a session offers.
RESTART = "%air_session restart starts it again with the same options"
#: Seconds a cell waits for its run made ahead before it asks the server itself, and
#: the seconds the server then gets to answer: a refusal, or the deferred path, comes
#: within ``probe.TIMEOUT`` of the cell, whatever the server does.
AHEAD_WAIT = 1.0
ASK_WAIT = 3.0


class CellRefused(probe.Unreachable):
    """A session cell not run: its run cannot be made now. One line, as every call
    refused for its tracking server is; the session and its ranks' names stay."""

    def __init__(self, message: str, job_id: str) -> None:
        super().__init__(message, deferrable=False)
        self.job_id = job_id

    def refusal(self) -> str:
        return (
            f"{self}; the cell did not run, and the session (job {self.job_id}) and its "
            "names stay: run it again once the server answers, or start the session "
            "with --tracking deferred to run cells meanwhile"
        )


class NoSession(RuntimeError):
    """A call for the session when none is ready; the message says what to do."""


class WarmSession:
    """The kernel's one session: its job, its parent run, its cells."""

    #: The kernel's session (one at a time), whether it still runs or has ended.
    current: ClassVar[WarmSession | None] = None

    @classmethod
    def running(cls) -> WarmSession:
        """The kernel's session, ready for a cell (``NoSession`` says why it is not)."""
        if (current := cls.current) is None:
            raise NoSession("no session is running: start one with %air_session start -n N")
        try:
            current.session.check()
        except SessionEnded as err:
            raise NoSession(f"the session (job {current.job_id}) ended: {err}; {RESTART}") from None
        return current

    def __init__(self, options: Options, idle_timeout_min: float) -> None:
        #: What ``%air_session start`` was given, kept for ``restarted``.
        self.options, self.idle_timeout_min = options, idle_timeout_min
        submission = options.validate()
        if idle_timeout_min < 0:
            raise OptionError(f"--idle-timeout must be minutes >= 0, got {idle_timeout_min:g}")
        from ..tracking import runs

        self._runs = runs
        user, notebook = mlflow_user(), notebook_path()
        service = kernel_service()
        _close_ended_watcher(WarmSession.current)
        #: A rank's breakpoint() opens pdb in the running cell (each cell's --debug-rank).
        self.debug = Watcher(service.store.home, 0)
        self._prompt = CellPrompt()
        try:
            self._start(options, idle_timeout_min, submission, service, user, notebook)
        except BaseException:
            self.debug.close()
            raise

    def _start(
        self,
        options: Options,
        idle_timeout_min: float,
        submission: Submission,
        service: JobService,
        user: str,
        notebook: str | None,
    ) -> None:
        from mlflow import MlflowClient

        request = JobRequest(
            submission,
            Program(
                JobKind.SESSION,
                command=[sys.executable, *session_rank.ARGS],
                working_dir=os.getcwd(),
                run_name=options.run_name,
                debug=self.debug.ticket,
            ),
            KernelDestination(options.experiment, user, notebook),
            user,
            defaults=options.defaults(),
            notebook=notebook,
            # The idle timeout with the job: the GPU panel says when an idle session stops.
            tags={"air.session": "true", IDLE_TIMEOUT_TAG: f"{idle_timeout_min * 60:g}"},
            watch_pid=os.getpid(),
        )
        try:
            # A server that is down: said in seconds (the session's own run is made here
            # and now; --tracking deferred is for its cells).
            started = service.start(request)
        except Refused as err:
            raise option_error(err) from None
        # the server answered: the session's run was made here, whether or not it defers
        assert isinstance(started.target, RunTarget)
        assert started.run_id is not None
        self.target = started.target
        spec = started.job.spec
        self.nnodes, self.backend = options.nnodes, backends.get(spec.backend.name)
        #: Cells run while the server does not answer, their runs made later.
        self.deferred = spec.tracking.deferred
        self.store = service.store
        host = started.kernel_host  # where the nodes reach the kernel; None: here
        self.job_id, self.run_id, self.run_name = (
            started.job.id,
            started.run_id,
            started.run_name,
        )
        self.client = MlflowClient(self.target.tracking_uri)
        self._tail = ThreadPoolExecutor(max_workers=1, thread_name_prefix="air-session-runs")
        # The next cell's run is made on a thread of its own: a cell right after another
        # waits for that run only, never behind the last cell's MLflow ending.
        self._ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix="air-session-next")
        self._next_run: Future[str] | None = None
        #: Every request for a run made ahead, answered or not.
        self._asked: list[Future[str]] = []
        #: The runs given to cells: of the runs tagged as made ahead, the only ones kept.
        self._cell_runs: set[str] = set()
        self._last_ended: float | None = None  # when the session's last cell ended
        self.session = Session(
            self.store,
            self.job_id,
            spec.compute.world_size,
            idle_timeout_min * 60 or None,
            self._parent_ended,
            host,
        )
        # a session is one attempt: no look in the store for a retry at each poll
        self._follower = LogFollower(
            self.store, self.job_id, LogFilter(progress=True), retries=False
        )
        try:
            self.session.wait_ready(START_WAIT)
        except KeyboardInterrupt:
            self.session.stop("interrupted while starting")
            raise
        announce_grants(self.store, started.job, submission.grants)
        self._ask_ahead()

    def restarted(self) -> WarmSession:
        """A new session with this one's options, once this one is stopped (if it still
        runs); the names on its ranks are gone, as after a kernel restart."""
        self.stop("restarted by %air_session restart")
        return WarmSession(self.options, self.idle_timeout_min)

    def links(self, run_id: str, cell: int | None = None) -> dict[str, str | None]:
        target = self.target
        return job_links(target.tracking_uri, target.experiment_id, run_id, self.job_id, cell)

    def run_cell(
        self,
        payload: bytes,
        source: str,
        output_ranks: str,
        user_ns: dict[str, Any] | None,
        title: str | None = None,
        debug_rank: int = 0,
    ) -> Any:
        """Run one cell or function (its pickled ``Payload``) on the warm ranks; rank 0's
        value (``--out`` names land in ``user_ns``). ``title`` names a function's call;
        ``debug_rank``: the rank whose ``breakpoint()`` stops in this cell."""
        self.session.check()
        try:
            self.debug.aim(debug_rank)
        except ValueError as err:
            raise OptionError(str(err)) from None
        number = self.session.cells + 1
        name = f"cell {number}" if title is None else f"{title} (cell {number})"
        tags = {"air.session_cell": str(number), "mlflow.runName": name}
        if (cell := cell_id()) is not None:
            tags["air.cell_id"] = cell
        run_id = self._cell_run(name)  # "": made once the server answers (deferred)
        if run_id:
            self._cell_runs.add(run_id)
        # a cell without its run journals apart, and has no live chart (none to read)
        attempt = AttemptDir(self.store.attempt_dir(self.job_id, 1))
        late = None if run_id else attempt.late_cell(number).make()
        self._follower.poll()  # what came between cells (nothing, usually) is not this cell's
        uri = None if late is not None else self.target.tracking_uri
        view = JobView(self.job_id, output_ranks, self.nnodes, tracking_uri=uri, cell=number)
        if late is None:
            view.header(name, self.links(run_id, number))
        else:
            view.header(name, {"run": None, "logs": logs_url(self.job_id, cell=number)})
        started = time.time()
        chart = [(1, run_id)]  # the chart's one "attempt": this cell's own run
        hints_of = attempt.path
        seen: dict[int, int] = {}
        # A cell shorter than this shows its final status only: none on the critical path.
        status_at = time.monotonic()
        named = False

        def name_run() -> None:
            """The run gets its name once the cell has run a while, or after its end: a
            write to the tracking store would hold the read of the cell's chart at its end."""
            nonlocal named
            if not named and late is None:
                named = True
                self._tail.submit(self._name_run, run_id, tags)

        def tick() -> None:
            nonlocal status_at
            self._show(view, seen)
            self.debug.serve(self._prompt)  # a rank's pdb, if one stopped
            if time.monotonic() - status_at > STATUS_EVERY:
                name_run()
                hints = read_hints(hints_of)
                view.chart(chart, hints["gpus"])  # first: a widget view, if any, shows the status
                view.status(AttemptStatus.RUNNING, 1, 1, hints=hints["hints"])
                status_at = time.monotonic()

        status = AttemptStatus.FAILED
        files = self.session.files
        running = LatestCell(number, run_id, started, previous_ended=self._last_ended)
        session_cells.set_latest(files, running)
        try:
            journal = None if late is None else str(late.metrics_journal)
            self.session.send_cell(payload, run_id, journal)
            complete = self._collect(tick)
            replies = complete or self.session.replies()
            self._drain(view, seen, {r: reply.get("lines", 0) for r, reply in replies.items()})
            failed = sorted(r for r, reply in replies.items() if not reply["ok"])
            # the first rank that raised, not one interrupted because of it
            raised = [r for r in failed if not replies[r]["interrupted"]]
            ended = "" if complete is not None else self._end_stuck(name, raised)
            if raised:
                rank = raised[0]
                raise JobFailed(
                    f"{name} failed on rank {rank}; " + (ended or "the session and its names stay"),
                    replies[rank]["error"],
                    view.showed_all_of(rank),
                )
            if failed or ended:
                status = AttemptStatus.CANCELLED
                raise Interrupted(
                    f"interrupted; {ended or f'the session (job {self.job_id}) is still up'}"
                )
            status = AttemptStatus.SUCCEEDED
            result = replies[0]["result"]
            return take_value(cloudpickle.loads(result) if result else None, user_ns)
        except SessionEnded as err:
            self._show(view, seen)
            raise JobFailed(f"the session ended: {err}; {RESTART}") from None
        finally:
            notebook_cell = tags.get("air.cell_id")
            # Marked closing before its end's time is taken: a sample the supervisor then
            # reads the cell as running for is surely inside it (``LatestCell.closing``).
            session_cells.set_latest(files, dataclasses.replace(running, closing=True))
            finished = self._last_ended = time.time()
            session_cells.set_latest(files, dataclasses.replace(running, ended=finished))
            hints = read_hints(hints_of)
            # The points taken by its end, as a fresh job's chart: the sample the
            # supervisor takes for a cell that ended with none is its run's, not its view's.
            view.settle(chart, hints["gpus"], finished)
            view.status(status, 1, 1, view.elided_note() or "", hints["hints"])
            view.finish(chart, hints["gpus"])
            record = CellRecord(number, run_id, notebook_cell, started, finished, status)
            if self.session.ended is None:  # first: the next cell may come at once
                self._ask_ahead()
            if late is None:
                self._tail.submit(self._end_cell, record, source, tags)  # named as it ends
            else:
                self._tail.submit(self._end_late_cell, record, late, source, tags)

    def _collect(self, tick: Any) -> dict[int, dict[str, Any]] | None:
        """Every rank's reply, or None when some stayed stuck in the cell."""
        try:
            return self.session.collect(tick)
        except KeyboardInterrupt:
            self.session.interrupt()
            return self.session.collect(tick, interrupted=True)

    def _end_stuck(self, name: str, raised: list[int]) -> str:
        """End the session whose ranks stay in the cell after an interrupt; what to say."""
        stuck = ", ".join(map(str, self.session.in_cell()))
        wait = f"{session_host.LEAVE_WAIT:g} s"
        if raised:
            why = (
                f"rank {stuck} still in {name} {wait} after rank {raised[0]} failed it (in a "
                "collective waiting for that rank?): the process group cannot be used again"
            )
        else:
            why = f"rank {stuck} still in {name} {wait} after an interrupt"
        self.session.end_now(why)
        return f"the session ended: {why}; {RESTART}"

    def _show(self, view: JobView, seen: dict[int, int]) -> None:
        lines = self._follower.poll()
        for line in lines:
            if not line.progress:
                seen[line.rank] = seen.get(line.rank, 0) + 1
        view.show(1, lines)

    def _drain(self, view: JobView, seen: dict[int, int], written: dict[int, int]) -> None:
        """The lines each rank wrote before it answered, once the node agent logged them
        (or ``DRAIN`` seconds passed: those left show in the logs only)."""
        deadline = time.monotonic() + DRAIN
        while True:
            self._show(view, seen)
            if all(seen.get(r, 0) >= n for r, n in written.items()):
                return
            if time.monotonic() > deadline:
                return
            time.sleep(0.005)

    def _cell_run(self, name: str) -> str:
        """The cell's run: the one made ahead, else one made now; "" where the server does
        not answer in a deferred session (said in a line). A run made ahead that failed
        is dropped, and so is one still on its way after ``AHEAD_WAIT`` (deleted if it
        lands): nothing a failed request left is used. ``CellRefused`` in a session
        that is not deferred, within ``probe.TIMEOUT`` seconds."""
        if (ahead := self._next_run) is not None:
            try:
                made = ahead.result(AHEAD_WAIT)
            except FutureTimeout:
                ahead.add_done_callback(self._drop_run)
            except Exception:  # its server failed it: asked again below
                self._next_run = None
            else:
                self._next_run = None
                return made
            self._next_run = None
        uri = self.target.tracking_uri
        try:
            probe.check(uri, timeout=ASK_WAIT, deferrable=False)
            return self._new_run()
        except probe.Unreachable as err:
            why = str(err)
        except Exception as err:  # it answers, but did not make the run
            why = f"tracking: {redact(uri)} did not make the cell's run ({describe_error(err)})"
        if not self.deferred:
            raise CellRefused(why, self.job_id)
        print(
            f"{why}: {name} runs now; its run is made and filled once the server answers "
            f"(air get {self.job_id})",
            file=sys.stderr,
        )
        return ""

    def _ask_ahead(self) -> None:
        self._next_run = self._ahead.submit(self._new_run)
        self._asked.append(self._next_run)

    def _drop_run(self, ahead: Future[str]) -> None:
        """A run made ahead that came after its cell stopped waiting: deleted, never used."""
        if not ahead.cancelled() and ahead.exception() is None:
            with contextlib.suppress(Exception):
                self.client.delete_run(ahead.result())

    def _new_run(self) -> str:
        """The next cell's child run, made while no cell waits for it (a run costs tens
        of milliseconds); named and tagged when its cell has run."""
        tags = {"air.job_id": self.job_id, "air.session_cell": "next"}
        return str(
            self._runs.start_run(
                self.client, self.target.experiment_id, tags, "next cell", self.run_id
            )
        )

    def _name_run(self, run_id: str, tags: dict[str, str]) -> None:
        """The run made ahead becomes its cell's in MLflow's eyes: in one write, so that
        the cell's end, reading the run's metrics, seldom waits for a lock. A server that
        does not take it is not said here: the cell's end names the run too, and what of
        that end waits is said once."""
        from mlflow.entities import RunTag

        with contextlib.suppress(Exception):  # the cell runs on
            self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def _end_cell(self, record: CellRecord, source: str, tags: dict[str, str]) -> None:
        """The cell's points, name, source and end on its run, as the tail process does an
        attempt's; what the server does not take is kept pending, and that process tries
        it again until it lands (after this kernel is gone too)."""
        tail = run_tails.Tail(
            self.job_id,
            1,
            record.run_id,
            record.status,
            self.target.tracking_uri,
            str(self.store.attempt_dir(self.job_id, 1)),
            sample=False,
            parts=(Part.METRICS, Part.END),
            end_tags=tags,
            cell=record.cell,
            texts={CELL_SOURCE: source},
        )

        spool = self.store.home / "tails"
        run_tails.keep(spool, tail)  # first: this kernel may be gone before the end lands

        def finish() -> None:
            answer = run_tails.finish(lambda _: self.client, tail)
            run_tails.keep_pending(spool, tail, answer)
            if (error := answer.error()) is not None:
                run_tails.ensure_running(self.store.home)
                raise RuntimeError(error)

        end_in_time(finish, self.target.tracking_uri, self.job_id)
        session_cells.record(self.session.files, record)

    def _end_late_cell(
        self, record: CellRecord, late: AttemptDir, source: str, tags: dict[str, str]
    ) -> None:
        """A cell that ran without its run: the run is made, filled from the cell's own
        journal and ended by the user's tail process once the server answers, as a
        deferred job's (tried from here too, it could be made twice)."""
        target = self.target
        session = SessionRun(self.job_id, target.tracking_uri, target.experiment_id, self.run_id)
        tail = session_cells.late_tail(session, record, late, source, tags)
        run_tails.keep(self.store.home / "tails", tail)
        run_tails.ensure_running(self.store.home)
        session_cells.record(self.session.files, record)

    def _parent_ended(self, status: str) -> None:
        self._tail.submit(self._discard_runs_ahead)  # first: never seen ended, only gone
        self._tail.submit(self._runs.end_run, self.client, self.run_id, status)

    def _discard_runs_ahead(self) -> None:
        """The runs made for a cell that never came, deleted: the one waiting for the next
        cell, and any whose request failed on its way back though the server had made it
        (a proxy that cut the answer, a timeout after the write), which no answer names.
        Found by their tag once every request made ahead is over; a run a cell used is
        kept (its name may wait, with its end, for the server)."""
        wait(self._asked)
        ahead = f"tags.mlflow.parentRunId = '{self.run_id}' and tags.`air.session_cell` = 'next'"
        with contextlib.suppress(Exception):  # the server is gone: its runs stay for it
            experiment = [self.target.experiment_id]
            for run in self.client.search_runs(experiment, ahead, max_results=1000):
                if run.info.run_id not in self._cell_runs:
                    self.client.delete_run(run.info.run_id)

    def stop(self, reason: str = "stopped by %air_session stop") -> None:
        self.debug.close()
        self.session.stop(reason)
        self._ahead.shutdown(wait=True)
        self._tail.shutdown(wait=True)


def _close_ended_watcher(before: WarmSession | None) -> None:
    """The debugger of the kernel's session before, once it has ended (a running one
    stays the kernel's)."""
    if before is not None and before.session.ended is not None:
        before.debug.close()
