"""A rank's pdb prompt, served by whoever follows its job: the cell's input box (the
kernel's stdin) or ``air run --watch``'s terminal.

Before the job starts, its watcher opens a folder of its own under AIR_HOME
(``debug/<random>/``, 0700) holding a Unix socket (0600) and a ticket (0600): the
socket's address, a secret made now, and the rank that may stop (``--debug-rank``). The
job's ranks are told the ticket's path (``TICKET_ENV``), never the secret: the spec that
carries the path is shown to those the job is shared with. A rank's ``breakpoint()``
(``rank_pdb``) reads the ticket, connects, and runs pdb with its input and
output on that connection, proved and sealed as a warm session's (``sessions.wire``:
another user cannot reach the folder, the socket checks the peer's uid, and the peer
must hold the secret). A job with no ticket is watched by nobody: its breakpoints are
skipped, each said in a line. The watcher answers between its looks at the job
(``serve``), so that the prompt is asked where the job is followed: on the kernel's
main thread (IPython's ``input()`` raises the input request of the running cell).
"""

from __future__ import annotations

import atexit
import contextlib
import secrets
import selectors
import shutil
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Protocol

from ..job_dir import read_json, replace_json
from ..paths import private_dir
from .sessions import wire

#: The ticket's path in a rank's environment; absent: nobody watches the job.
TICKET_ENV = "AIR_DEBUG_TICKET"
#: What pdb is told for a line nobody can give: go on.
GO_ON = "continue"
SOCKET = "pdb.sock"
TICKET = "ticket.json"


class DebugOp(str, Enum):
    """The words of a debugger's connection."""

    HELLO = "hello"  # rank -> watcher: {"rank", "pid"}
    OUT = "out"  # rank -> watcher: {"text"}: what pdb wrote
    READ = "read"  # rank -> watcher: pdb waits for a line
    LINE = "line"  # watcher -> rank: {"text"}: the user's line


@dataclass(frozen=True)
class DebugTicket:
    """Where a rank reaches its job's watcher, the secret, and which rank may stop."""

    address: str
    token: str
    rank: int

    @classmethod
    def read(cls, path: Path) -> DebugTicket | None:
        """The ticket at ``path``; None where there is none (its watcher has gone)."""
        doc = read_json(path)
        try:
            return cls(str(doc["address"]), str(doc["token"]), int(doc["rank"]))
        except (TypeError, KeyError, ValueError):
            return None


class Prompt(Protocol):
    """Where the user sees pdb and answers it."""

    def say(self, text: str) -> None:
        """Show pdb's output."""

    def ask(self, prompt: str) -> str | None:
        """The user's line after ``prompt``; None where nobody can answer (the rank
        goes on)."""


@dataclass
class _Peer:
    """One rank's connection, and pdb's output since its last complete line."""

    rank: int
    channel: wire.Channel
    pending: str = ""


class Watcher:
    """The serving end of a followed job's debugger (``serve`` between looks)."""

    def __init__(self, home: Path, rank: int) -> None:
        self.folder = private_dir(home / "debug") / secrets.token_hex(8)
        self.folder.mkdir(mode=0o700)
        self._server, address = wire.listen_unix(self.folder / SOCKET)
        self._server.setblocking(False)
        self._secret = wire.Ticket.new(address)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ, None)
        self._peers: dict[int, _Peer] = {}
        self.aim(rank)
        atexit.register(self.close)  # a kernel or a shell that ends leaves no folder

    @property
    def ticket(self) -> Path:
        """What the ranks are told (``TICKET_ENV``)."""
        return self.folder / TICKET

    def aim(self, rank: int) -> None:
        """Let rank ``rank``'s breakpoints stop, from now on (a warm session's next cell)."""
        if rank < 0:
            raise ValueError(f"--debug-rank must be a rank (0 or more), got {rank}")
        replace_json(
            self.ticket,
            {"address": self._secret.address, "token": self._secret.token, "rank": rank},
        )

    def serve(self, prompt: Prompt, wait: float = 0.0) -> None:
        """What the ranks sent since the last call: a rank that connects, pdb's output
        (said), pdb waiting for a line (asked). Returns once nothing more waits, after
        ``wait`` seconds at most when nothing came."""
        timeout: float | None = wait
        while events := self._selector.select(timeout):
            timeout = 0
            for key, _ in events:
                if key.data is None:
                    self._welcome()
                else:
                    self._read(self._peers[key.data], prompt)

    def _welcome(self) -> None:
        """A rank at the door: in if it proves it holds the secret (and is this user)."""
        try:
            sock, _ = self._server.accept()
        except (BlockingIOError, OSError):
            return
        try:
            channel = wire.accept(sock, self._secret.token)
            hello = channel.receive()
        except wire.Refused:
            sock.close()
            return
        if hello is None or hello.get("op") != DebugOp.HELLO.value:
            sock.close()
            return
        peer = _Peer(int(hello["rank"]), channel)
        self._peers[channel.fileno()] = peer
        self._selector.register(channel, selectors.EVENT_READ, channel.fileno())

    def _read(self, peer: _Peer, prompt: Prompt) -> None:
        try:
            message = peer.channel.receive()
        except wire.Refused:
            message = None
        if message is None:  # the rank went on for good, or died
            self._drop(peer, prompt)
            return
        op = message.get("op")
        if op == DebugOp.OUT.value:
            text = peer.pending + str(message.get("text", ""))
            done, _, peer.pending = text.rpartition("\n")
            if done:
                prompt.say(done + "\n")
        elif op == DebugOp.READ.value:
            asked, peer.pending = peer.pending, ""
            line = prompt.ask(asked)
            with contextlib.suppress(OSError):
                peer.channel.send(DebugOp.LINE, text=GO_ON if line is None else line)

    def _drop(self, peer: _Peer, prompt: Prompt) -> None:
        if peer.pending:
            prompt.say(peer.pending + "\n")
        self._selector.unregister(peer.channel)
        self._peers.pop(peer.channel.fileno(), None)
        peer.channel.close()

    def close(self) -> None:
        """Stop serving: a rank still stopped reads end-of-file and goes on; the folder
        goes (a breakpoint after it is skipped, said in its line)."""
        atexit.unregister(self.close)
        # The ticket goes first: a rank let go below that reaches its next breakpoint
        # finds no ticket, rather than a socket about to close mid-handshake.
        self.ticket.unlink(missing_ok=True)
        for peer in list(self._peers.values()):
            with contextlib.suppress(KeyError, OSError):
                self._selector.unregister(peer.channel)
            peer.channel.close()
        self._peers.clear()
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(self._server)
        self._server.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def rank_env(ticket: str | None) -> dict[str, str]:
    """What a job's ranks are told of its watcher: where its ticket is, if any."""
    return {} if ticket is None else {TICKET_ENV: str(ticket)}


def connect(ticket: DebugTicket, rank: int, pid: int) -> wire.Channel:
    """A rank's connection to its watcher (``OSError`` or ``wire.Refused`` if none
    answers, or what answers is not the watcher)."""
    channel = wire.connect(wire.Ticket(ticket.address, ticket.token))
    try:
        channel.send(DebugOp.HELLO, rank=rank, pid=pid)
    except OSError:
        channel.close()
        raise
    return channel
