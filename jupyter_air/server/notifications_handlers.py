"""The caller's JupyterLab notifications (a ``jupyterlab`` target of ``notify``), for
their open tabs to show: ``GET jupyter-air/notifications?after=N&wait=S``, a long poll.

A job's supervisor, another process, posts them into the outbox (a table of the job
store's database); nothing tells this server, so waiting polls read the database: one
read of its newest id every ``STEP`` seconds, shared by every poll waiting (a hundred
open tabs cost what one does), and a read of the caller's own rows only when that id
moved. The reads run on the store's threads, never on the event loop.

Only the caller's own rows are answered (their owner is the caller's name): on a shared
Hub server a visitor never sees the owner's notifications, which carry their job's
lines and links.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sqlite3
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..jobs.api_models import LabNotification, NotificationLink, NotificationsPage
from ..jobs.store import JobStore, UnknownJob
from ..notify.outbox import Outbox, Record
from .base import AirHandler
from .jobs_handlers import STORE_THREADS, in_store_thread, run_link

T = TypeVar("T")

#: Seconds between two reads of the outbox while polls wait.
STEP = 0.5
#: The longest ``wait`` a poll may ask for, in seconds (under common proxies' timeouts).
MAX_WAIT = 30
#: Polls one caller may have waiting at once (a tab holds one); more are answered at
#: once, so that no user can hold the server's connections and reads with them.
MAX_WAITING = 8
#: Notifications in one answer at most; the next poll answers the rest at once.
PAGE = 50
#: The largest id SQLite stores: a larger ``after`` is no id.
MAX_ID = (1 << 63) - 1


def notification_document(record: Record) -> LabNotification:
    """What a tab shows of one notification: its message's words, and where it leads."""
    message = record.message
    return LabNotification(
        id=record.id,
        created=record.created,
        event=message.event.value,
        level=message.level,  # type: ignore[arg-type]  # one of the four, by construction
        title=message.title,
        facts=[list(fact) for fact in message.facts],
        lines=list(message.lines),
        links=[NotificationLink(label=link.label, url=link.url) for link in message.links],
        command=message.command,
        job_id=record.job_id,
        schedule_id=record.schedule_id,
    )


async def _on_store_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a store thread; a locked database raises (the waits try again)."""
    return await asyncio.get_running_loop().run_in_executor(STORE_THREADS, fn, *args)


class Watch:
    """The outbox's newest id, read at most once per ``STEP`` for all the polls waiting
    on this server, and who waits (per caller, for ``MAX_WAITING``)."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.waiting: Counter[str] = Counter()
        self._read: asyncio.Future[int] | None = None
        self._read_at = -math.inf

    async def newest(self) -> int:
        """The newest id, from a read started at most ``STEP`` ago (or one now)."""
        now = asyncio.get_running_loop().time()
        if self._read is None or (self._read.done() and now - self._read_at >= STEP):
            self._read_at = now
            self._read = asyncio.ensure_future(_on_store_thread(self.outbox.last_id))
            self._read.add_done_callback(_retrieved)
        # shielded: a poll that stops waiting leaves the read to the others
        return await asyncio.shield(self._read)


def _retrieved(read: asyncio.Future[int]) -> None:
    """A failed read that no poll awaited any more is not an unretrieved error."""
    if not read.cancelled():
        read.exception()


class NotificationsHandler(AirHandler):
    #: A tab's poll, open all day, is no one's activity: it must not keep a Hub's idle
    #: culler from stopping the server.
    _track_activity = False

    def initialize(self, watch: Watch, store: JobStore) -> None:
        self.watch = watch
        self.store = store
        self.gone = asyncio.Event()

    def on_connection_close(self) -> None:
        """The tab closed or aborted its poll: the wait ends (its slot with it)."""
        self.gone.set()
        super().on_connection_close()

    @web.authenticated
    @authorized
    async def get(self) -> None:
        owner = self.caller().name
        after = self.int_argument("after", None, 0, MAX_ID)
        wait = self.int_argument("wait", 0, 0, MAX_WAIT) or 0
        if after is None:  # a tab just opened: it starts from now, nothing old replayed
            last = await in_store_thread(self.watch.outbox.last_id)
            self.write_json(NotificationsPage(notifications=[], last=last).model_dump(mode="json"))
            return
        records = await in_store_thread(self.watch.outbox.for_lab, owner, after, PAGE)
        if not records and wait and self.watch.waiting[owner] < MAX_WAITING:
            records = await self._wait(owner, after, wait)
        if self.gone.is_set():
            return
        documents = [notification_document(r) for r in records]
        for document in documents:  # links this tab can open, behind a proxy too
            if document.job_id is not None:
                document.links = await in_store_thread(self._links, document.job_id)
        page = NotificationsPage(notifications=documents, last=records[-1].id if records else after)
        self.write_json(page.model_dump(mode="json"))

    def _links(self, job_id: str) -> list[NotificationLink]:
        """The job's logs view and its last attempt's run, under this server's base URL:
        what the message carries is made for a mail (absolute, maybe the server's own
        address, which the browser behind JupyterHub cannot reach)."""
        links = [NotificationLink(label="Logs", url=f"{self.base_url}lab?air-job={job_id}")]
        try:
            job = self.store.get(job_id)
        except UnknownJob:
            return links
        attempts = self.store.attempts(job_id)
        uri, experiment = job.spec.tracking.tracking_uri, job.experiment_id
        if attempts and attempts[-1].run_id and uri and experiment:
            url = run_link(self.base_url, uri, experiment, attempts[-1].run_id)
            links.append(NotificationLink(label="MLflow run", url=url))
        return links

    async def _wait(self, owner: str, after: int, wait: float) -> list[Record]:
        """The owner's rows after ``after`` once there are any, or none after ``wait``
        seconds or when the client left. A database locked past its busy timeout is
        read again at the next step rather than failing the poll."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        checked = after  # the newest id whose rows were read: none of them the owner's
        self.watch.waiting[owner] += 1
        try:
            while (left := deadline - loop.time()) > 0:
                with contextlib.suppress(asyncio.TimeoutError):  # TimeoutError from 3.11
                    await asyncio.wait_for(self.gone.wait(), min(STEP, left))
                if self.gone.is_set():
                    return []
                try:
                    newest = await self.watch.newest()
                    if newest <= checked:
                        continue
                    records = await _on_store_thread(self.watch.outbox.for_lab, owner, after, PAGE)
                except sqlite3.OperationalError:
                    continue
                if records:
                    return records
                checked = newest  # read after ``newest`` was: it saw every row up to it
            return []
        finally:
            self.watch.waiting[owner] -= 1
            if not self.watch.waiting[owner]:
                del self.watch.waiting[owner]


def notifications_handlers(store: JobStore) -> list[tuple[str, type, dict[str, Any]]]:
    """The route, with the one watch of ``store``'s outbox its polls share."""
    kwargs = {"watch": Watch(store.outbox), "store": store}
    return [(r"/jupyter-air/notifications", NotificationsHandler, kwargs)]
