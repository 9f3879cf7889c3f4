"""The channel between a kernel and the warm ranks of its session.

The kernel listens; each rank connects once. On this machine (the local backend) that is
a Unix socket in the job's directory (0700, the socket 0600, the peer's uid checked):
nothing listens on the network. Across the machines of a Ray cluster it is TCP, bound to
the kernel machine's address that faces the cluster (never every address). Either way
both ends first prove they hold the session's secret (``Ticket.token``, 32 random bytes
made by the kernel) without sending it, by HMAC-SHA256 over a nonce from each side,
before a single byte is unpickled; every frame after that carries an HMAC over its
direction, its number and its body, so a frame injected or replayed on the way is
refused. Frames are length-prefixed cloudpickle, not encrypted: a cell's code and the
names it is sent with travel in clear, as Ray's own traffic does without Ray's TLS.
When the kernel goes, its ranks read end-of-file: they never outlive it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import cloudpickle

_LENGTH = struct.Struct("!Q")
_NONCE = 32
_MAC = hashlib.sha256().digest_size
#: Seconds a peer gets to complete the handshake: a silent one cannot stall the kernel.
HANDSHAKE_WAIT = 10.0
#: A socket path longer than this (``sun_path`` holds 108 bytes) is reached through
#: its directory's ``/proc/self/fd`` entry.
_MAX_PATH = 100
#: The environment variable that gives a rank its ticket where it cannot read the job's
#: directory (a Ray node); the rank removes it from its environment at once.
TICKET_ENV = "AIR_SESSION_TICKET"


class Op(str, Enum):
    """What a message asks or answers."""

    HELLO = "hello"  # rank -> kernel: {"rank", "pid", "host"}
    CELL = "cell"  # kernel -> rank: {"number", "payload", "run_id"[, "journal"]}
    INTERRUPT = "interrupt"  # kernel -> rank: KeyboardInterrupt in the running cell
    STOP = "stop"  # kernel -> rank: leave the loop, exit 0
    DONE = "done"  # rank -> kernel: {"number", "rank", "ok", "interrupted", "error", "result"}


class Refused(RuntimeError):
    """The peer did not prove it holds the session's secret (or broke a frame's seal)."""


@dataclass(frozen=True)
class Ticket:
    """What a rank needs to reach its kernel: where (``unix:PATH`` or ``tcp:HOST:PORT``)
    and the session's secret (hex). Kept in a 0600 file of the job's directory."""

    address: str
    token: str

    @classmethod
    def new(cls, address: str) -> Ticket:
        return cls(address, secrets.token_hex(32))

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str) -> Ticket:
        data = json.loads(text)
        return cls(str(data["address"]), str(data["token"]))


class Channel:
    """One authenticated connection: sealed frames both ways, safe to send from several
    threads (the kernel's interrupt and its idle timer's stop)."""

    def __init__(self, sock: socket.socket, key: bytes, outgoing: bytes, incoming: bytes) -> None:
        self.sock = sock
        self._key, self._out, self._in = key, outgoing, incoming
        self._sent = self._received = 0
        self._sending = threading.Lock()

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def send(self, op: Enum, **fields: Any) -> None:
        """One sealed frame: ``op`` (an ``Op``, or another channel's own words, as a node
        agent's) and its fields."""
        data = cloudpickle.dumps({"op": op.value, **fields})
        with self._sending:
            seal = self._seal(self._out, self._sent, data)
            self._sent += 1
            self.sock.sendall(_LENGTH.pack(len(data)) + seal + data)

    def receive(self) -> dict[str, Any] | None:
        """The next message, or None once the peer is gone; ``Refused`` for a frame whose
        seal is wrong (nothing of it is unpickled)."""
        head = _read(self.sock, _LENGTH.size + _MAC)
        if head is None:
            return None
        body = _read(self.sock, _LENGTH.unpack(head[: _LENGTH.size])[0])
        if body is None:
            return None
        expected = self._seal(self._in, self._received, body)
        if not hmac.compare_digest(head[_LENGTH.size :], expected):
            raise Refused("a frame's seal is wrong: not from the session's peer")
        self._received += 1
        message: dict[str, Any] = cloudpickle.loads(body)
        return message

    def _seal(self, direction: bytes, number: int, data: bytes) -> bytes:
        return hmac.digest(self._key, direction + _LENGTH.pack(number) + data, "sha256")


def accept(sock: socket.socket, token: str) -> Channel:
    """The kernel's side of the handshake on a connection just accepted (``Refused`` if
    the peer does not hold the secret, or is another user on this machine)."""
    if sock.family == socket.AF_UNIX and not same_user(sock):
        raise Refused("the peer runs as another user")
    key = bytes.fromhex(token)
    ours = secrets.token_bytes(_NONCE)
    sock.settimeout(HANDSHAKE_WAIT)
    try:
        sock.sendall(ours)
        answer = _read(sock, _NONCE + _MAC)
        if answer is None:
            raise Refused("the peer left during the handshake")
        theirs, proof = answer[:_NONCE], answer[_NONCE:]
        if not hmac.compare_digest(proof, _proof(key, b"rank", ours, theirs)):
            raise Refused("the peer does not hold the session's secret")
        sock.sendall(_proof(key, b"kernel", theirs, ours))
    except OSError as err:  # a timeout: a silent peer
        raise Refused(f"no handshake: {err}") from err
    sock.settimeout(None)
    return Channel(sock, _session_key(key, ours, theirs), b"kernel", b"rank")


def connect(ticket: Ticket) -> Channel:
    """A rank's end, once the kernel proved it holds the secret (``OSError`` while the
    kernel does not listen yet; ``Refused`` if what answers is not the kernel)."""
    key = bytes.fromhex(ticket.token)
    sock = _connect(ticket.address)
    try:
        sock.settimeout(HANDSHAKE_WAIT)
        theirs = _read(sock, _NONCE)
        if theirs is None:
            raise Refused("the kernel closed the connection during the handshake")
        ours = secrets.token_bytes(_NONCE)
        sock.sendall(ours + _proof(key, b"rank", theirs, ours))
        proof = _read(sock, _MAC)
        if proof is None:
            raise Refused("the kernel refused this rank's proof")
        if not hmac.compare_digest(proof, _proof(key, b"kernel", ours, theirs)):
            raise Refused("what answers at the session's address is not its kernel")
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    return Channel(sock, _session_key(key, theirs, ours), b"rank", b"kernel")


def _proof(key: bytes, who: bytes, challenge: bytes, own: bytes) -> bytes:
    return hmac.digest(key, who + challenge + own, "sha256")


def _session_key(key: bytes, kernel_nonce: bytes, rank_nonce: bytes) -> bytes:
    """A key for this connection's seals only: frames of one cannot be replayed on another."""
    return hmac.digest(key, b"frames" + kernel_nonce + rank_nonce, "sha256")


def _read(sock: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        try:
            chunk = sock.recv(min(left, 1 << 20))
        except (ConnectionResetError, OSError):
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


@contextlib.contextmanager
def _unix_address(path: Path) -> Iterator[str]:
    """``path`` as a socket address, short enough for ``sun_path`` however deep it is."""
    if len(os.fsencode(str(path))) <= _MAX_PATH:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def listen_unix(path: Path) -> tuple[socket.socket, str]:
    """A listening socket at ``path``, readable by its user only; its address."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with _unix_address(path) as where:
        server.bind(where)
        os.chmod(where, 0o600)  # the directory (0700) already keeps others out
    server.listen()
    return server, f"unix:{path}"


def listen_tcp(host: str) -> tuple[socket.socket, str]:
    """A listening TCP socket on ``host`` (one address, not all of them), a free port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server = socket.socket(family, socket.SOCK_STREAM)
    server.bind((host, 0))
    server.listen()
    port = server.getsockname()[1]
    return server, f"tcp:{host}:{port}"


def _connect(address: str) -> socket.socket:
    kind, _, where = address.partition(":")
    if kind == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with _unix_address(Path(where)) as path:
                sock.connect(path)
        except OSError:
            sock.close()
            raise
        return sock
    if kind == "tcp":
        host, _, port = where.rpartition(":")
        return socket.create_connection((host, int(port)), timeout=HANDSHAKE_WAIT)
    raise ValueError(f"not a session address: {address!r}")


def same_user(sock: socket.socket) -> bool:
    """Whether the process at the other end of a Unix socket runs as this process's user."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    return bool(uid == os.getuid())


def facing(address: str) -> str:
    """This machine's IP address on the route to ``address`` (``host:port``, ``ray://…``):
    the one a Ray cluster's nodes can reach the kernel at. No packet is sent."""
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    host = host.removeprefix("[").removesuffix("]") if sep else target
    if host in ("auto", "local"):  # the cluster this machine is part of
        host, port = "192.0.2.1", "9"  # TEST-NET-1: the default route's address
    for family, _, _, _, where in socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM):
        with socket.socket(family, socket.SOCK_DGRAM) as probe, contextlib.suppress(OSError):
            probe.connect((where[0], int(port) if port.isdigit() else 9))
            return str(probe.getsockname()[0])
    raise OSError(f"no route from this machine to {address}")
