"""The handler base class: authentication, the caller's identity, JSON in and out,
errors as JSON."""

from __future__ import annotations

import functools
import json
import math
from http.client import responses
from typing import Any

from jupyter_server.auth.identity import (
    IdentityProvider,
    LegacyIdentityProvider,
    PasswordIdentityProvider,
)
from jupyter_server.base.handlers import APIHandler
from tornado import web

from ..identity import Identity, os_identity
from ..jobs.permissions import BadGrant, Forbidden
from ..jobs.service import Conflict
from ..jobs.store import UnknownJob

#: jupyter_server's own logins (a token, a password): they authenticate the one user who
#: started the server, whatever name they give the browser.
SINGLE_USER_PROVIDERS = (IdentityProvider, PasswordIdentityProvider, LegacyIdentityProvider)

#: Domain errors and the status they answer (docs/api.md, "Errors").
DOMAIN_ERRORS: dict[type[Exception], int] = {
    BadGrant: 400,
    Forbidden: 403,
    UnknownJob: 404,
    Conflict: 409,
}


@functools.cache
def server_user() -> Identity:
    """The OS user running this server, with its OS groups (read once)."""
    return os_identity()


class AirHandler(APIHandler):
    """Every jupyter_air route derives from this.

    Errors leave as ``{"error": {"code", "message"}}`` whatever raised them, so the
    front end and scripts have one shape to read.
    """

    auth_resource = "jupyter_air"  # what a deployment's Authorizer is asked about

    def caller(self) -> Identity:
        """Who is calling, for job permissions; the one place that decides it.

        On a Hub, the Hub user visiting this server (bob, when alice shares her server
        with him) and their Hub groups, from the user model JupyterHub's identity
        provider keeps. With jupyter_server's own token or password login there is one
        user, the OS user running the server, who owns everything. Any other identity
        provider: its user name, and its groups when its users have a ``groups``.
        """
        user = self.current_user
        hub_user = getattr(user, "hub_user", None)
        if isinstance(hub_user, dict):
            return Identity(str(hub_user["name"]), frozenset(hub_user.get("groups") or ()))
        if type(self.identity_provider) in SINGLE_USER_PROVIDERS:
            return server_user()
        return Identity(user.username, frozenset(getattr(user, "groups", None) or ()))

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, tuple(DOMAIN_ERRORS)):
            self.log.info("%s %s: %s", self.request.method, self.request.path, value)
            return
        super().log_exception(typ, value, tb)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        extra: dict[str, Any] = {}
        for kind, status in DOMAIN_ERRORS.items():
            if isinstance(exc, kind):
                status_code = status
                self.set_status(status)
        message = responses.get(status_code, "Unknown error")
        if isinstance(exc, Forbidden):
            message = str(exc)
            extra = {"job": exc.job_id, "needed": exc.needed.name, "owner": exc.owner}
        elif isinstance(exc, BadGrant | Conflict):
            message = str(exc)
        elif isinstance(exc, UnknownJob):
            message = f"no job {exc.args[0]!r}"
        elif isinstance(exc, web.HTTPError) and exc.log_message:
            message = exc.log_message % exc.args if exc.args else exc.log_message
        elif status_code >= 500:
            message = "Internal server error: see the Jupyter server log"
        code = responses.get(status_code, "error").lower().replace(" ", "_").replace("-", "_")
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"error": {"code": code, "message": message, **extra}}))

    def float_argument(self, name: str, minimum: float | None = None) -> float | None:
        """A finite number from the query string, or None when absent; 400 otherwise."""
        raw = self.get_query_argument(name, None)
        if raw is None:
            return None
        try:
            value = float(raw)
        except ValueError:
            raise web.HTTPError(400, f"'{name}' must be a number, got {raw!r}") from None
        if not math.isfinite(value) or (minimum is not None and value < minimum):
            raise web.HTTPError(400, f"'{name}' must be a finite number >= {minimum}, got {raw!r}")
        return value

    def int_argument(self, name: str, default: int | None, low: int, high: int) -> int | None:
        """An integer in [low, high] from the query string, ``default`` when absent; else 400."""
        raw = self.get_query_argument(name, None)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise web.HTTPError(400, f"{name!r} must be an integer, got {raw!r}") from None
        if not low <= value <= high:
            raise web.HTTPError(400, f"{name!r} must be between {low} and {high}, got {value}")
        return value

    def write_json(self, doc: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(doc, separators=(",", ":"), allow_nan=False))
