"""The handler base class: authentication, JSON in and out, errors as JSON."""

from __future__ import annotations

import json
import math
from http.client import responses
from typing import Any

from jupyter_server.base.handlers import APIHandler
from tornado import web


class AirHandler(APIHandler):
    """Every jupyter_air route derives from this.

    Errors leave as ``{"error": {"code", "message"}}`` whatever raised them, so the
    front end and scripts have one shape to read.
    """

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = responses.get(status_code, "Unknown error")
        if isinstance(exc, web.HTTPError) and exc.log_message:
            message = exc.log_message % exc.args if exc.args else exc.log_message
        elif status_code >= 500:
            message = "Internal server error: see the Jupyter server log"
        code = responses.get(status_code, "error").lower().replace(" ", "_").replace("-", "_")
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"error": {"code": code, "message": message}}))

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
