"""The rank's end of ``jobs.debugger``: ``breakpoint()`` (and ``pdb.set_trace()``) in a
rank runs pdb driven from where the job is followed, or says in one line why not.

Every rank's ``PYTHONBREAKPOINT`` names ``breakpoint_hook`` (``node.rank_debugger.HOOK``,
set by ``env.rank_env``; a user's own choice wins), so a ``python train.py`` of ``air run``
stops too. Only the rank the job's ticket names stops (``--debug-rank``, rank 0 by
default); the others' breakpoints are skipped, and so is every breakpoint of a job nobody
watches (a background job, ``air run`` without ``--watch``, a schedule): each call site
is said once, in the rank's output. The stopped rank's pdb reads and writes through its
connection to the watcher; the other ranks wait in their next collective, as they would
for a slow rank. If the watcher goes, pdb is told ``continue`` and the rank goes on.
"""

from __future__ import annotations

import contextlib
import io
import os
import pdb
import sys
import types
from pathlib import Path
from typing import IO, Any, cast

from .debugger import GO_ON, TICKET_ENV, DebugOp, DebugTicket, connect
from .sessions import wire

#: The call sites already said to be skipped (one line each, not one per call).
_said: set[str] = set()


class _Link:
    """pdb's stdin and stdout: frames to and from the watcher."""

    def __init__(self, channel: wire.Channel, rank: int) -> None:
        self.channel, self.rank = channel, rank
        self.gone = False
        self._out = io.StringIO()

    def write(self, text: str) -> int:
        return self._out.write(text)

    def flush(self) -> None:
        text, self._out = self._out.getvalue(), io.StringIO()
        if text and not self.gone:
            self._send(DebugOp.OUT, text=text)

    def readline(self) -> str:
        """The user's next line; ``continue`` once nobody answers any more."""
        self.flush()
        if not self.gone:
            self._send(DebugOp.READ)
        message = None
        if not self.gone:
            with contextlib.suppress(wire.Refused):
                message = self.channel.receive()
        if message is None or message.get("op") != DebugOp.LINE.value:
            if not self.gone:
                self.gone = True
                _line(f"rank {self.rank}: the debugger's watcher is gone: going on")
            return GO_ON + "\n"
        return str(message.get("text", "")) + "\n"

    def _send(self, op: DebugOp, **fields: Any) -> None:
        try:
            self.channel.send(op, **fields)
        except OSError:
            self.gone = True


#: This process's connection to its watcher, made at its first stop.
_link: _Link | None = None


def breakpoint_hook(
    *args: Any, frame: types.FrameType | None = None, header: str | None = None, **kwargs: Any
) -> None:
    """``sys.breakpointhook`` of a rank (``PYTHONBREAKPOINT``): stop in the caller's frame,
    or in ``frame`` (``pdb.set_trace``'s caller, ``node.rank_debugger``)."""
    _stop(frame or sys._getframe(1), header)


def _stop(frame: types.FrameType, header: str | None) -> None:
    global _link
    rank = int(os.environ.get("RANK", "0"))
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    place = os.environ.get(TICKET_ENV)
    ticket = DebugTicket.read(Path(place)) if place else None
    if not place:
        why = "nobody is watching this job (run in the background or without --watch)"
    elif ticket is None:
        why = "no watcher reachable (it stopped following the job, or runs on another machine)"
    elif ticket.rank != rank:
        why = f"only rank {ticket.rank} stops (--debug-rank {ticket.rank})"
    else:
        why = ""
    if why or ticket is None:
        _skip(where, f"rank {rank}: breakpoint() at {where} skipped: {why}; going on")
        return
    if _link is None or _link.gone:
        try:
            _link = _Link(connect(ticket, rank, os.getpid()), rank)
        except (OSError, wire.Refused) as err:
            _skip(where, f"rank {rank}: breakpoint() at {where} skipped: no watcher ({err})")
            return
    link = cast(IO[str], _link)  # what pdb reads and writes of a stream
    debugger = pdb.Pdb(stdin=link, stdout=link, nosigint=True, readrc=False)
    debugger.prompt = f"(Pdb rank {rank}) "
    if header is not None:
        debugger.message(header)
    debugger.set_trace(frame)


def _skip(where: str, line: str) -> None:
    if where not in _said:
        _said.add(where)
        _line(line)


def _line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
