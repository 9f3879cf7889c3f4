"""Real receivers of notifications on loopback: an SMTP server (aiosmtpd, with STARTTLS
and login when asked) and an HTTP server taking webhooks. Each can be stopped and
started again on its port, to test retries and the account of failures."""

from __future__ import annotations

import email
import email.policy
import json
import socket
import subprocess
import threading
import time
from email.message import EmailMessage as Mail
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def self_signed(where: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (processes trust it by SSL_CERT_FILE)."""
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


class _Inbox:
    def __init__(self) -> None:
        self.mails: list[Mail] = []
        #: When each mail was received (Unix seconds).
        self.received: list[float] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        mail = email.message_from_bytes(envelope.original_content, policy=email.policy.default)
        mail["X-Envelope-To"] = ",".join(envelope.rcpt_tos)
        self.mails.append(mail)
        self.received.append(time.time())
        return "250 OK"


class SmtpServer:
    """``mails``: what it received. ``tls``: a (cert, key) pair for STARTTLS, or for TLS
    from the first byte with ``implicit``; ``login``: the (user, password) it requires
    (over TLS only)."""

    def __init__(
        self,
        tls: tuple[Path, Path] | None = None,
        login: tuple[str, str] | None = None,
        implicit: bool = False,
    ) -> None:
        self.port = free_port()
        self.inbox = _Inbox()
        self._tls = tls
        self._login = login
        self._implicit = implicit
        self._controller: Controller | None = None

    @property
    def mails(self) -> list[Mail]:
        return self.inbox.mails

    def _authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any
    ) -> AuthResult:
        ok = isinstance(data, LoginPassword) and (
            (data.login.decode(), data.password.decode()) == self._login
        )
        return AuthResult(success=ok, handled=False)

    def start(self) -> SmtpServer:
        kwargs: dict[str, Any] = {}
        if self._tls is not None:
            import ssl

            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*map(str, self._tls))
            if self._implicit:
                kwargs.update(ssl_context=context)
            else:
                kwargs.update(tls_context=context, require_starttls=True)
        if self._login is not None:
            kwargs.update(authenticator=self._authenticate, auth_required=True)
        self._controller = Controller(
            self.inbox, hostname="127.0.0.1", port=self.port, ready_timeout=30, **kwargs
        )
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None


class WebhookReceiver:
    """``posts``: the JSON bodies and headers it received; ``status``: what it answers."""

    def __init__(self) -> None:
        self.port = free_port()
        self.posts: list[tuple[dict[str, Any], dict[str, str]]] = []
        #: When each post was received (Unix seconds).
        self.received: list[float] = []
        self.status = 200
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/T000/B000/SECRET"

    def start(self) -> WebhookReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if receiver.status == 200:
                    receiver.posts.append((json.loads(body), dict(self.headers)))
                    receiver.received.append(time.time())
                self.send_response(receiver.status)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class SilentServer:
    """Accepts connections and reads, never answers: a receiver that hangs."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/SILENT"

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            self._open.append(connection)

    def stop(self) -> None:
        self._listener.close()
        for connection in self._open:
            connection.close()
