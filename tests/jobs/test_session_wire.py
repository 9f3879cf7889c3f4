"""The channel of a warm session: only a peer that holds the session's secret gets in,
nothing it sends is unpickled before it proved so, and a frame not sealed by it is
refused; on one machine the socket is private to its user, however deep AIR_HOME is."""

from __future__ import annotations

import socket
import stat
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from jupyter_air.jobs.sessions import wire


class Background:
    """``call`` on a thread of its own: one end of the channel while the test is the other."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.value = call()
            except BaseException as err:
                self.error = err

        self._thread = threading.Thread(target=run)
        self._thread.start()

    def result(self) -> Any:
        self._thread.join(30)
        if self.error is not None:
            raise self.error
        return self.value


def test_the_unix_socket_is_private_and_messages_go_both_ways(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*["a-rather-long-directory-name"] * 6)  # past sun_path's 108 bytes
    deep.mkdir(parents=True, mode=0o700)
    path = deep / "session.sock"
    assert len(str(path)) > 108
    server, address = wire.listen_unix(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    ticket = wire.Ticket.new(address)
    assert wire.Ticket.loads(ticket.dumps()) == ticket
    rank_end = Background(lambda: wire.connect(ticket))
    kernel = wire.accept(server.accept()[0], ticket.token)
    rank: wire.Channel = rank_end.result()
    rank.send(wire.Op.HELLO, rank=1, pid=42)
    assert kernel.receive() == {"op": "hello", "rank": 1, "pid": 42}
    big = b"x" * (3 << 20)  # a cell's payload larger than one read
    sender = Background(lambda: kernel.send(wire.Op.CELL, payload=big))
    assert rank.receive() == {"op": "cell", "payload": big}
    sender.result()
    kernel.close()
    assert rank.receive() is None  # the kernel is gone: the rank reads the end
    rank.close()
    server.close()


def tcp_session() -> tuple[socket.socket, wire.Ticket]:
    server, address = wire.listen_tcp("127.0.0.1")
    return server, wire.Ticket.new(address)


def test_over_tcp_a_rank_with_the_secret_gets_in() -> None:
    server, ticket = tcp_session()
    host, port = server.getsockname()
    assert (host, ticket.address) == ("127.0.0.1", f"tcp:127.0.0.1:{port}")  # one address
    rank_end = Background(lambda: wire.connect(ticket))
    kernel = wire.accept(server.accept()[0], ticket.token)
    rank: wire.Channel = rank_end.result()
    kernel.send(wire.Op.CELL, number=1)
    assert rank.receive() == {"op": "cell", "number": 1}
    rank.send(wire.Op.DONE, ok=True)
    assert kernel.receive() == {"op": "done", "ok": True}
    for end in (rank, kernel, server):
        end.close()


def test_a_wrong_token_is_refused_at_both_ends() -> None:
    server, ticket = tcp_session()
    guessed = wire.Ticket(ticket.address, wire.Ticket.new("").token)
    rank_end = Background(lambda: wire.connect(guessed))
    with pytest.raises(wire.Refused, match="does not hold the session's secret"):
        wire.accept(server.accept()[0], ticket.token)
    with pytest.raises(wire.Refused):
        rank_end.result()
    server.close()


def test_a_rank_refuses_a_listener_that_is_not_its_kernel() -> None:
    """Another process on the session's address (the port reused once the kernel went)
    cannot send the rank cells: it cannot prove it holds the secret."""
    impostor, address = wire.listen_tcp("127.0.0.1")
    ticket = wire.Ticket.new(address)
    rank_end = Background(lambda: wire.connect(ticket))
    with pytest.raises(wire.Refused):
        wire.accept(impostor.accept()[0], wire.Ticket.new("").token)  # its own secret
    with pytest.raises(wire.Refused):
        rank_end.result()
    impostor.close()


class Planted:
    """Unpickling this would create a file: the proof that a pickle was loaded."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> Any:
        return (Path.touch, (self.path,))


def test_nothing_an_unproven_peer_sends_is_unpickled(tmp_path: Path) -> None:
    """A peer that skips the handshake and sends a pickle straight away is turned away,
    and its pickle is never loaded."""
    server, ticket = tcp_session()
    planted = tmp_path / "unpickled"
    attacker = socket.create_connection(server.getsockname())
    frame = cloudpickle.dumps({"op": "hello", "rank": Planted(planted)})
    attacker.sendall(struct.pack("!Q", len(frame)) + frame + b"\0" * 64)
    with pytest.raises(wire.Refused):
        wire.accept(server.accept()[0], ticket.token)
    assert not planted.exists()
    attacker.close()
    server.close()


def test_a_frame_not_sealed_by_the_peer_is_refused_unread(tmp_path: Path) -> None:
    """Bytes injected into an authenticated connection (or a frame replayed from another)
    do not carry the right seal: refused, and not unpickled."""
    server, ticket = tcp_session()
    rank_end = Background(lambda: wire.connect(ticket))
    kernel = wire.accept(server.accept()[0], ticket.token)
    rank: wire.Channel = rank_end.result()
    planted = tmp_path / "unpickled"
    frame = cloudpickle.dumps({"op": "done", "result": Planted(planted)})
    rank.sock.sendall(struct.pack("!Q", len(frame)) + b"\0" * 32 + frame)
    with pytest.raises(wire.Refused, match="seal"):
        kernel.receive()
    assert not planted.exists()
    for end in (rank, kernel, server):
        end.close()


def test_the_kernel_faces_the_cluster_from_one_address() -> None:
    """The address the ranks of a Ray cluster reach the kernel at: this machine's on the
    route to the cluster, never 0.0.0.0."""
    assert wire.facing("127.0.0.1:6379") == "127.0.0.1"
    assert wire.facing("ray://127.0.0.1:10001") == "127.0.0.1"
    assert wire.facing("auto") not in ("0.0.0.0", "")
