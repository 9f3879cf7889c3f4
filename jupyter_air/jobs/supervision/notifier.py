"""A job's notifications, from its supervisor: its start, a retry, a hint, a duration
passed, its end. Each is posted once to the outbox under a key naming it (a restarted
supervisor posts nothing twice) and tried at once, on a thread of its own, so no rank
and no record of the job's end waits for a mail server; what fails is retried by the
courier (``notify.courier``). A job with no target costs nothing here.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from ...notify import courier
from ...notify.message import duration
from ...notify.settings import AirNotify, load
from ...notify.targets import Event
from ...status import Outcome
from ..notices import notices
from ..store import JobStore

log = logging.getLogger("jupyter_air.supervisor")

#: The notification of how an attempt, or the job, ended.
END_EVENT = {
    Outcome.SUCCEEDED: Event.SUCCESS,
    Outcome.FAILED: Event.FAILURE,
    Outcome.CANCELLED: Event.CANCELLED,
}


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
        targets = store.get(job_id).spec.notify
        self._durations = sorted({d for t in targets for d in t.durations})
        self.active = bool(targets)
        self._posts: queue.Queue[_Post | None] = queue.Queue()
        self._over = threading.Event()
        self._settings: AirNotify | None = None
        self._thread = threading.Thread(target=self._run, name="air-notify", daemon=True)
        if self.active:
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
        if self.active:
            self._posts.put(_Post(event, key, after, note, lines))

    def started(self, started: float) -> None:
        """The job runs: its start, and a watch on each ``duration`` threshold."""
        self.post(Event.START, "start")
        if self._durations and self.active:
            threading.Thread(
                target=self._watch_durations,
                args=(started,),
                name="air-notify-duration",
                daemon=True,
            ).start()

    def ended(self, outcome: Outcome) -> None:
        self._over.set()
        self.post(END_EVENT[outcome], "end")

    def retry(self, attempt: int) -> None:
        self.post(Event.RETRY, f"retry:{attempt}")

    def hint(self, attempt: int, tag: str, text: str) -> None:
        self.post(Event.HINT, f"hint:{attempt}:{tag}", note=text, lines=(text,))

    def close(self, wait: float) -> None:
        """Send what is posted (waiting ``wait`` seconds at most: the courier takes the
        rest, as it does every later try)."""
        self._over.set()
        if self.active:
            self._posts.put(None)
            self._thread.join(wait)

    def _watch_durations(self, started: float) -> None:
        import time

        for threshold in self._durations:
            if self._over.wait(max(0.0, started + threshold - time.time())):
                return
            self.post(
                Event.DURATION,
                f"duration:{threshold:g}",
                after=threshold,
                note=f"still running after {duration(threshold)}",
            )

    def _run(self) -> None:
        while (post := self._posts.get()) is not None:
            try:
                if self._settings is None:
                    self._settings = load()
                job = self._store.get(self._job_id)
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
