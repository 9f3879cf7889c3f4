"""Whether a tracking server answers, asked in seconds before a job is submitted.

A submission makes its experiment and first run in MLflow before any rank starts, and
MLflow's client retries a server that is down for minutes (bounded by ``targets.
BOUNDED_REQUESTS`` to about one in our processes): the user would see nothing happen.
So a cell, ``@distributed``, a session and ``air run`` first ask the server's
``/health`` (``mlflow server`` answers it without credentials) with a short timeout, and
refuse in one line naming the server when nothing answers. Any HTTP answer but a 5xx
is a server that answers; stores that are files or databases are not asked.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from urllib.parse import urlsplit, urlunsplit

from ..redact import redact

#: Seconds the whole question may take.
TIMEOUT = 5.0


class Unreachable(RuntimeError):
    """The tracking server did not answer: the message is the one line users read (and
    IPython shows only that line, not the frames that asked); ``deferrable``: the call
    could run anyway with ``--tracking deferred`` (a warm session cannot)."""

    def __init__(self, message: str, deferrable: bool = True) -> None:
        super().__init__(message)
        self.deferrable = deferrable

    def refusal(self) -> str:
        """The line of a submission refused for it."""
        line = f"{self}; {REFUSED}"
        return f"{line}, or run with --tracking deferred" if self.deferrable else line

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31mTrackingUnreachable\x1b[0m: {self.refusal()}"]


#: What a refused submission adds to the line.
REFUSED = "nothing was started: start the server, or set MLFLOW_TRACKING_URI to one that answers"


def check(tracking_uri: str, timeout: float = TIMEOUT, deferrable: bool = True) -> None:
    """Raise ``Unreachable`` if ``tracking_uri`` is a server that does not answer."""
    parts = urlsplit(tracking_uri)
    if parts.scheme not in ("http", "https"):
        return
    # Without credentials: urllib would take them for the host (``/health`` needs none).
    host = parts.netloc.rpartition("@")[2]
    url = urlunsplit((parts.scheme, host, parts.path.rstrip("/") + "/health", "", ""))
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return
    except urllib.error.HTTPError as err:
        if err.code < 500:
            return  # it answers (a proxy's 404, an auth app's 401: MLflow says the rest)
        why = f"HTTP {err.code} {err.reason}"
    except urllib.error.URLError as err:
        why = _reason(err.reason)
    except (TimeoutError, OSError) as err:
        why = _reason(err)
    raise Unreachable(f"tracking: {redact(tracking_uri)} does not answer ({why})", deferrable)


def _reason(reason: object) -> str:
    if isinstance(reason, TimeoutError) or "timed out" in str(reason):
        return "no answer in time"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    return str(reason)[:200]
