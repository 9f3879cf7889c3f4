"""The per-user scheduler: ``python -m jupyter_air.schedules.scheduler`` (``air scheduler``).

Detached like a job's supervisor (a session of its own, no terminal), so that neither
a stopped Jupyter server nor a closed shell stops a schedule. One per AIR_HOME: it
holds ``scheduler.lock`` (flock) while it lives and writes its pid and start time to
``scheduler.json`` (a reused pid is not taken for it). It sleeps until the next due
time, or until a change wakes it (SIGUSR1), ticks, and sleeps again: no CPU between
fires (the sleep is a ``select`` on a pipe that signals write to, see ``Wakeup``);
while runs are active it looks at their jobs every ``POLL_ACTIVE`` seconds. It
imports no MLflow and no torch (the jobs' supervisors do that). With no schedule and
no active run left it exits, and at its next look once its store was deleted;
``ensure_scheduler`` starts it again when one exists.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

from ..jobs.env import job_free_env
from ..jobs.store import JobStore
from ..paths import private_opener, write_private
from ..procs import alive
from ..wakeup import Wakeup
from .store import ScheduleStore

log = logging.getLogger("jupyter_air.scheduler")

RECORD = "scheduler.json"
LOCK = "scheduler.lock"
LOG = "scheduler.log"
#: Seconds between two looks at the active runs' jobs (a chain's next task starts then).
POLL_ACTIVE = 0.5
#: The longest sleep: schedules made on another machine sharing the store are seen then.
MAX_SLEEP = 300.0
#: How long a new scheduler waits for the lock of one that is exiting.
LOCK_WAIT = 10.0


@dataclass(frozen=True)
class SchedulerInfo:
    """A running scheduler: its pid, start time (Unix seconds) and log file."""

    pid: int
    started: float
    log: Path

    def to_json(self) -> dict[str, object]:
        return {"pid": self.pid, "started": self.started, "log": str(self.log)}


def running(home: Path) -> SchedulerInfo | None:
    """The scheduler of this AIR_HOME, if one runs."""
    try:
        doc = json.loads((home / RECORD).read_text())
        pid, started = int(doc["pid"]), float(doc["started"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not alive(pid, started_by=started):
        return None
    return SchedulerInfo(pid, started, home / LOG)


def ensure_scheduler(jobs: JobStore, wait: float = 10.0) -> SchedulerInfo | None:
    """Start the scheduler of ``jobs``'s AIR_HOME if a schedule exists and none runs;
    wake the running one (it re-reads what is due). None when there is no schedule."""
    home = jobs.home
    info = running(home)
    if info is not None:
        wake(home)
        return info
    if ScheduleStore(jobs).count() == 0:
        return None
    with open(home / LOG, "ab", opener=private_opener) as out:
        subprocess.Popen(
            [sys.executable, "-m", "jupyter_air.schedules.scheduler"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**job_free_env(os.environ), "AIR_HOME": str(home)},
        )
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        info = running(home)
        if info is not None:
            return info
        time.sleep(0.05)
    raise RuntimeError(f"the scheduler did not start: see {home / LOG}")


def wake(home: Path) -> bool:
    """Ask the running scheduler to tick now (after a change); False if none runs."""
    info = running(home)
    if info is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(info.pid, signal.SIGUSR1)
    return True


def stop(home: Path, wait: float = 10.0) -> SchedulerInfo | None:
    """Stop the running scheduler (its jobs go on); the one stopped, or None."""
    info = running(home)
    if info is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while alive(info.pid, started_by=info.started) and time.monotonic() < deadline:
        time.sleep(0.05)
    return info


class Scheduler:
    """The loop: tick, sleep until the next due time or a wake-up, until stopped."""

    def __init__(self, jobs: JobStore) -> None:
        from .launch import Launcher
        from .tick import this_process

        self.jobs = jobs
        self.store = ScheduleStore(jobs)
        self.launch = Launcher(jobs)
        self.claimer = this_process()
        self.stopping = False

    def run(self, wakeup: Wakeup) -> None:
        from .notices import post_runs
        from .tick import tick

        while not self.stopping:
            now = time.time()
            try:
                result = tick(self.store, self.launch, now, self.claimer)
                for run_id in result.started:
                    log.info("fired schedule run %s", run_id)
                post_runs(self.store, result.ended + result.skipped)
            except Exception:  # a locked or broken store: try again soon, stay up
                if not self.jobs.path.is_file():  # deleted: no schedule is left to fire
                    log.info("the store %s is gone: exiting", self.jobs.path)
                    return
                log.exception("tick failed")
                wakeup.sleep(5.0)
                continue
            active = bool(self.store.active_runs())
            if not active and self.store.count() == 0 and self._exit_when_idle():
                return
            if not self.stopping:
                wakeup.sleep(self._sleep(time.time(), active))

    def _sleep(self, now: float, active: bool) -> float:
        due = self.store.next_due()
        seconds = MAX_SLEEP if due is None else max(0.0, due - now)
        return min(seconds, POLL_ACTIVE) if active else min(seconds, MAX_SLEEP)

    def _exit_when_idle(self) -> bool:
        """Exit with nothing to do: the record goes first, then a last look, so that a
        schedule made meanwhile either sees no scheduler (and starts one, which waits
        for this one's lock) or is seen here."""
        (self.jobs.home / RECORD).unlink(missing_ok=True)
        if self.store.count() == 0:
            log.info("no schedule left: exiting")
            return True
        write_record(self.jobs.home)
        return False

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """Only a flag: the signal itself ends the sleep (``Wakeup``)."""
        if signum != signal.SIGUSR1:
            self.stopping = True


def write_record(home: Path) -> None:
    import psutil

    doc = {"pid": os.getpid(), "started": psutil.Process().create_time()}
    tmp = home / f"{RECORD}.{os.getpid()}.tmp"
    write_private(tmp, json.dumps(doc))
    os.replace(tmp, home / RECORD)


def _lock(home: Path) -> IO[str] | None:
    """This AIR_HOME's scheduler lock, held; None if another scheduler keeps it."""
    handle = open(home / LOCK, "a", opener=private_opener)  # noqa: SIM115 - held for life
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if running(home) is not None or time.monotonic() > deadline:
                handle.close()
                return None
            time.sleep(0.1)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    jobs = JobStore()
    lock = _lock(jobs.home)
    if lock is None:
        log.info("another scheduler runs for %s", jobs.home)
        return 0
    scheduler = Scheduler(jobs)
    wakeup = Wakeup()
    for signum in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, scheduler.on_signal)
    write_record(jobs.home)
    log.info("scheduler %s started for %s", os.getpid(), jobs.home)
    try:
        scheduler.run(wakeup)
    finally:
        if (info := running(jobs.home)) is not None and info.pid == os.getpid():
            (jobs.home / RECORD).unlink(missing_ok=True)
        lock.close()
        wakeup.close()
    log.info("scheduler %s stopped", os.getpid())
    return 0


if __name__ == "__main__":
    sys.exit(main())
