"""Delivering what the outbox holds, now and later.

``send`` is what a poster calls: it records the notices, tries each new one at once
(the job's end reaches its owner in about a second) and, if any is left for later (a
mail server down), makes sure the courier runs. The courier is a small per-user process
(``python -m jupyter_air.notify.courier``), detached like the scheduler so that it
outlives the supervisor, the Jupyter server and the shell: it tries every due row when
its backoff allows, and exits when nothing is left to send (with the default tries, about
30 minutes after a receiver went down for good), or within ``LOOK`` seconds of its store
being deleted (nobody is left to tell, and no new empty store is made). One per AIR_HOME
(``courier.lock``, flock); the Jupyter server's housekeeping and every supervisor's
start call ``ensure_courier`` when rows wait, so a courier that died is replaced.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from ..paths import private_opener
from .delivery import Failed, deliver
from .outbox import Notice, Outbox, State
from .settings import AirNotify, load

log = logging.getLogger("jupyter_air.notify")

LOCK = "courier.lock"
LOG = "courier.log"
#: The longest the courier sleeps: rows posted by another machine sharing the store.
MAX_SLEEP = 60.0
#: Seconds between two looks, while it sleeps, at whether its store is still there.
LOOK = 1.0


def send(
    outbox: Outbox,
    notices: Sequence[Notice],
    settings: AirNotify | None = None,
    *,
    try_now: bool = True,
) -> list[int]:
    """Post the notices and (``try_now``) try the new ones once, here; the courier takes
    what is left. Never raises for a delivery: its failure is in the row."""
    if not notices:
        return []
    ids = outbox.post(notices)
    if any(n.target.channel.value != "jupyterlab" for n in notices):
        if try_now:
            try_due(outbox, settings or load(), ids)
        if outbox.next_due() is not None:
            ensure_courier(outbox.path.parent)
    return ids


def try_due(outbox: Outbox, settings: AirNotify, ids: Sequence[int] | None = None) -> int:
    """One try of each due row (of ``ids``, when given); how many were tried."""
    tried = 0
    while (record := outbox.claim(ids=ids)) is not None:
        tried += 1
        try:
            deliver(record.target, record.message, record.key, settings)
        except Failed as err:
            state = outbox.failed(
                record, str(err), permanent=err.permanent, max_tries=settings.max_tries
            )
            log.warning("%s (%s): %s", record.target.shown(), record.key, err)
            if state is State.FAILED:
                log.error("gave up: %s", record.target.shown())
            continue
        except Exception as err:  # a bug must not hold the row: it fails, and says why
            outbox.failed(record, repr(err), permanent=True, max_tries=settings.max_tries)
            log.exception("delivering %s", record.key)
            continue
        outbox.sent(record)
    return tried


def ensure_courier(home: Path) -> None:
    """Start the courier unless one runs for ``home``."""
    lock = _lock(home)
    if lock is None:
        return  # one runs; it sees the new rows at its next look (at most MAX_SLEEP)
    lock.close()
    env = {**os.environ, "AIR_HOME": str(home)}
    with open(home / LOG, "ab", opener=private_opener) as out:
        subprocess.Popen(
            [sys.executable, "-m", "jupyter_air.notify.courier"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            env=env,
            cwd="/",
        )


def run(home: Path, settings: AirNotify) -> None:
    """Try what is due, sleep until the next is, until nothing is left or the store is
    gone."""
    db = home / "jobs.db"
    outbox = Outbox(db)
    while db.is_file():
        try_due(outbox, settings)
        due = outbox.next_due()
        if due is None:
            return
        wake = time.monotonic() + min(MAX_SLEEP, max(0.2, due - time.time()))
        while db.is_file() and (left := wake - time.monotonic()) > 0:
            time.sleep(min(LOOK, left))


def _lock(home: Path) -> IO[str] | None:
    handle = open(home / LOCK, "a", opener=private_opener)  # noqa: SIM115 - held for life
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def main() -> int:
    from ..paths import air_home

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    home = air_home()
    lock = _lock(home)
    if lock is None:
        return 0
    log.info("courier %d started for %s", os.getpid(), home)
    with contextlib.closing(lock):
        run(home, load())
    if not (home / "jobs.db").is_file():
        log.info("courier %d: its store is gone", os.getpid())
        return 0
    log.info("courier %d: nothing left to send", os.getpid())
    if Outbox(home / "jobs.db").next_due() is not None:  # posted while it was exiting
        ensure_courier(home)
    return 0


if __name__ == "__main__":
    sys.exit(main())
