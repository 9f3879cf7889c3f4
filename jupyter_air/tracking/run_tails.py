"""The MLflow side of jobs, done by one process per user that keeps MLflow loaded.

``import mlflow`` costs about 2 s of CPU and 200 MB. Paid by each supervisor, it delayed
every job's ranks (they need their run's id) and left each finished job's process
competing with the next one's ranks. So this process does both ends of an attempt's run
for the supervisors:

- **a new run** (and the experiment first, for a job submitted by name only): asked
  for before the ranks start, answered first, beside any tail under way. The submitting
  side wakes the process, so that its import overlaps the supervisor's start. A
  supervisor that gets no answer (no process could start, it died, it is too slow)
  makes the run itself; an MLflow error is the answer, and fails the job with its cause.
- **a live attempt** while its ranks run (``Live``): its metrics journal shipped to its
  run every ``SHIP_INTERVAL`` seconds, and the run put back to running if a rank's
  ``with mlflow.start_run(run_id=...)`` ended it, until its supervisor takes it back as
  the ranks have all exited (before anyone is told). So no supervisor imports MLflow.
- **a run's tail** once the ranks have exited: what is left of rank 0's metrics journal
  (``journal``), its last system-metrics sample, its end, and the ranks' logs as
  artifacts, one at a time, in order; a kernel's early end of its cell's run (its
  journal and its end, as the cell returns); and a warm session's cell's end that its
  kernel could not deliver (kept pending by the kernel).

Who can reach it: requests are files in ``AIR_HOME/tails/`` (private to the user, 0700,
each file 0600, like every file of the store) and it listens on nothing; a request that
is not a plain file of this user is refused unanswered. A request is claimed (renamed)
before it is done, so a supervisor that gave up waiting withdraws only one nobody took.
The sender wakes the process through a named pipe there (``WAKE``, 0600): it sleeps
otherwise, looking every ``TICK`` seconds while it follows or delivers, ``IDLE_TICK`` idle.
How long it lives: it holds a lock on ``tails/.lock`` while it runs and exits
``IDLE_EXIT`` seconds after its last request and live attempt, or at its next look once the
store is gone. Live attempts are files in ``tails/live/``, followed while their
supervisor runs.
``python -m jupyter_air.tracking.run_tails HOME [TRACKING_URI]``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import fcntl
import json
import logging
import os
import select
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..job_dir import STACKS, STACKS_INDEX, AttemptDir
from ..logs.capture import plain_lines
from ..paths import private_dir, write_private
from ..procs import alive
from . import backlog, journal
from .backlog import Part
from .targets import bound_requests, quiet_retries

log = logging.getLogger("jupyter_air.run_tails")

#: Seconds the process waits for another request before it exits: a job submitted
#: within five minutes of the last finds MLflow loaded, and its run is made at once (a
#: process started for it costs the job 2.6 s, MLflow's import and store, before its
#: ranks can start). It holds about 230 MB meanwhile, and looks every ``IDLE_TICK``.
IDLE_EXIT = 300.0
#: Seconds between two looks for an answer.
POLL = 0.02
#: Seconds between two looks of the process when nothing wakes it (a request wakes it at
#: once, through the ``WAKE`` pipe): its live attempts, retries and idle exit.
TICK = 0.25
#: Seconds between two looks while nothing is live, taken or waiting for its server (a
#: request or a live attempt wakes the process at once).
IDLE_TICK = 5.0
#: A named pipe in the spool: a byte written there as a request is put in the spool
#: wakes the process, which otherwise sleeps (no wakeups while it follows a long job).
WAKE = "wake"
#: Seconds between two shipments of a live attempt's journal, and between two looks at
#: its run's status (a rank's ``with mlflow.start_run`` ends it).
SHIP_INTERVAL = 1.0
REOPEN_INTERVAL = 10.0
#: Seconds a supervisor waits for its tail's answer (a large log takes a while).
ANSWER_TIMEOUT = 600.0
#: Seconds a supervisor waits for its new run's request to be taken (a process starting
#: under load imports MLflow first) before it makes the run itself.
RUN_TAKE_TIMEOUT = 30.0
#: Seconds it waits for the run once taken (MLflow's store may be busy a while).
RUN_ANSWER_TIMEOUT = 120.0
LOCK = ".lock"
#: Seconds before the first retry of a pending tail, and the most between two.
RETRY_FIRST = 5.0
RETRY_MAX = 20.0


class Kind(enum.StrEnum):
    """What a request asks for; its file's name begins with it."""

    RUN = "run"
    TAIL = "tail"


@dataclass(frozen=True)
class NewRun:
    """A run to make for an attempt, in the experiment of that id or, without one, in
    the experiment of that name (made with that artifact location if missing)."""

    job_id: str
    attempt: int
    tracking_uri: str
    experiment_id: str | None
    experiment_name: str | None
    artifact_location: str | None
    tags: dict[str, str]
    run_name: str | None
    parent_run_id: str | None
    #: The job's grants, (grantee, level, group), to mirror on the experiment of a run
    #: made late by the tail process (a deferred attempt's: nobody else is left to).
    grants: tuple[tuple[str, str, bool], ...] = ()
    #: Text artifacts logged on the run once made (a cell's code): path in the run -> text.
    texts: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{Kind.RUN}-{self.job_id}-{self.attempt}"


@dataclass(frozen=True)
class MadeRun:
    run_id: str
    experiment_id: str
    run_name: str = ""


@dataclass(frozen=True)
class Live:
    """An attempt whose ranks run, followed by the tail process (see the module)."""

    job_id: str
    attempt: int
    #: "": not made yet (``tracking: deferred``, its server down): nothing is shipped.
    run_id: str
    tracking_uri: str
    attempt_dir: str
    #: Its supervisor, and when it followed the attempt: one that died is followed no
    #: more (its pid reused by a later process does not count).
    pid: int
    since: float

    @property
    def name(self) -> str:
        return f"{self.job_id}-{self.attempt}"


def live_dir(spool: Path) -> Path:
    return spool / "live"


def follow(home: Path, live: Live) -> None:
    """The tail process follows ``live`` from now on (one is started if none runs); a
    second call replaces the first (its run made meanwhile)."""
    spool = private_dir(home / "tails")
    where = private_dir(live_dir(spool))
    tmp = where / f".{live.name}.tmp"
    write_private(tmp, json.dumps(asdict(live)))
    tmp.replace(where / f"{live.name}.json")
    ensure_running(home)
    wake(spool)  # an idle process ships it now, not at its next look


def is_followed(home: Path, live: Live) -> bool:
    """Whether ``live`` is still followed (not taken back)."""
    return (live_dir(home / "tails") / f"{live.name}.json").exists()


def unfollow(home: Path, job_id: str, attempt: int) -> None:
    """The attempt is over: the tail process ships nothing more of it, and never puts its
    run back to running (a shipment under way finishes first; its tail comes after)."""
    (live_dir(home / "tails") / f"{job_id}-{attempt}.json").unlink(missing_ok=True)


class NoAnswer(RuntimeError):
    """No tail process answered: none could start, the one that took the request died,
    or it was too slow."""


class RunNotMade(RuntimeError):
    """MLflow refused the new run (the error as the tail process saw it)."""


@dataclass(frozen=True)
class Tail:
    """What is left to do on one attempt's run once its ranks have exited, or on a warm
    session's cell's run once the cell has ended (``cell``)."""

    job_id: str
    attempt: int
    run_id: str
    status: str
    tracking_uri: str
    attempt_dir: str
    #: Take the run's last system-metrics sample here: the supervisor took none (a job
    #: shorter than the sampling interval).
    sample: bool
    #: What is left to do: all of it, or what a try before could not (``backlog.Part``).
    parts: tuple[str, ...] = tuple(Part)
    #: How to make the run when ``run_id`` is empty (a deferred attempt that ran without
    #: one): a ``NewRun``'s fields.
    new_run: dict[str, Any] | None = None
    #: Set on the run as it ends: how the attempt ended (``air.failure``, the cause of a
    #: rank's death), said where the run is read.
    end_tags: dict[str, str] = dataclasses.field(default_factory=dict)
    #: A warm session's cell, whose own run (``run_id``) is in the session's attempt;
    #: None: the attempt's run.
    cell: int | None = None
    #: Text artifacts logged on the run before its end: path in the run -> text.
    texts: dict[str, str] = dataclasses.field(default_factory=dict)
    #: Asked by a kernel as its cell returns, ahead of the supervisor's own tail, which
    #: stays the one kept pending if the server does not take it (``end_early``).
    early: bool = False

    @property
    def name(self) -> str:
        name = f"{Kind.TAIL}-{self.job_id}-{self.attempt}"
        name = name if self.cell is None else f"{name}-cell-{self.cell}"
        return f"{name}-early" if self.early else name


@dataclass(frozen=True)
class Answer:
    """What went wrong, if anything (the run and the job stay as they are)."""

    end_error: str | None = None
    logs_error: str | None = None
    #: Rank 0's metrics not shipped (they stay in the journal).
    metrics_error: str | None = None

    def error(self) -> str | None:
        """The first failure, if any."""
        return self.metrics_error or self.end_error or self.logs_error

    def left(self) -> set[Part]:
        """The parts that failed."""
        errors = {Part.END: self.end_error, Part.LOGS: self.logs_error}
        return {
            part for part, error in {**errors, Part.METRICS: self.metrics_error}.items() if error
        }


def make_run(home: Path, request: NewRun, take_timeout: float = RUN_TAKE_TIMEOUT) -> MadeRun:
    """The new run, made by the user's tail process (started if none runs). Raises
    ``NoAnswer`` (make it elsewhere) or ``RunNotMade`` (MLflow's error)."""
    done = _ask(home, request.name, _body(request), take_timeout, RUN_ANSWER_TIMEOUT)
    if done is None:
        raise NoAnswer("no answer from the tail process")
    if done.get("refused"):
        raise NoAnswer(f"the tail process refused the request: {done['refused']}")
    if done.get("error"):
        raise RunNotMade(done["error"])
    return MadeRun(done["run_id"], done["experiment_id"], done.get("run_name", ""))


def hand_over(home: Path, tail: Tail, timeout: float = ANSWER_TIMEOUT) -> Answer:
    """Ask the user's tail process to do ``tail`` (starting one if none runs), and wait
    for its answer. One that does not come, or a refusal, leaves ``tail`` kept pending,
    for the next process to do (one started later, or of a newer version)."""
    done = _ask(home, tail.name, _body(tail), timeout, timeout)
    if done is None or done.get("refused"):
        with contextlib.suppress(OSError):
            keep(home / "tails", dataclasses.replace(tail, sample=False))
    if done is None:
        return Answer("no answer from the tail process", "no answer from the tail process")
    if done.get("refused"):
        return Answer(done["refused"], done["refused"])
    return Answer(done.get("end_error"), done.get("logs_error"), done.get("metrics_error"))


def end_early(home: Path, tail: Tail, timeout: float) -> Answer | None:
    """A run's journal shipped and its end recorded now, by the tail process, for a
    kernel whose notebook never loaded MLflow, so that the run is whole as its cell
    returns (what the server did not take is in the attempt's backlog). Waited for
    ``timeout`` seconds at most: None if no answer came by then (a request not taken is
    withdrawn; the supervisor's own tail does the same, and keeps what is not taken)."""
    tail = dataclasses.replace(tail, early=True, sample=False, parts=(Part.METRICS, Part.END))
    done = _ask(home, tail.name, _body(tail), timeout, timeout)
    if done is None or done.get("refused"):
        return None
    return Answer(done.get("end_error"), done.get("logs_error"), done.get("metrics_error"))


def _ask(
    home: Path, name: str, body: dict[str, Any], take_timeout: float, answer_timeout: float
) -> dict[str, Any] | None:
    """Put a request in the spool and wait for its answer; None if none comes: nobody
    took the request within ``take_timeout`` (it is withdrawn), or the process that took
    it died or took longer than ``answer_timeout``."""
    spool = private_dir(home / "tails")
    request, answer = spool / f"{name}.json", spool / f"{name}.done"
    answer.unlink(missing_ok=True)
    tmp = spool / f".{name}.tmp"
    write_private(tmp, json.dumps(body))
    tmp.replace(request)
    ensure_running(home)
    wake(spool)
    start = checked = time.monotonic()
    while not answer.exists():
        now = time.monotonic()
        if now - checked > 1.0:
            checked = now
            if request.exists():
                ensure_running(home)  # it may have died with the request pending
            elif not serving(home) and not answer.exists() and not request.exists():
                return None  # taken by a process that died before answering (not given back)
        if request.exists() and now - start > take_timeout:
            with contextlib.suppress(FileNotFoundError):
                request.unlink()  # withdrawn: nobody took it, nobody will
                return None
        if now - start > answer_timeout:
            return None
        time.sleep(POLL)
    try:
        done: dict[str, Any] = json.loads(answer.read_text())
    finally:
        answer.unlink(missing_ok=True)
    return done


def wake(spool: Path) -> None:
    """Wake the process serving ``spool`` at once: a request is there. None reads the
    pipe (none serves, or one of an earlier version): it looks at its next tick."""
    try:
        fd = os.open(spool / WAKE, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, b"\0")
    except OSError:  # full: it wakes anyway
        pass
    finally:
        os.close(fd)


def _wake_pipe(spool: Path) -> int:
    """The spool's wake pipe, read by this process (made private if missing), opened for
    reading and writing: a pipe with no writer left would read as ready for ever."""
    with contextlib.suppress(FileExistsError):
        os.mkfifo(spool / WAKE, 0o600)
    fd = os.open(spool / WAKE, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW)
    st = os.fstat(fd)
    if not stat.S_ISFIFO(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        os.close(fd)
        raise NotYours(f"{spool / WAKE} is not a private pipe of this user")
    return fd


def serving(home: Path) -> bool:
    """Whether a tail process holds the store's lock."""
    try:
        fd = os.open(home / "tails" / LOCK, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing lets the lock go
    return False


def ensure_running(home: Path, tracking_uri: str | None = None) -> None:
    """Start the tail process unless one holds the lock. Requests are written first: a
    process leaving as this runs looks for them again once it has let the lock go. A
    process started with ``tracking_uri`` opens that store as it starts, ahead of the
    run it will be asked for."""
    spool = private_dir(home / "tails")
    fd = os.open(spool / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # one runs
    finally:
        os.close(fd)  # closing lets the lock go
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIR_JOB", "MLFLOW_RUN"))}
    # Its store locks under this home too, as the supervisors' do (``start_job``): a store
    # opened at a home of its own must not be set up by two processes at once.
    env["AIR_HOME"] = str(home)
    with open(spool / "tails.log", "ab", opener=_private) as out:
        subprocess.Popen(
            [sys.executable, "-m", "jupyter_air.tracking.run_tails", str(home)]
            + ([tracking_uri] if tracking_uri else []),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,  # a signal to the supervisor's group is not for it
            env=env,
            cwd="/",
        )


def _private(path: str | os.PathLike[str], flags: int) -> int:
    return os.open(path, flags, 0o600)


class Backoff:
    """When to try the pending tails again: at once, then after 5 s, doubling up to
    ``RETRY_MAX`` while something still waits."""

    def __init__(self) -> None:
        self._wait = 0.0
        self._at = time.monotonic()
        self.waiting = True  # until a look finds nothing due

    def due(self) -> bool:
        return time.monotonic() >= self._at

    def next(self, landed: bool) -> None:
        """``landed``: nothing was due this time."""
        self.waiting = not landed
        self._wait = RETRY_FIRST if landed else min(max(self._wait * 2, RETRY_FIRST), RETRY_MAX)
        self._at = time.monotonic() + self._wait


class TailProcess:
    """The loop of the process: new runs at once, in the loop's own thread; tails one at
    a time, in order, on a thread of their own, so that a large log being attached never
    delays the next job's ranks."""

    def __init__(self, home: Path) -> None:
        self.spool = home / "tails"
        self._clients: dict[str, Any] = {}
        self._clients_lock = threading.Lock()
        self._tails = ThreadPoolExecutor(max_workers=1, thread_name_prefix="air-run-tail")
        self._tail_work: list[Future[None]] = []
        self._retrying = False  # pending tails were due at the last look
        self._live: dict[str, Future[None]] = {}  # a live attempt's shipment queued
        self._live_looked = -float("inf")
        self._reopen_at: dict[str, float] = {}
        self._live_failing: dict[str, str] = {}  # the failure said once, per attempt
        self._wake = -1  # the wake pipe, once serving
        #: One per attempt seen (a few bytes each; the process leaves once idle).
        self._attempt_locks: dict[str, threading.Lock] = {}

    def serve(self, lock_fd: int) -> None:
        try:
            self._wake = _wake_pipe(self.spool)
        except (OSError, NotYours) as err:  # it looks every tick instead
            log.error("no wake pipe: %r", err)
            self._wake = -1
        try:
            self._serve(lock_fd)
        finally:
            self._tails.shutdown(wait=True)
            if self._wake >= 0:
                os.close(self._wake)

    def _sleep(self, seconds: float) -> None:
        """Until a request wakes the process, or ``seconds``."""
        if self._wake < 0:
            time.sleep(min(seconds, TICK))
            return
        ready, _, _ = select.select([self._wake], [], [], seconds)
        if ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake, 4096):
                    pass
            self._live_looked = -float("inf")  # woken for a request or a new live attempt: look now

    def _serve(self, lock_fd: int) -> None:
        idle_since = time.monotonic()
        retry = Backoff()
        newer: set[str] = set()  # requests of a newer version, given back
        while self.spool.is_dir():
            pending = [p for p in self._pending() if p.name not in newer]
            if pending:
                try:
                    self._take(pending[0])
                except Newer as err:
                    log.warning("left to a newer jupyter_air: %s", err)
                    newer.add(pending[0].name)
                idle_since = time.monotonic()
                continue
            if self._follow_live():
                idle_since = time.monotonic()
            if newer and newer & {p.name for p in self._pending()} and not self._busy():
                # Done with its own: the lock goes to a process of the newer version,
                # which the sender of those requests starts (it looks every second).
                fcntl.flock(lock_fd, fcntl.LOCK_UN)
                return
            if self._busy():
                idle_since = time.monotonic()
            elif retry.due():
                retry.next(landed=not self.retry_pending())
            if retry.waiting:  # tails wait for their server: this process stays for them
                idle_since = time.monotonic()
            idle = time.monotonic() - idle_since  # since the last thing live, taken or waiting
            if idle < IDLE_EXIT:
                self._sleep(min(IDLE_TICK, IDLE_EXIT - idle) if idle > TICK else TICK)
                continue
            fcntl.flock(lock_fd, fcntl.LOCK_UN)
            if not self._pending():
                return
            try:  # a request came as this process was leaving
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another process took over
            idle_since = time.monotonic()

    def _follow_live(self) -> bool:
        """Every ``SHIP_INTERVAL`` seconds, a shipment queued for each live attempt that
        has none queued; whether any attempt is live."""
        if time.monotonic() - self._live_looked < SHIP_INTERVAL:
            return bool(self._live)
        self._live_looked = time.monotonic()
        found: set[str] = set()
        for path in live_dir(self.spool).glob("*.json"):
            try:
                live = Live(**_read_request(path))
            except (NotYours, OSError, ValueError, TypeError) as err:
                if path.name not in self._live_failing:
                    log.error("live attempt %s not followed: %r", path.name, err)
                self._live_failing[path.name] = repr(err)
                continue
            if not alive(live.pid, started_by=live.since):
                path.unlink(missing_ok=True)  # its supervisor died: its reaper ends it
                continue
            found.add(live.name)
            queued = self._live.get(live.name)
            if queued is None or queued.done():
                self._live[live.name] = self._tails.submit(self._ship_live, path, live)
        for name in set(self._live) - found:
            if self._live[name].done():
                del self._live[name]
                self._reopen_at.pop(name, None)
                self._live_failing.pop(name, None)
        return bool(found)

    def _attempt_lock(self, attempt_dir: str) -> threading.Lock:
        return self._attempt_locks.setdefault(attempt_dir, threading.Lock())  # atomic

    def _ship_live(self, path: Path, live: Live) -> None:
        """A live attempt's journal shipped and its run's status looked at, on the tail
        thread, under the attempt's lock: an early end (asked once the attempt was taken
        back) waits for a look under way, so the run it ends is never re-opened; one taken
        back meanwhile is left to its tail."""
        with self._attempt_lock(live.attempt_dir):
            if live.run_id and path.exists():
                self._ship_one(path, live)

    def _ship_one(self, path: Path, live: Live) -> None:
        files, uri = AttemptDir(Path(live.attempt_dir)), live.tracking_uri
        try:
            client = self._client(uri)
            if journal.waiting(files):
                with backlog.watched(files, uri, {Part.METRICS}):
                    journal.ship(client, files, live.run_id)
                backlog.landed(files, {Part.METRICS})
            if time.monotonic() >= self._reopen_at.get(live.name, 0.0):
                self._reopen_at[live.name] = time.monotonic() + REOPEN_INTERVAL
                if client.get_run(live.run_id).info.status != "RUNNING" and path.exists():
                    client.update_run(live.run_id, status="RUNNING")
            self._live_failing.pop(live.name, None)
        except Exception as err:  # kept in the journal, from its mark: tried again
            if self._live_failing.get(live.name) != repr(err):
                log.warning("attempt %s's metrics not shipped yet: %r", live.name, err)
            self._live_failing[live.name] = repr(err)
            with contextlib.suppress(OSError):
                backlog.failing(files, uri, err, {Part.METRICS})

    def _busy(self) -> bool:
        self._tail_work = [work for work in self._tail_work if not work.done()]
        return bool(self._tail_work)

    def _pending(self) -> list[Path]:
        """Requests in the order they are taken: new runs first, then oldest first."""
        found = []
        for path in self.spool.glob("*.json"):
            with contextlib.suppress(OSError):
                found.append((not path.name.startswith(f"{Kind.RUN}-"), path.stat().st_mtime, path))
        return [path for _, _, path in sorted(found)]

    def _take(self, request: Path) -> None:
        """Claim the request (its supervisor can no longer withdraw it), then do it."""
        taken = request.with_suffix(".taken")
        try:
            request.rename(taken)
        except FileNotFoundError:
            return  # withdrawn
        try:
            body = _read_request(taken)
            if request.name.startswith(f"{Kind.RUN}-"):
                self._answer(taken, self.make(NewRun(**_known(NewRun, body, taken, request))))
                return
            tail = Tail(**_known(Tail, body, taken, request))
            if tail.early:  # a cell waits for it: not behind the tails under way
                with self._attempt_lock(tail.attempt_dir):
                    self._do_tail(taken, tail)
            else:
                self._tail_work.append(self._tails.submit(self._do_tail, taken, tail))
        except NotYours as err:  # nobody of this user waits for it: no answer
            log.error("refused request %s: %s", request.name, err)
            taken.unlink(missing_ok=True)
        except (OSError, ValueError, TypeError) as err:  # its sender hears why
            log.error("unreadable request %s: %r", request.name, err)
            self._answer(taken, {"refused": repr(err)})

    def _do_tail(self, taken: Path, tail: Tail) -> None:
        self._answer(taken, asdict(self.finish(tail)))

    def _answer(self, taken: Path, answer: dict[str, Any]) -> None:
        tmp = taken.with_suffix(".tmp")
        write_private(tmp, json.dumps(answer))
        tmp.replace(taken.with_suffix(".done"))
        taken.unlink(missing_ok=True)

    def make(self, request: NewRun) -> dict[str, Any]:
        """The run (and its experiment first if only named): its id and its experiment's,
        or MLflow's error."""
        from . import runs

        try:
            client = self._client(request.tracking_uri)
            experiment_id = request.experiment_id
            if experiment_id is None:
                assert request.experiment_name is not None, "a new run needs an experiment"
                with runs.quiet_store_setup(request.tracking_uri):
                    experiment_id = runs.ensure_experiment(
                        client, request.experiment_name, request.artifact_location
                    )
            run_id = runs.start_run(
                client, experiment_id, request.tags, request.run_name, request.parent_run_id
            )
            for path, text in request.texts.items():
                client.log_text(run_id, text, path)
            run_name = str(client.get_run(run_id).info.run_name)
        except Exception as err:
            return {"error": repr(err)}
        return asdict(MadeRun(run_id, experiment_id, run_name))

    def finish(self, tail: Tail) -> Answer:
        """The tail's parts (see ``finish``), with this process's clients; what could not
        be done is kept in the pending spool and tried again (``retry_pending``)."""
        answer = finish(self._client, tail)
        if not tail.early:  # an early one's parts are the supervisor's tail's too
            with contextlib.suppress(OSError):
                keep_pending(self.spool, tail, answer)
        return answer

    def _retry(self, tail: Tail) -> None:
        self.finish(tail)

    def retry_pending(self) -> bool:
        """Try again the pending tails the server refused for a passing reason, one at a
        time on the tail thread; whether any was due."""
        due = [t for t in pending(self.spool) if not _permanent(t)]
        if bool(due) != self._retrying:  # said once an outage, not at each try
            self._retrying = bool(due)
            if due:
                log.warning(
                    "%d tail(s) kept pending: tried again every %g s at most till taken",
                    len(due),
                    RETRY_MAX,
                )
            else:
                log.info("every tail kept pending has landed")
        for tail in due:
            self._tail_work.append(self._tails.submit(self._retry, tail))
        return bool(due)

    def open_store(self, tracking_uri: str) -> None:
        """MLflow loaded and this store opened now: a submission starts the process
        ahead of the first request it will get, a new run that a job's ranks wait for."""
        from . import runs  # noqa: F401  (imported here, not on the first run)

        self._client(tracking_uri)

    def _client(self, tracking_uri: str) -> Any:
        """One client per tracking store, shared by both threads; made (and a new sqlite
        store migrated) under the store's lock, as a kernel may be making it too."""
        with self._clients_lock:
            if tracking_uri not in self._clients:
                from mlflow import MlflowClient

                from .runs import quiet_store_setup

                with quiet_store_setup(tracking_uri):
                    self._clients[tracking_uri] = MlflowClient(tracking_uri)
            return self._clients[tracking_uri]


def finish(client_for: Callable[[str], Any], tail: Tail) -> Answer:
    """The journal's rest, the last sample, the run's end (its end tags and ``texts``
    first), then the logs, each that is left (``tail.parts``): a failure is noted, and
    recorded in the backlog (the attempt's, what its status line says; or the cell's),
    never raised. ``client_for`` gives a tracking URI's ``MlflowClient``."""
    from . import runs

    files = _files(tail)
    errors: dict[Part, BaseException] = {}
    parts = {Part(p) for p in tail.parts}
    if tail.sample:
        _last_sample(files, tail.run_id or journal.ATTEMPT_RUN)
    uri = tail.tracking_uri
    if not tail.run_id:  # a deferred attempt whose server never answered while it ran
        try:
            with backlog.watched(files, uri, {Part.RUN}):
                tail = dataclasses.replace(tail, run_id=_make_late_run(client_for, tail))
            parts.add(Part.RUN)
        except Exception as err:
            backlog.failing(files, uri, err, {Part.RUN, *parts})
            return Answer(repr(err), repr(err), repr(err))
    if Part.METRICS in parts:
        try:
            with backlog.watched(files, uri, {Part.METRICS}):
                # A cell's lines name its run, but those of a cell run before its run was
                # made are in a journal of its own (``AttemptDir.late_cell``), for it.
                own = tail.cell is None or tail.new_run is not None
                attempt_run = tail.run_id if own else None
                journal.ship(client_for(uri), files, attempt_run)
        except Exception as err:  # kept in the journal, from its mark
            errors[Part.METRICS] = err
    if Part.END in parts:
        try:
            with backlog.watched(files, uri, {Part.END}):
                client = client_for(uri)
                if tail.end_tags:
                    from mlflow.entities import RunTag

                    tags = [RunTag(k, v) for k, v in tail.end_tags.items()]
                    client.log_batch(tail.run_id, tags=tags)
                for path, text in tail.texts.items():
                    client.log_text(tail.run_id, text, path)
                runs.end_run(client, tail.run_id, tail.status)
        except Exception as err:
            errors[Part.END] = err
    if Part.LOGS in parts:
        try:
            with backlog.watched(files, uri, {Part.LOGS}):
                attach_logs(client_for(uri), tail.run_id, files.path)
        except Exception as err:
            errors[Part.LOGS] = err
            with contextlib.suppress(Exception):  # said on the run, where the server takes it
                client_for(tail.tracking_uri).set_tag(
                    tail.run_id, "air.logs", f"not attached: {err!r}"[:500]
                )
    with contextlib.suppress(OSError):  # the attempt's directory was removed
        backlog.landed(files, parts - set(errors))
        for part, failure in errors.items():
            backlog.failing(files, tail.tracking_uri, failure, {part})
    said = {part: repr(failure) for part, failure in errors.items()}
    return Answer(said.get(Part.END), said.get(Part.LOGS), said.get(Part.METRICS))


def _make_late_run(client_for: Callable[[str], Any], tail: Tail) -> str:
    """The run of an attempt that ran without one (``tracking: deferred``), made now from
    its recipe, as its supervisor would have, and written beside the attempt (the job
    store adopts it); one made by an earlier try is the one."""
    from . import runs

    files = AttemptDir(Path(tail.attempt_dir))
    if made := files.read_late_run():
        return made[0]
    if tail.new_run is None:
        raise ValueError("a tail without a run nor how to make one")
    request = NewRun(**tail.new_run)
    client = client_for(request.tracking_uri)
    experiment_id = request.experiment_id
    if experiment_id is None:
        assert request.experiment_name is not None, "a new run needs an experiment"
        experiment_id = runs.ensure_experiment(
            client, request.experiment_name, request.artifact_location
        )
    run_id = str(
        runs.start_run(client, experiment_id, request.tags, request.run_name, request.parent_run_id)
    )
    files.write_late_run(run_id, experiment_id)
    if request.grants:
        _mirror_late(request, experiment_id)
    return run_id


def _mirror_late(request: NewRun, experiment_id: str) -> None:
    """The job's grants on the experiment of its late run, none lowered (this process
    does not know what the experiment's other jobs grant); the job grants stand anyway."""
    from .permissions import PermissionChange, mirror_grants

    changes = [PermissionChange(*grant) for grant in request.grants]
    try:
        report = mirror_grants(request.tracking_uri, experiment_id, changes, at_least=True)
    except Exception as err:
        log.warning(
            "job %s's grants not set on experiment %s: %r", request.job_id, experiment_id, err
        )
        return
    for line in report.lines():
        log.info("job %s: MLflow permissions: %s", request.job_id, line)


def pending_dir(spool: Path) -> Path:
    return spool / "pending"


def keep_pending(spool: Path, tail: Tail, answer: Answer) -> None:
    """What of ``tail`` failed, kept to be tried again (by this process while it runs,
    by the next one after a restart, by ``air sync``); gone once all of it is done."""
    left = answer.left()
    path = pending_dir(spool) / f"{tail.name}.json"
    if not left:
        path.unlink(missing_ok=True)
        return
    keep(spool, dataclasses.replace(tail, sample=False, parts=tuple(sorted(left))))


def regrant(spool: Path, job_id: str, grants: tuple[tuple[str, str, bool], ...]) -> None:
    """The job's grants as they are now, in its pending tails whose run is still to make
    (a grant given or revoked after the attempt ended counts when the run is made)."""
    for tail in pending(spool):
        if tail.job_id == job_id and tail.new_run is not None:
            keep(spool, dataclasses.replace(tail, new_run={**tail.new_run, "grants": grants}))


def keep(spool: Path, tail: Tail) -> None:
    """``tail`` kept pending as it is (one kept before under its name is replaced)."""
    path = pending_dir(spool) / f"{tail.name}.json"
    private_dir(pending_dir(spool))
    tmp = path.with_name(f".{path.name}.tmp")
    write_private(tmp, json.dumps(_body(tail)))
    tmp.replace(path)


def _body(request: Tail | NewRun) -> dict[str, Any]:
    """The request's fields, those at their defaults left out: a process of an earlier
    version, which lacks some of them, can still read a request that needs none."""
    body = asdict(request)
    if isinstance(request, Tail) and request.new_run is not None:
        body["new_run"] = _body(NewRun(**request.new_run))
    defaults: dict[str, Any] = {}
    for f in dataclasses.fields(request):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif callable(f.default_factory):
            defaults[f.name] = f.default_factory()
    return {k: v for k, v in body.items() if k not in defaults or v != defaults[k]}


def pending(spool: Path) -> list[Tail]:
    """The tails kept to be tried again, oldest first (one unreadable is left alone)."""
    found = []
    for path in sorted(pending_dir(spool).glob("*.json"), key=_mtime):
        try:
            body = _read_request(path)
            tail = Tail(**{**body, "parts": tuple(body.get("parts", tuple(Part)))})
        except (NotYours, OSError, ValueError, TypeError, KeyError) as err:
            log.error("pending tail %s not read: %r", path.name, err)
            continue
        if not Path(tail.attempt_dir).is_dir():  # the job was removed (retention, by hand)
            log.warning("pending tail %s dropped: its job's files are gone", path.name)
            path.unlink(missing_ok=True)
            continue
        found.append(tail)
    return found


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _files(tail: Tail) -> AttemptDir:
    """The tail's attempt, recording what waits in the attempt's backlog, or a session
    cell's own (a cell's run refused for good must not hold the session's end back)."""
    files = AttemptDir(Path(tail.attempt_dir))
    return files if tail.cell is None else files.for_cell(tail.cell)


def _permanent(tail: Tail) -> bool:
    """The tail's server refused it for good: only ``air sync`` tries again."""
    return backlog.refused_for_good(_files(tail))


def resume_pending(home: Path) -> None:
    """Start the tail process if tails wait to be tried again (after a restart of the
    machine, nothing else would): the server extension, a kernel, a supervisor, the
    scheduler and the CLI call this as they start."""
    with contextlib.suppress(OSError):
        if any(pending_dir(home / "tails").glob("*.json")):
            ensure_running(home)


class NotYours(Exception):
    """A request this user did not write (or could not have written alone)."""


class Newer(Exception):
    """A request with fields this version does not know: written by a newer jupyter_air
    (installed while this process ran), whose sender starts a process of its own once
    this one has let the lock go."""


def _known(kind: type[Any], body: dict[str, Any], taken: Path, request: Path) -> dict[str, Any]:
    """``body`` if this version knows all its fields; else the claimed request is given
    back (``Newer``)."""
    unknown = set(body) - {f.name for f in dataclasses.fields(kind)}
    if unknown:
        taken.rename(request)
        raise Newer(f"{request.name} has {', '.join(sorted(unknown))}")
    if kind is Tail and body.get("new_run"):
        _known(NewRun, body["new_run"], taken, request)
    return body


def _read_request(path: Path) -> dict[str, Any]:
    """A request's body, if it is a plain file of this user that nobody else may write
    (the spool is private; this is the check behind it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        raise NotYours(f"not a plain file: {err}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise NotYours(f"not a private file of this user (uid {st.st_uid})")
        body = json.loads(f.read())
    if not isinstance(body, dict):
        raise ValueError("not an object")
    return body


def _last_sample(files: AttemptDir, run_id: str) -> None:
    """One system-metrics sample of this machine into the run's journal (shipped next),
    as the supervisor's local node takes at its end, so even a short run has its
    figures."""
    from .system_metrics import last_sample

    try:
        last_sample(files, run_id)
    except Exception as err:  # the run's end still comes
        log.warning("last system-metrics sample of run %s not taken: %s", run_id, err)


def attach_logs(client: Any, run_id: str, attempt_dir: Path) -> None:
    """Each rank's output as plain text artifacts ``logs/node_N/rank_R.log``, so
    MLflow's own UI shows them; line by line, so a log of any size costs no memory."""
    files = AttemptDir(attempt_dir)
    with tempfile.TemporaryDirectory() as tmp:
        for log_file in files.rank_logs():
            target = Path(tmp) / log_file.path.relative_to(files.logs)
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("w", encoding="utf-8") as out:
                for text in plain_lines(log_file.path):
                    out.write(f"{text}\n")
        if any(Path(tmp).iterdir()):
            client.log_artifacts(run_id, tmp, artifact_path=files.logs.name)
    if files.checkpoints.is_file():  # the checkpoints it saved: path, step, layout
        client.log_artifact(run_id, str(files.checkpoints))
    # The ranks' stacks taken during the attempt (``jobs.node.stacks``), each set
    # with its ``stacks.json``, as ``stacks/<set>/rank_R.txt``.
    for taken in sorted((attempt_dir / STACKS).glob(f"*/{STACKS_INDEX}")):
        where = f"{STACKS}/{taken.parent.name}"
        client.log_artifacts(run_id, str(taken.parent), artifact_path=where)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    bound_requests()
    quiet_retries()
    home = Path(argv[0])
    spool = home / "tails"
    try:
        fd = os.open(spool / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (BlockingIOError, FileNotFoundError):
        return 0  # another one runs, or the store is gone
    process = TailProcess(home)
    if len(argv) > 1:
        try:
            process.open_store(argv[1])
        except Exception as err:  # its first request says so to its supervisor
            log.warning("tracking store %s not opened: %r", argv[1], err)
    process.serve(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
