"""A job's notifications, from its supervisor: its start, a retry, a hint, a duration
passed, its end. Each is posted to the outbox where it happens, under a key naming it
(a restarted supervisor posts nothing twice), then tried on a thread of its own, so no
rank and no record of the job's end waits for a mail server; what is not sent when the
supervisor exits (a receiver that does not answer) is the courier's (``notify.courier``).
The targets are read at each event: the owner may add one to a job that runs.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ...job_dir import AttemptDir
from ...notify import courier
from ...notify.message import duration
from ...notify.settings import AirNotify, load
from ...notify.targets import Channel, Event
from ...status import Outcome
from ...tracking import backlog
from ..notices import notices
from ..store import JobStore

log = logging.getLogger("jupyter_air.supervisor")

#: The notification of how an attempt, or the job, ended.
END_EVENT = {
    Outcome.SUCCEEDED: Event.SUCCESS,
    Outcome.FAILED: Event.FAILURE,
    Outcome.CANCELLED: Event.CANCELLED,
}
#: Seconds between two looks at the targets' ``duration`` thresholds.
DURATION_LOOK = 5.0


@dataclass(frozen=True)
class _Post:
    event: Event
    key: str
    after: float | None = None
    note: str | None = None
    lines: Sequence[str] | None = None


class JobNotifier:
    def __init__(self, store: JobStore, job_id: str) -> None:
        self._store = store
        self._job_id = job_id
        self._posted: queue.Queue[list[int] | None] = queue.Queue()
        self._over = threading.Event()
        self._settings: AirNotify | None = None
        self._thread = threading.Thread(target=self._deliver, name="air-notify", daemon=True)
        self._thread.start()

    def post(
        self,
        event: Event,
        key: str,
        *,
        after: float | None = None,
        note: str | None = None,
        lines: Sequence[str] | None = None,
    ) -> None:
        """Record the event's notices now (so none is lost if this process ends before
        they are sent); they are sent on the notifier's thread. Never raises."""
        try:
            job = self._store.get(self._job_id)
            found = notices(
                self._store, job, event, key, self.settings, after=after, note=note, lines=lines
            )
            ids = self._store.outbox.post(found) if found else []
        except Exception:  # a notification never fails the job
            log.exception("notification %s of job %s", key, self._job_id)
            return
        if any(n.target.channel is not Channel.JUPYTERLAB for n in found):
            self._posted.put(ids)

    def settings(self) -> AirNotify:
        if self._settings is None:
            self._settings = load()
        return self._settings

    def started(self, started: float) -> None:
        """The job runs: its start, and a watch on the ``duration`` thresholds."""
        self.post(Event.START, "start")
        threading.Thread(
            target=self._watch_durations, args=(started,), name="air-notify-duration", daemon=True
        ).start()

    def ended(self, outcome: Outcome) -> None:
        self._over.set()
        self.post(END_EVENT[outcome], "end")

    def retry(self, attempt: int) -> None:
        self.post(Event.RETRY, f"retry:{attempt}")

    def hint(self, attempt: int, tag: str, text: str, lines: Sequence[str] = ()) -> None:
        """``lines``: what the hint says in detail (a hang's collective, rank by rank)."""
        self.post(Event.HINT, f"hint:{attempt}:{tag}", note=text, lines=tuple(lines) or (text,))

    def guard(self, attempt: int, guard: str, reason: str) -> None:
        """A guard with ``notify`` held: once an attempt, to every target of the job."""
        self.post(Event.GUARD, f"guard:{attempt}:{guard}", note=reason, lines=(reason,))

    def tracking_refused(self, attempt: int, files: AttemptDir) -> None:
        """The tracking server refused the attempt's run data for good (kept for ``air
        sync``): its backlog's line (a server that is only down is no news: it lands)."""
        try:
            waiting = backlog.read(files)
        except Exception:
            log.exception("the tracking backlog of attempt %d not read", attempt)
            return
        if waiting is not None and waiting.permanent:
            said = waiting.line(self._job_id)
            self.post(Event.TRACKING, f"tracking:{attempt}", note=said, lines=(said,))

    def close(self, wait: float) -> None:
        """Send what is posted, waiting ``wait`` seconds at most; what is left (a try that
        hangs, notices behind it) is the courier's."""
        self._over.set()
        self._posted.put(None)
        self._thread.join(wait)
        if self._thread.is_alive() or self._store.outbox.next_due() is not None:
            courier.ensure_courier(self._store.home)

    def _watch_durations(self, started: float) -> None:
        told: set[float] = set()
        while not self._over.wait(DURATION_LOOK):
            try:
                targets = self._store.targets(self._job_id)
            except Exception as err:  # a busy store: look again next time
                log.warning("the job's targets not read: %r", err)
                continue
            ran = time.time() - started
            for threshold in sorted({d for t in targets for d in t.durations} - told):
                if ran >= threshold and not self._over.is_set():
                    told.add(threshold)
                    self.post(
                        Event.DURATION,
                        f"duration:{threshold:g}",
                        after=threshold,
                        note=f"still running after {duration(threshold)}",
                    )

    def _deliver(self) -> None:
        while (ids := self._posted.get()) is not None:
            try:
                courier.try_due(self._store.outbox, self.settings(), ids)
            except Exception:  # the courier tries again
                log.exception("notifications %s of job %s", ids, self._job_id)
