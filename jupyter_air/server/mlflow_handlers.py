"""``{base_url}jupyter-air/mlflow/<key>/...``: the MLflow UI of a local tracking store.

Proxies every request to the ``mlflow server`` child that ``MlflowUi`` runs for the
store registered under ``<key>``; the key is all the request says about the store. The
child serves HTTP on a Unix socket only, which the client here reaches through a
resolver that maps every host to that socket.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable
from typing import Any
from urllib.parse import urlsplit

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import httputil, iostream, web
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.httputil import HTTPHeaders
from tornado.netutil import Resolver
from tornado.simple_httpclient import SimpleAsyncHTTPClient

from ..identity import server_owner
from ..tracking.ui_server import MlflowUi, UiUnavailable, UnknownStore
from .base import AirHandler

# Not forwarded to the child: Jupyter's credentials and the URLs carrying them, what
# only concerns one hop, and Origin (checked here; the child would refuse the
# Jupyter server's origin as cross-site).
REQUEST_HEADERS_DROPPED = frozenset(
    {
        "host",
        "cookie",
        "authorization",
        "x-xsrftoken",
        "x-csrftoken",
        "origin",
        "referer",
        "accept-encoding",
        "content-length",
        "connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",
    }
)
# Not passed back: one-hop headers, and cookies, which would land on Jupyter's origin.
RESPONSE_HEADERS_DROPPED = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "trailer", "set-cookie"}
)
# Whole answers, artifacts included, may take a while; a dead child fails at connect.
CONNECT_TIMEOUT = 10.0
REQUEST_TIMEOUT = 3600.0
# The child's URLs as the client here asks for them (MLflow accepts Host: localhost).
CHILD_ORIGIN = "http://localhost"
# Where the UI asks, on every page, which MLflow account is signed in: MLflow's auth app
# answers it, and our child runs without one (Jupyter signs the user in), so its 404
# was logged at every page. Answered here with no account: the UI then shows no account
# menu and asks nothing more of the auth app, as it does after that 404.
CURRENT_USER = "/ajax-api/2.0/mlflow/users/current"


class _SocketResolver(Resolver):
    """Resolves every host to one Unix socket: the child's."""

    def initialize(self, path: str) -> None:
        self.path = path

    async def resolve(
        self, host: str, port: int, family: socket.AddressFamily = socket.AF_UNSPEC
    ) -> list[tuple[int, Any]]:
        return [(socket.AF_UNIX, self.path)]


class MlflowUiHandler(AirHandler):
    """Relays one request to a store's MLflow UI child, streaming the answer back.

    XSRF: the MLflow UI sends its ``fetch`` calls without Jupyter's XSRF token, so a
    state-changing request also passes when its ``Origin`` header names this very
    server (same host as ``Host``; ``allow_origin`` does not widen this). Browsers send
    ``Origin`` with every POST, PUT, PATCH and DELETE and a page on another site cannot
    forge it, so this still refuses what the token is there to refuse: cross-site
    requests riding on the user's login cookie. Without a same-origin ``Origin``,
    Jupyter's own rule applies (an ``Authorization: token`` or the XSRF token). Every
    verb requires an authenticated user.
    """

    def initialize(self, ui: MlflowUi) -> None:
        self.mlflow_ui = ui
        self._status: httputil.ResponseStartLine | None = None
        self._upstream_headers = HTTPHeaders()
        self._started = False

    @property
    def content_security_policy(self) -> str:
        """Jupyter's page policy rather than the API one (``default-src 'none'``), which
        would stop the UI's scripts and styles."""
        return str(super(APIHandler, self).content_security_policy)

    def check_xsrf_cookie(self) -> None:
        origin = self.request.headers.get("Origin")
        if origin and urlsplit(origin).netloc == self.request.headers.get("Host"):
            return
        super().check_xsrf_cookie()

    def _require_server_owner(self) -> None:
        """A local store's UI shows every run of the store, the ranks' logs included, and
        job grants cannot narrow it: only the user whose server this is may open it
        (on a Hub, not the users it is shared with; they read a job's logs through the
        logs view, as its grants allow)."""
        owner = server_owner()
        if self.caller().name != owner:
            raise web.HTTPError(
                403,
                f"the MLflow UI of this server's local tracking stores shows all of {owner}'s "
                f"runs and logs: only {owner} can open it; a job's logs are in its logs view "
                "when its owner grants you CAN_VIEW",
            )

    def compute_etag(self) -> str | None:
        """None: the child's own ETag headers pass through untouched."""
        return None

    @web.authenticated
    @authorized
    async def get(self, key: str, path: str | None) -> None:
        await self._relay(key, path)

    @web.authenticated
    @authorized
    async def head(self, key: str, path: str | None) -> None:
        await self._relay(key, path)

    @web.authenticated
    @authorized
    async def post(self, key: str, path: str | None) -> None:
        await self._relay(key, path)

    @web.authenticated
    @authorized
    async def put(self, key: str, path: str | None) -> None:
        await self._relay(key, path)

    @web.authenticated
    @authorized
    async def patch(self, key: str, path: str | None) -> None:
        await self._relay(key, path)

    @web.authenticated
    @authorized
    async def delete(self, key: str, path: str | None) -> None:
        await self._relay(key, path)

    async def _relay(self, key: str, path: str | None) -> None:
        self._require_server_owner()
        if self.mlflow_ui.url:
            raise web.HTTPError(404, f"the MLflow UI is configured at {self.mlflow_ui.url}")
        if not path:
            # The UI's links are relative to its page, which must end in '/'.
            query = self.request.query
            self.redirect(f"{self.request.path}/" + (f"?{query}" if query else ""))
            return
        try:
            child = await self.mlflow_ui.socket_path(key)  # an unknown store's key: 404
        except UnknownStore as e:
            raise web.HTTPError(404, str(e)) from None
        except UiUnavailable as e:
            raise web.HTTPError(503, str(e)) from None
        if path == CURRENT_USER and self.request.method == "GET":
            self.finish({})  # no MLflow account: Jupyter's login is the one
            return
        # The child serves the same path (--static-prefix): the URI passes unchanged.
        request = HTTPRequest(
            CHILD_ORIGIN + (self.request.uri or ""),
            method=self.request.method or "GET",
            headers=_forwarded(self.request.headers),
            body=None if self.request.method in ("GET", "HEAD") else self.request.body,
            follow_redirects=False,
            allow_nonstandard_methods=True,
            decompress_response=False,
            connect_timeout=CONNECT_TIMEOUT,
            request_timeout=REQUEST_TIMEOUT,
            header_callback=self._on_header_line,
            streaming_callback=self._on_chunk,
        )
        client = SimpleAsyncHTTPClient(force_instance=True, resolver=_SocketResolver(path=child))
        try:
            await client.fetch(request, raise_error=False)
        except (OSError, HTTPClientError, iostream.StreamClosedError) as e:
            if self._started:
                self.log.warning("MLflow UI answer for %s cut short: %s", self.request.uri, e)
                return
            self.log.warning("MLflow UI of %s did not answer %s: %s", key, self.request.uri, e)
            raise web.HTTPError(502, f"the MLflow UI of {key} did not answer") from None
        finally:
            client.close()
        self._start_answer()
        self.finish(set_content_type=self._upstream_headers.get("Content-Type", "text/plain"))

    def _on_header_line(self, line: str) -> None:
        if self._status is None:
            self._status = httputil.parse_response_start_line(line.strip())
        elif line.strip():
            self._upstream_headers.parse_line(line)

    def _on_chunk(self, chunk: bytes) -> Awaitable[None]:
        self._start_answer()
        self.write(chunk)
        return self.flush()  # awaited by the client: the child waits for a slow browser

    def _start_answer(self) -> None:
        if self._started or self._status is None:
            return
        self._started = True
        self.set_status(self._status.code, self._status.reason)
        names = {name for name, _ in self._upstream_headers.get_all()}
        for name in names:
            self.clear_header(name)
        for name, value in self._upstream_headers.get_all():
            if name.lower() in RESPONSE_HEADERS_DROPPED:
                continue
            if name.lower() == "location" and value.startswith(CHILD_ORIGIN + "/"):
                value = value[len(CHILD_ORIGIN) :]
            self.add_header(name, value)


def _forwarded(headers: HTTPHeaders) -> HTTPHeaders:
    kept = HTTPHeaders()
    for name, value in headers.get_all():
        if name.lower() not in REQUEST_HEADERS_DROPPED:
            kept.add(name, value)
    return kept


def mlflow_ui_handlers(ui: MlflowUi) -> list[tuple[str, type[web.RequestHandler], dict[str, Any]]]:
    """The routes to add to the extension (paths relative to the server's base URL)."""
    return [(r"/jupyter-air/mlflow/(?P<key>[^/]+)(?P<path>/.*)?", MlflowUiHandler, {"ui": ui})]
