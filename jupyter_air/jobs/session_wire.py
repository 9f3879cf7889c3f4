"""The channel between a kernel and the warm ranks of its session.

A Unix socket in the job's directory (0700, so only its user can reach it): the kernel
listens, each rank connects once. Messages are length-prefixed cloudpickle frames, read
only by processes of the same user (the peer's uid is checked on accept too). When the
kernel goes, its ranks read end-of-file and exit: they never outlive it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any

import cloudpickle

_LENGTH = struct.Struct("!Q")
#: A socket path longer than this (``sun_path`` holds 108 bytes) is reached through
#: its directory's ``/proc/self/fd`` entry.
_MAX_PATH = 100


class Op(str, Enum):
    """What a message asks or answers."""

    HELLO = "hello"  # rank -> kernel: {"rank", "pid"}
    CELL = "cell"  # kernel -> rank: {"number", "payload", "run_id"}
    INTERRUPT = "interrupt"  # kernel -> rank: KeyboardInterrupt in the running cell
    STOP = "stop"  # kernel -> rank: leave the loop, exit 0
    DONE = "done"  # rank -> kernel: {"number", "rank", "ok", "interrupted", "error", "result"}


def send(sock: socket.socket, op: Op, **fields: Any) -> None:
    data = cloudpickle.dumps({"op": op.value, **fields})
    sock.sendall(_LENGTH.pack(len(data)) + data)


def receive(sock: socket.socket) -> dict[str, Any] | None:
    """The next message, or None once the peer is gone."""
    head = _read(sock, _LENGTH.size)
    if head is None:
        return None
    body = _read(sock, _LENGTH.unpack(head)[0])
    if body is None:
        return None
    message: dict[str, Any] = cloudpickle.loads(body)
    return message


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
def address(path: Path) -> Iterator[str]:
    """``path`` as a socket address, short enough for ``sun_path`` however deep it is."""
    if len(os.fsencode(str(path))) <= _MAX_PATH:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def listen(path: Path) -> socket.socket:
    """The kernel's end: a listening socket at ``path``, readable by its user only."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with address(path) as where:
        server.bind(where)
        os.chmod(where, 0o600)  # the directory (0700) already keeps others out
    server.listen()
    return server


def same_user(sock: socket.socket) -> bool:
    """Whether the process at the other end runs as this process's user."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    return bool(uid == os.getuid())


def connect(path: Path) -> socket.socket:
    """A rank's end (raises OSError while the kernel is not listening yet)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with address(path) as where:
            sock.connect(where)
    except OSError:
        sock.close()
        raise
    return sock
