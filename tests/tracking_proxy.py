"""A team's tracking server as its users meet it on a bad day: a TCP proxy in front of a
real ``mlflow server`` that, on demand, forwards, accepts and never answers, answers
every request with a 503 (a load balancer whose backend is gone), or forwards requests
and cuts the connection as the answer comes (the server did the work; nobody hears it).

Switching the mode cuts the connections under way, so MLflow's pooled connections meet
the new mode at their next request, as they would a server that just went wrong.
"""

from __future__ import annotations

import contextlib
import enum
import socket
import threading
from urllib.parse import urlsplit


class Mode(enum.StrEnum):
    FORWARD = "forward"
    SILENT = "silent"  # reads the request, never replies
    UNAVAILABLE = "503"
    ANSWER_LOST = "answer-lost"  # forwards the request, closes as its answer comes


class TrackingProxy:
    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.uri = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.mode = Mode.FORWARD
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def switch(self, mode: Mode) -> None:
        with self._lock:
            self.mode = mode
            cut, self._open = self._open, set()
        for conn in cut:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.switch(Mode.FORWARD)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                mode = self.mode
                self._open.add(client)
            threading.Thread(target=self._serve, args=(client, mode), daemon=True).start()

    def _serve(self, client: socket.socket, mode: Mode) -> None:
        try:
            if mode in (Mode.FORWARD, Mode.ANSWER_LOST):
                upstream = socket.create_connection(self._upstream, timeout=30)
                with self._lock:
                    self._open.add(upstream)
                if mode is Mode.FORWARD:
                    threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
                    _pump(client, upstream)
                else:
                    threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
                    upstream.recv(1)  # the server answers: what was asked is done
                    upstream.close()
            elif mode is Mode.UNAVAILABLE:
                while _request(client):
                    client.sendall(
                        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                        b"Connection: keep-alive\r\n\r\n"
                    )
            else:
                while client.recv(65536):
                    pass
        except OSError:
            pass
        finally:
            client.close()


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


def _request(conn: socket.socket) -> bool:
    """Read one request (headers, and a body of its Content-Length); False at its end."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return False
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return False
        body += chunk
    return True
