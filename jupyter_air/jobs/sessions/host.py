"""The kernel's side of a warm session: its job's ranks, reached through ``session_wire``.

A session is one job of kind "session" whose ranks run ``session_rank``. This object
listens (on the job's Unix socket, or on TCP at ``host`` for ranks on other machines),
leaves the job's ticket for the ranks, waits for every rank to prove it holds the
session's secret, stops listening once all are in, sends cells and collects their
replies, interrupts a running cell, and ends the session: on ``stop``, after
``idle_timeout`` seconds without a cell, or when a rank's process dies (then every rank
is stopped by the node agent's stop rule and the reason is the job's message). Once
ended, it says why. It knows nothing of IPython or MLflow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ...job_dir import JobDir, replace_json
from .. import cancel
from ..store import JobStore
from . import wire

#: Seconds the ranks get to leave after ``stop``, then the job is cancelled.
STOP_WAIT = 15.0
#: Seconds the node agent gets to stop every rank once one died.
DEATH_WAIT = 15.0
#: Seconds the ranks still in a cell get to leave it once interrupted (after another rank
#: failed the cell, or by the user); one that does not is stuck in C code, typically a
#: collective waiting for the rank that failed, and the process group is lost.
LEAVE_WAIT = 10.0


class SessionEnded(RuntimeError):
    """The session is over; the message says why."""


class Session:
    """A session's job and the channel to its ranks (thread-safe: an idle timer may end it)."""

    def __init__(
        self,
        store: JobStore,
        job_id: str,
        nproc: int,
        idle_timeout: float | None,
        on_end: Callable[[str], None] = lambda status: None,
        host: str | None = None,
    ) -> None:
        self.store, self.job_id, self.nproc = store, job_id, nproc
        self.files = JobDir(store.job_dir(job_id))
        self.idle_timeout = idle_timeout
        self.pids: dict[int, int] = {}
        self.hosts: dict[int, str] = {}
        self.cells = 0
        #: When every rank was in (when it was asked for, until then): idle since, before
        #: its first cell.
        self.started = time.time()
        #: Why the session ended, once it has; why it is ending, while it stops.
        self.ended: str | None = None
        self.stopping: str | None = None
        self._on_end = on_end
        self._lock = threading.RLock()
        self._busy = False
        self._timer: threading.Timer | None = None
        self._ranks: dict[int, wire.Channel] = {}
        self._replies: dict[int, dict[str, Any]] = {}
        self._selector = selectors.DefaultSelector()
        if host is None:
            server, address = wire.listen_unix(self.files.session_socket)
        else:
            server, address = wire.listen_tcp(host)
        self._server: socket.socket | None = server
        self.ticket = wire.Ticket.new(address)
        replace_json(self.files.session_ticket, dataclasses.asdict(self.ticket))

    def wait_ready(self, timeout: float) -> None:
        """Return once every rank has said hello; raise ``SessionEnded`` if the job ends
        (or ``timeout`` passes) first. A peer without the secret is turned away; once
        every rank is in, nothing more is accepted."""
        assert self._server is not None
        self._server.settimeout(0.1)
        deadline = time.monotonic() + timeout
        while len(self._ranks) < self.nproc:
            try:
                sock, _ = self._server.accept()
            except TimeoutError:
                if self.store.get(self.job_id).done:
                    self._end(f"the ranks did not start: {self._job_message()}")
                    raise SessionEnded(self.ended) from None
                if time.monotonic() > deadline:
                    self.stop(f"the ranks did not start within {timeout:g} s")
                    raise SessionEnded(self.ended) from None
                continue
            try:
                channel = wire.accept(sock, self.ticket.token)
                hello = channel.receive()
            except wire.Refused:
                sock.close()  # not one of ours
                continue
            if hello is None or hello.get("op") != wire.Op.HELLO.value:
                sock.close()
                continue
            rank = hello["rank"]
            self._ranks[rank] = channel
            self.pids[rank], self.hosts[rank] = hello["pid"], hello.get("host", "")
            self._selector.register(channel, selectors.EVENT_READ, rank)
        self._close_door()
        self._idle_from_now()
        self.started = time.time()

    def _close_door(self) -> None:
        """No more connections: the ranks are in (or the session is over)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        self.files.session_socket.unlink(missing_ok=True)
        self.files.session_ticket.unlink(missing_ok=True)

    def send_cell(self, payload: bytes, run_id: str, journal: str | None = None) -> int:
        """Start a cell on every rank (``run_id``: its MLflow run, "" until made; ``journal``:
        where rank 0 journals its points, when not the attempt's); its number."""
        with self._lock:
            self.check()
            self._busy = True
            self.cells += 1
            self._replies = {}
            fields: dict[str, Any] = {"payload": payload, "run_id": run_id}
            if journal is not None:
                fields["journal"] = journal
            for rank, channel in self._ranks.items():
                try:
                    channel.send(wire.Op.CELL, number=self.cells, **fields)
                except OSError:  # its process died since the job was last looked at
                    self._lost(rank)
            return self.cells

    def collect(
        self, tick: Callable[[], None], interrupted: bool = False
    ) -> dict[int, dict[str, Any]] | None:
        """Every rank's reply to the running cell, calling ``tick`` between looks.

        Once a rank fails the cell, the ranks still in it are interrupted (a collective
        may wait for the failed rank forever). Once interrupted (by that, or the user's
        interrupt: ``interrupted``), a rank still in the cell ``LEAVE_WAIT`` s later is
        stuck: None (``in_cell`` says which). Replies already read are kept, so a call cut
        short by the user's interrupt can be made again. A rank whose channel closes has
        died: the session ends (``SessionEnded``)."""
        deadline = time.monotonic() + LEAVE_WAIT if interrupted else None
        while len(self._replies) < len(self._ranks):
            for key, _ in self._selector.select(0.05):
                rank: int = key.data
                try:
                    message = self._ranks[rank].receive()
                except wire.Refused:  # not the rank's own frame: take the channel as lost
                    message = None
                if message is None:
                    self._lost(rank)
                elif message.get("op") == wire.Op.DONE.value:
                    self._replies[rank] = message
                    if not message["ok"] and deadline is None:
                        self.interrupt()
                        deadline = time.monotonic() + LEAVE_WAIT
            tick()
            if deadline is not None and time.monotonic() > deadline:
                return None
        with self._lock:
            self._busy = False
            self._idle_from_now()
        return dict(self._replies)

    def replies(self) -> dict[int, dict[str, Any]]:
        """The replies to the running (or last) cell read so far."""
        return dict(self._replies)

    def in_cell(self) -> list[int]:
        """The ranks that have not answered the running cell."""
        return sorted(set(self._ranks) - set(self._replies))

    def interrupt(self) -> None:
        """``KeyboardInterrupt`` in the running cell of every rank still in it."""
        for rank in self.in_cell():
            with contextlib.suppress(OSError):
                self._ranks[rank].send(wire.Op.INTERRUPT)

    def check(self) -> None:
        """Raise ``SessionEnded`` if the session is over (its job may have been cancelled)."""
        if self.ended is None and self.store.get(self.job_id).done:
            self._end(f"its job ended: {self._job_message()}")
        if self.ended is not None:
            raise SessionEnded(self.ended)

    def stop(self, reason: str) -> None:
        """Let every rank leave, cancel the job if they do not, and end the session."""
        with self._lock:
            if self.ended is not None:
                return
            self.stopping = reason
            for channel in self._ranks.values():
                with contextlib.suppress(OSError):
                    channel.send(wire.Op.STOP)
            if not self._wait_done(STOP_WAIT):
                cancel.cancel(self.store, self.job_id)
                cancel.wait(self.store, self.job_id, STOP_WAIT)
            self._end(reason)

    def end_now(self, reason: str) -> None:
        """Cancel the job (its ranks are stuck, and would not read a stop) and end."""
        with self._lock:
            if self.ended is not None:
                return
            self.stopping = reason
            cancel.cancel(self.store, self.job_id)
            cancel.wait(self.store, self.job_id, STOP_WAIT)
            self._end(reason)

    def _lost(self, rank: int) -> None:
        """Rank ``rank``'s process died: the node agent stops the others and the job
        fails with how it died; the session ends saying so."""
        with self._lock:
            if self.ended is None:
                if not self._wait_done(DEATH_WAIT):
                    cancel.cancel(self.store, self.job_id)
                    cancel.wait(self.store, self.job_id, DEATH_WAIT)
                self._end(f"rank {rank}'s process ended: {self._job_message()}")
        raise SessionEnded(self.ended)

    def _wait_done(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.store.get(self.job_id).done:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _job_message(self) -> str:
        job = self.store.get(self.job_id)
        attempts = self.store.attempts(self.job_id)
        message = job.message or (attempts[-1].message if attempts else None)
        return message or str(job.status).lower()

    def _end(self, reason: str) -> None:
        with self._lock:
            self.ended = reason
            if self._timer is not None:
                self._timer.cancel()
            for channel in self._ranks.values():
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(channel)
                channel.close()
            self._close_door()
            self._on_end(str(self.store.get(self.job_id).status))

    def _idle_from_now(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.idle_timeout:
            self._timer = threading.Timer(self.idle_timeout, self._idle)
            self._timer.daemon = True
            self._timer.start()

    def _idle(self) -> None:
        with self._lock:
            if self._busy or self.ended is not None:
                return
            minutes = (self.idle_timeout or 0) / 60
            self.stop(f"stopped after {minutes:g} min without a cell (--idle-timeout)")
