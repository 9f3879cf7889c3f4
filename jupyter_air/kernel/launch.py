"""One distributed call from the kernel: resolve MLflow, submit the job, follow it.

Shared by the magic and the decorator. Everything that can be refused (options,
names that cannot be pickled) is refused before a job, a run or a process exists.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import cloudpickle

from ..identity import Identity, mlflow_user, server_owner
from ..job_dir import AttemptDir
from ..jobs import cancel
from ..jobs.debugger import Watcher
from ..jobs.follow import LogFollower, StoreChanges
from ..jobs.permissions import Grant
from ..jobs.request import JobRequest, Program
from ..jobs.service import JobService, Refused
from ..jobs.spec import JobKind
from ..jobs.store import Job, JobStore
from ..jobs.workload_file import Submission
from ..logs.query import LogFilter
from ..redact import redact
from ..status import JobStatus, Outcome
from ..tracking import backlog, journal, run_tails
from ..tracking.backlog import describe as describe_error
from ..tracking.run_tails import Tail
from ..tracking.targets import RunTarget
from .capture import Payload
from .debug_prompt import CellPrompt
from .destination import KernelDestination
from .display import OPEN_RUN, JobView
from .options import OptionError, Options, option_error
from .session import cell_id, notebook_path

#: Seconds an interrupted job gets to stop all its ranks (SIGINT, SIGTERM, SIGKILL).
CANCEL_WAIT = 20.0
POLL = 0.1


class JobFailed(RuntimeError):
    """A distributed call failed; the message names the rank and carries its traceback."""

    def __init__(
        self, message: str, traceback_text: str | None = None, shown_above: bool = False
    ) -> None:
        super().__init__(message)
        self.traceback_text = traceback_text
        #: The failing rank's traceback already streamed into the cell: not said twice.
        self.shown_above = shown_above

    def _render_traceback_(self) -> list[str]:
        """IPython shows the failing rank's traceback once (from the user's code, see
        ``rank_main``), never the launcher's frames."""
        if self.traceback_text and self.shown_above:
            return [f"\x1b[31mJobFailed\x1b[0m: {self}; its traceback is above"]
        lines = [f"\x1b[31mJobFailed\x1b[0m: {self}"]
        if self.traceback_text:
            lines += ["", *self.traceback_text.rstrip("\n").splitlines()]
        return lines


class Interrupted(KeyboardInterrupt):
    """The user stopped a distributed call (the kernel's interrupt), and its job with it.

    Still a ``KeyboardInterrupt``, so that code around the call and Run All stop as for
    any interrupt; IPython shows it in one line, not the launcher's frames."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31mKeyboardInterrupt\x1b[0m: {self}"]


def kernel_service() -> JobService:
    """The jobs service as this kernel's owner: the user whose server runs it."""
    return JobService(JobStore(), Identity(server_owner()))


def cell_run_name() -> str:
    """A cell's run, named after its notebook and its cell: ``quickstart cell 3``. The
    notebook's stem, as its experiment is named (``/Users/<user>/quickstart``); the cell
    by its execution count, the ``[3]`` the editor shows beside it (the kernel is not told
    the cell's place in the notebook), which also tells two runs of one cell apart."""
    from IPython import get_ipython

    shell = get_ipython()
    cell = f"cell {shell.execution_count}" if shell is not None else "cell"
    notebook = notebook_path()
    return f"{Path(notebook).stem} {cell}" if notebook else cell


def run(
    payload: Payload,
    options: Options,
    submission: Submission,
    source: str,
    user_ns: dict[str, Any] | None,
    name: str,
) -> Any:
    """Run a payload as a job and return rank 0's value (None for a background job);
    ``submission`` is what ``options.validate()`` made of the options; ``name``: its
    run's name unless the options give one (MLflow's random names say nothing)."""
    service = kernel_service()
    # breakpoint() in a rank opens pdb here, in the cell, while it follows the job
    try:
        debug = None if options.background else Watcher(service.store.home, options.debug_rank)
    except ValueError as err:  # a rank that cannot be
        raise OptionError(str(err)) from None
    try:
        return _run(payload, options, submission, source, user_ns, name, service, debug)
    finally:
        if debug is not None:
            debug.close()


def _run(
    payload: Payload,
    options: Options,
    submission: Submission,
    source: str,
    user_ns: dict[str, Any] | None,
    name: str,
    service: JobService,
    debug: Watcher | None,
) -> Any:
    grants = submission.grants
    user, notebook = mlflow_user(), notebook_path()
    request = JobRequest(
        submission,
        Program(
            JobKind.PYTHON,
            payload=payload.dumps(),  # refuses unpicklable names before anything exists
            source=source,
            working_dir=os.getcwd(),
            output_ranks=options.output_ranks,
            outputs=options.out,
            timeout=options.timeout,
            background=options.background,
            run_name=options.run_name or name,
            debug=None if debug is None else debug.ticket,
        ),
        KernelDestination(options.experiment, user, notebook),
        user,
        defaults=options.defaults(),
        notebook=notebook,
        tags={"air.cell_id": cell} if (cell := cell_id()) else {},
        watch_pid=None if options.background else os.getpid(),
    )
    try:
        started = service.start(request)  # a server that is down: said in seconds
    except Refused as err:
        raise option_error(err) from None
    job, run_id, run_name, target = started.job, started.run_id, started.run_name, started.target
    store = service.store

    view = JobView(
        job.id,
        options.output_ranks,
        options.nnodes,
        tracking_uri=None if options.background else target.tracking_uri,
    )
    if isinstance(target, RunTarget) and run_id is not None:
        links = job_links(target.tracking_uri, target.experiment_id, run_id, job.id)
        view.header(run_name, links)
        announce_grants(store, job, grants)  # after the job started: a slow MLflow delays no rank
    else:  # deferred: its supervisor makes the run, and gives the grants, once it can
        view.header(None, {"run": None, "logs": job_links_logs(job.id)})
        print(
            f"{started.down}: the job runs now; its run is made and filled once the server "
            f"answers (air get {job.id})",
            file=sys.stderr,
        )
    max_attempts = options.max_retries + 1
    if debug is None:
        view.status("submitted in the background", 1, max_attempts, f"air logs {job.id}")
        return None

    def end_run(run: str, status: str) -> None:
        """The supervisor's tail process ends the run too, after the job; ending it now
        makes the run's status right, and its points all there (shipped from the journal
        first), the moment the cell returns: if its server takes them in time. Here if
        the notebook loaded MLflow, else by the tail process (no MLflow import for it)."""
        attempts = store.attempts(job.id)
        number = attempts[-1].attempt if attempts else 1
        files = AttemptDir(store.attempt_dir(job.id, number))

        def finish() -> None:
            if "mlflow" not in sys.modules:
                tail = Tail(
                    job.id, number, run, status, target.tracking_uri, str(files.path), False
                )
                answer = run_tails.end_early(store.home, tail, END_WAIT)
                if answer is None:
                    raise backlog.NoAnswerYet(f"no answer from the tail process in {END_WAIT:g} s")
                if error := answer.error():
                    raise Recorded(error)
                return
            from mlflow import MlflowClient

            from ..tracking import runs

            client = MlflowClient(target.tracking_uri)
            journal.ship(client, files, run)
            runs.end_run(client, run, status)

        def unsent(err: BaseException) -> None:
            """Recorded before the cell's last status is drawn, which reads it: the
            points wait (what else waits, the tail process records as it tries)."""
            if not isinstance(err, Recorded):
                backlog.failing(files, target.tracking_uri, err, {backlog.Part.METRICS})

        end_in_time(finish, target.tracking_uri, job.id, unsent)

    return _follow(store, job.id, view, max_attempts, user_ns, end_run, debug)


class Recorded(Exception):
    """What the tail process could not deliver at a cell's end, which it recorded in the
    attempt's backlog itself (the error as it saw it)."""


#: Seconds a cell's end waits for its tracking server to take the run's last points and
#: its end: the supervisor's tail process delivers them later if it does not.
END_WAIT = 5.0


def end_in_time(
    finish: Callable[[], None],
    tracking_uri: str,
    job_id: str,
    unsent: Callable[[BaseException], None] | None = None,
) -> None:
    """``finish()`` (MLflow calls at a cell's end), waited for ``END_WAIT`` seconds at
    most: a server that is down never holds the cell; what did not land is said, and
    given to ``unsent`` (the attempt's backlog, which the cell's last status reads)."""
    outcome: Future[None] = Future()

    def work() -> None:
        try:
            finish()
            outcome.set_result(None)
        except BaseException as err:
            outcome.set_exception(err)

    threading.Thread(target=work, name="air-run-end", daemon=True).start()
    try:
        outcome.result(END_WAIT)
        return
    except FutureTimeout:
        failure: BaseException = backlog.NoAnswerYet(f"no answer in {END_WAIT:g} s")
    except Exception as err:
        failure = err
    why = describe_error(failure)
    if unsent is not None:
        with contextlib.suppress(OSError):  # the cell's end is said all the same
            unsent(failure)
    print(
        f"tracking: {redact(tracking_uri)} did not take the run's end ({why}): it and its "
        f"points wait, and land when the server answers (air get {job_id})",
        file=sys.stderr,
    )


def job_links_logs(job_id: str) -> str | None:
    """The job's logs view, where a Jupyter server is known."""
    from ..tracking.ui_links import logs_url

    return logs_url(job_id)


def announce_grants(store: JobStore, job: Job, grants: tuple[Grant, ...]) -> None:
    """Give the job's grants on its MLflow experiment too, and say whom it is shared with."""
    if not grants:
        return
    from ..jobs.sharing import mirror

    report = mirror(store, job, grants)
    lines = [f"Shared: {', '.join(map(str, grants))}", *(report.lines() if report else [])]
    print("\n".join(lines))


def job_links(
    tracking_uri: str, experiment_id: str, run_id: str, job_id: str, cell: int | None = None
) -> dict[str, str | None]:
    """The run and its experiment in the MLflow UI, and the job's logs view in JupyterLab
    (the run's ``logs/`` artifacts when no Jupyter server is known). Where no UI is
    served (a kernel without a Jupyter server, as in VS Code), no link to nowhere: the
    command that opens the run instead, under ``OPEN_RUN``. ``cell``: a warm session's
    cell, which the logs view opens on."""
    from ..tracking.ui_links import experiment_url, logs_url, run_url, ui_base, ui_command

    base = ui_base(tracking_uri)
    run = run_url(base, experiment_id, run_id) if base else None
    artifacts = run_url(base, experiment_id, run_id, "artifacts") if base else None
    links: dict[str, str | None] = {
        "run": run,
        "experiment": experiment_url(base, experiment_id) if base else None,
        "logs": logs_url(job_id, cell=cell) or artifacts,
        # where the ranks are, from the logs view: none without a JupyterLab to show it
        "stacks": logs_url(job_id, stacks=True),
        "profile": logs_url(job_id, profile=True),  # its next steps, torch.profiler's
    }
    if run is None:
        links[OPEN_RUN] = ui_command(tracking_uri, experiment_id, run_id)
    return links


def _follow(
    store: JobStore,
    job_id: str,
    view: JobView,
    max_attempts: int,
    user_ns: dict[str, Any] | None,
    end_run: Callable[[str, str], None],
    debug: Watcher,
) -> Any:
    follower = LogFollower(store, job_id, LogFilter(progress=True))
    changes = StoreChanges(store.path)  # the job's row is read again only after a commit
    prompt = CellPrompt()
    last_status = 0.0
    try:
        while True:
            if changes.since_last_look():
                job = store.get(job_id)
            _show_new(view, follower)
            if job.done:
                break
            if time.monotonic() - last_status > 0.5:
                attempts = store.attempts(job_id)
                if len(attempts) > 1:
                    view.attempt_started(len(attempts), attempts[-2].message)
                hints = _hints(store, job_id, attempts)
                queued = job.message if job.status is JobStatus.PENDING else None
                view.status(
                    job.status, len(attempts) or 1, max_attempts, queued or "", hints["hints"]
                )
                view.chart(_runs(attempts), hints["gpus"])
                last_status = time.monotonic()
            debug.serve(prompt, POLL)  # a rank's pdb, if one stopped
    except KeyboardInterrupt:
        cancel.cancel(store, job_id)
        view.status("cancelling", len(store.attempts(job_id)) or 1, max_attempts)
        job = cancel.wait(store, job_id, CANCEL_WAIT)
        _end_last_run(store, job_id, job.status, end_run)
        _take_result(store, job_id, load=False)
        _show_new(view, follower)
        attempts = store.attempts(job_id)
        view.status(job.status, len(attempts) or 1, max_attempts, "interrupted")
        view.finish(_runs(attempts), _hints(store, job_id, attempts)["gpus"])
        if job.done:
            raise Interrupted(f"interrupted; job {job_id} cancelled, every rank stopped") from None
        raise Interrupted(f"interrupted; job {job_id} still stopping (air get {job_id})") from None
    attempts = store.attempts(job_id)
    ended = job.ended or time.time()
    view.settle(_runs(attempts), _hints(store, job_id, attempts)["gpus"], ended)
    _end_last_run(store, job_id, job.status, end_run)
    if len(attempts) > 1:
        view.attempt_started(len(attempts), attempts[-2].message)
    _show_new(view, follower)
    last = attempts[-1] if attempts else None
    note = view.elided_note()
    hints = _hints(store, job_id, attempts)  # the last ones raised stay said
    view.status(job.status, len(attempts), max_attempts, note or "", hints["hints"])
    view.finish(_runs(attempts), hints["gpus"])
    result = _take_result(store, job_id, load=job.status is JobStatus.SUCCEEDED)
    if job.status is not JobStatus.SUCCEEDED:
        raise _failure(store, job_id, job.status, last, view)
    return take_value(result, user_ns)


def _show_new(view: JobView, follower: LogFollower) -> None:
    """Everything the job's ranks wrote since the last call, attempt by attempt."""
    while True:
        attempt = follower.attempt
        view.show(attempt, follower.poll())
        if follower.attempt == attempt:
            return


def _runs(attempts: list[Any]) -> list[tuple[int, str]]:
    """Each attempt and its run (``ATTEMPT_RUN`` until a deferred one's is made: its
    journal's lines say so, and the chart reads them all the same)."""
    return [(a.attempt, a.run_id or journal.ATTEMPT_RUN) for a in attempts]


def _hints(store: JobStore, job_id: str, attempts: list[Any]) -> dict[str, Any]:
    """The last attempt's hints and GPUs, as its supervisor last wrote them, and the line
    on what waits for the tracking server, if anything does."""
    from ..jobs.documents import tracking_line
    from ..jobs.node.hints import read_hints

    hints = read_hints(store.attempt_dir(job_id, attempts[-1].attempt if attempts else 1))
    if waiting := tracking_line(store, store.get(job_id), attempts):
        hints["hints"] = [*hints["hints"], {"text": waiting}]
    return hints


def _end_last_run(
    store: JobStore, job_id: str, status: str, end_run: Callable[[str, str], None]
) -> None:
    attempts = store.attempts(job_id)
    if status in set(Outcome) and attempts and attempts[-1].run_id:
        end_run(attempts[-1].run_id, status)


def _failure(store: JobStore, job_id: str, status: str, last: Any, view: JobView) -> JobFailed:
    if last is None:
        return JobFailed(f"job {job_id} {status.lower()} before any rank started")
    where = f"attempt {last.attempt}"
    if last.failed_rank is not None:
        error = AttemptDir(store.attempt_dir(job_id, last.attempt)).error(last.failed_rank)
        text = error.read_text() if error.exists() else None
        shown = view.showed_all_of(last.failed_rank)
        return JobFailed(f"job {job_id}: {last.message} ({where})", text, shown)
    return JobFailed(
        f"job {job_id} {status.lower()}: {last.message or 'no reason given'} ({where})"
    )


def _take_result(store: JobStore, job_id: str, load: bool = True) -> dict[str, Any] | None:
    """Rank 0's values from the last attempt, read once: the file holds the notebook's
    data, so it goes as soon as it is read (the supervisor removes those nobody reads)."""
    attempts = store.attempts(job_id)
    path = AttemptDir(store.attempt_dir(job_id, attempts[-1].attempt if attempts else 1)).result
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    path.unlink(missing_ok=True)
    result: dict[str, Any] | None = cloudpickle.loads(data) if load else None
    return result


def take_value(result: dict[str, Any] | None, user_ns: dict[str, Any] | None) -> Any:
    if result is None:
        return None
    if result.get("unpicklable"):
        shown = ", ".join(f"{k} = {v}" for k, v in result["unpicklable"].items())
        print(f"rank 0's values could not be sent back ({result.get('why')}); their repr: {shown}")
    if user_ns is not None:
        user_ns.update(result["outputs"])
    return result["value"]
