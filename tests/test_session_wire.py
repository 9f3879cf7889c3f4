"""The channel of a warm session: private to its user, reachable however deep AIR_HOME is."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

from jupyter_air.jobs import session_wire as wire


def test_the_socket_is_private_and_messages_go_both_ways(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*["a-rather-long-directory-name"] * 6)  # past sun_path's 108 bytes
    deep.mkdir(parents=True, mode=0o700)
    path = deep / "session.sock"
    assert len(str(path)) > 108
    server = wire.listen(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    rank = wire.connect(path)
    kernel, _ = server.accept()
    assert wire.same_user(kernel)
    wire.send(rank, wire.Op.HELLO, rank=1, pid=42)
    assert wire.receive(kernel) == {"op": "hello", "rank": 1, "pid": 42}
    big = b"x" * (3 << 20)  # a cell's payload larger than one read
    sender = threading.Thread(
        target=wire.send, args=(kernel, wire.Op.CELL), kwargs={"payload": big}
    )
    sender.start()
    assert wire.receive(rank) == {"op": "cell", "payload": big}
    sender.join()
    kernel.close()
    assert wire.receive(rank) is None  # the kernel is gone: the rank reads the end
    rank.close()
    server.close()
