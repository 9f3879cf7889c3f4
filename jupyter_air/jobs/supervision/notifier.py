"""A job's notifications, from its supervisor: its start, a retry, a hint, a duration
passed, its end. Each is posted once to the outbox under a key naming it (a restarted
supervisor posts nothing twice) and tried at once, on a thread of its own, so no rank
and no record of the job's end waits for a mail server; what fails is retried by the
courier (``notify.courier``). The targets are read at each event: the owner may add one
to a job that runs (``air notify``).
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
from ...notify.targets import Event
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
        self._posts: queue.Queue[_Post | None] = queue.Queue()
        self._over = threading.Event()
        self._settings: AirNotify | None = None
        self._thread = threading.Thread(target=self._run, name="air-notify", daemon=True)
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
        self._posts.put(_Post(event, key, after, note, lines))

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

    def hint(self, attempt: int, tag: str, text: str) -> None:
        self.post(Event.HINT, f"hint:{attempt}:{tag}", note=text, lines=(text,))

    def tracking_refused(self, attempt: int, files: AttemptDir) -> None:
        """The tracking server refused the attempt's run data for good (kept for ``air
        sync``): its backlog's line (a server that is only down is no news: it lands)."""
        waiting = backlog.read(files)
        if waiting is not None and waiting.permanent:
            said = waiting.line(self._job_id)
            self.post(Event.TRACKING, f"tracking:{attempt}", note=said, lines=(said,))

    def close(self, wait: float) -> None:
        """Send what is posted (waiting ``wait`` seconds at most: the courier takes the
        rest, as it does every later try)."""
        self._over.set()
        self._posts.put(None)
        self._thread.join(wait)

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
                if ran >= threshold:
                    told.add(threshold)
                    self.post(
                        Event.DURATION,
                        f"duration:{threshold:g}",
                        after=threshold,
                        note=f"still running after {duration(threshold)}",
                    )

    def _run(self) -> None:
        while (post := self._posts.get()) is not None:
            try:
                job = self._store.get(self._job_id)
                if self._settings is None:
                    self._settings = load()
                found = notices(
                    self._store,
                    job,
                    post.event,
                    post.key,
                    self._settings,
                    after=post.after,
                    note=post.note,
                    lines=post.lines,
                )
                courier.send(self._store.outbox, found, self._settings)
            except Exception:  # a notification never fails the job
                log.exception("notification %s of job %s", post.key, self._job_id)
