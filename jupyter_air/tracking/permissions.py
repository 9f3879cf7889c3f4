"""Job grants mirrored onto the experiment permissions of MLflow's own permission app.

When the tracking server runs ``mlflow server --app-name basic-auth``, a job grant also
gives its grantee a permission on the job's experiment, as the managed product maps them
(CAN_VIEW -> READ, CAN_MANAGE_RUN -> EDIT, CAN_MANAGE -> MANAGE); a revoke deletes it.
The calls go through MLflow's ``AuthServiceClient`` with the caller's MLflow credentials
(``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD`` or ``MLFLOW_TRACKING_TOKEN``),
who needs MANAGE on the experiment (its creator has it).

The job grant never depends on this: every problem is reported, none raised. MLflow's
app knows users only, so group grants are not mirrored, and no MLflow user is ever
created. Each request waits at most ``timeout`` seconds, without retries, and the whole
call at most ``budget`` seconds, so a slow tracking server delays a grant by seconds, not
minutes; callers on an event loop run it on a thread. A server without the app is named
once per process and tracking server.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass
from typing import Any, Literal, NamedTuple, NoReturn
from urllib.parse import urlsplit

from ..redact import MASK, redact, without_userinfo

#: Job permission level -> MLflow experiment permission.
EXPERIMENT_PERMISSION = {"CAN_VIEW": "READ", "CAN_MANAGE_RUN": "EDIT", "CAN_MANAGE": "MANAGE"}
TIMEOUT = 5.0
BUDGET = 15.0

Status = Literal["local", "unasked", "no-app", "app", "failed"]
Action = Literal["set", "updated", "kept", "removed", "absent", "own", "not-mirrored", "failed"]


class PermissionChange(NamedTuple):
    """A job grant as made: ``level`` None is a revoke."""

    grantee: str
    level: str | None
    group: bool = False


@dataclass(frozen=True)
class ChangeResult:
    """What became of one grant on the experiment: ``permission`` is the MLflow
    permission the grantee now holds through it (None: none)."""

    grantee: str
    group: bool
    level: str | None
    action: Action
    permission: str | None = None
    error: str | None = None

    def line(self, experiment_id: str) -> str:
        who = f"group {self.grantee}" if self.group else self.grantee
        where = f"MLflow experiment {experiment_id}"
        return {
            "set": f"{where}: {who} has {self.permission}",
            "updated": f"{where}: {who} has {self.permission}",
            "kept": f"{where}: {who} keeps the permission they had",
            "removed": f"{where}: {who}'s permission removed",
            "absent": f"{where}: {who} had no permission to remove",
            "own": f"{where}: {who} makes the grants: their permission is left as it is",
        }.get(self.action, f"{where}: not set for {who}: {self.error}")


@dataclass(frozen=True)
class MirrorReport:
    """``status``: ``local`` (not an HTTP tracking server: nothing to do), ``unasked``
    (only groups or the caller named: nothing to ask), ``no-app`` (the server has no
    permission app), ``app`` (it answered), ``failed`` (it could not be asked).
    ``notice`` is the one-time line about a server without the app."""

    status: Status
    experiment_id: str
    outcomes: tuple[ChangeResult, ...] = ()
    notice: str | None = None

    @property
    def failures(self) -> tuple[ChangeResult, ...]:
        return tuple(o for o in self.outcomes if o.error is not None)

    def lines(self) -> list[str]:
        """What to show the user, one line each (none for a local store)."""
        head = [self.notice] if self.notice else []
        return head + [o.line(self.experiment_id) for o in self.outcomes]

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "experiment_id": self.experiment_id,
            "notice": self.notice,
            "outcomes": [asdict(o) for o in self.outcomes],
        }


class _Stop(Exception):
    """The server cannot take any grant of this call (unreachable, refused, no app)."""

    def __init__(self, reason: str, status: Status = "failed") -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


_told_no_app: set[str] = set()
_told_lock = threading.Lock()


def mirror_grants(
    tracking_uri: str,
    experiment_id: str,
    grants: Sequence[PermissionChange | tuple[str, str | None]],
    *,
    timeout: float = TIMEOUT,
    budget: float = BUDGET,
    at_least: bool = False,
) -> MirrorReport:
    """Set (or delete, for a revoke) each grantee's permission on ``experiment_id``.
    ``at_least``: a grantee who holds a permission there already keeps it (a caller that
    cannot know what the experiment's other jobs grant must not lower it, and MLflow
    shows a user's permission to its admin only)."""
    wanted = [PermissionChange(*g) for g in grants]
    for g in wanted:
        if g.level is not None and g.level not in EXPERIMENT_PERMISSION:
            raise ValueError(f"unknown permission level {g.level!r}")
    if urlsplit(tracking_uri).scheme not in ("http", "https"):
        return MirrorReport("local", experiment_id)
    users = [g for g in wanted if not g.group]
    groups = [
        ChangeResult(g.grantee, True, g.level, "not-mirrored", error=_GROUPS)
        for g in wanted
        if g.group
    ]
    if not users:
        return MirrorReport("unasked", experiment_id, tuple(groups))
    mirror = _Mirror(tracking_uri, experiment_id, timeout, time.monotonic() + budget, at_least)
    outcomes: list[ChangeResult] = []
    try:
        for g in users:
            outcomes.append(mirror.apply(g))
    except Exception as e:  # whatever goes wrong here, the job grant stands
        stop = e if isinstance(e, _Stop) else _Stop(f"{type(e).__name__}: {e}")
        if stop.status == "no-app":
            return MirrorReport("no-app", experiment_id, notice=_no_app_notice(tracking_uri))
        reason = mirror.clean(stop.reason)
        outcomes += [
            ChangeResult(g.grantee, False, g.level, "failed", error=reason)
            for g in users[len(outcomes) :]
        ]
    failed = any(o.error for o in outcomes)
    status: Status = "app" if mirror.answered else "failed" if failed else "unasked"
    return MirrorReport(status, experiment_id, (*outcomes, *groups))


_GROUPS = "MLflow's permission app has users only: group grants are not mirrored"


def _no_app_notice(tracking_uri: str) -> str | None:
    server = without_userinfo(tracking_uri)
    with _told_lock:
        if server in _told_no_app:
            return None
        _told_no_app.add(server)
    return (
        f"MLflow at {server} runs without its permission app (mlflow server "
        "--app-name basic-auth): grants give access to jobs only, not to their experiments"
    )


class _Mirror:
    """One call's client, deadline and what the server has said so far."""

    def __init__(
        self,
        tracking_uri: str,
        experiment_id: str,
        timeout: float,
        deadline: float,
        at_least: bool = False,
    ):
        self.tracking_uri = tracking_uri
        self.experiment_id = experiment_id
        self.timeout = timeout
        self.deadline = deadline
        self.at_least = at_least
        self.answered = False
        self.username: str | None = None
        self.secrets: list[str] = []
        self.client: Any = None

    def apply(self, g: PermissionChange) -> ChangeResult:
        if self.client is None:
            self.username, self.secrets = _caller(self.tracking_uri)
            self.client = _client(self.tracking_uri)
        if g.grantee == self.username:  # replacing their own MANAGE would lock them out
            return ChangeResult(g.grantee, False, g.level, "own")
        if g.level is None:
            return self._revoke(g)
        permission = EXPERIMENT_PERMISSION[g.level]
        try:
            self._call("grant_user_permission", g.grantee, permission)
            return ChangeResult(g.grantee, False, g.level, "set", permission)
        except _Refused as r:
            if r.code == "RESOURCE_DOES_NOT_EXIST":
                error = f"MLflow has no user {g.grantee} (jupyter_air never creates MLflow users)"
                return ChangeResult(g.grantee, False, g.level, "failed", error=error)
            if r.code != "RESOURCE_ALREADY_EXISTS":
                return ChangeResult(
                    g.grantee, False, g.level, "failed", error=self.clean(r.message)
                )
        if self.at_least:  # only the admin may read it: another job's grant may be higher
            return ChangeResult(g.grantee, False, g.level, "kept")
        # A level change: the app's grant API only inserts, so delete, then grant again.
        with suppress(_Refused):  # revoked by someone else meanwhile: granting is still right
            self._call("revoke_user_permission", g.grantee)
        try:
            self._call("grant_user_permission", g.grantee, permission)
        except _Refused as r:
            error = f"the previous permission was removed, the new one refused: {r.message}"
            return ChangeResult(g.grantee, False, g.level, "failed", error=self.clean(error))
        return ChangeResult(g.grantee, False, g.level, "updated", permission)

    def _revoke(self, g: PermissionChange) -> ChangeResult:
        try:
            self._call("revoke_user_permission", g.grantee)
        except _Refused as r:
            if r.code == "RESOURCE_DOES_NOT_EXIST":  # no such permission, or no such user
                return ChangeResult(g.grantee, False, None, "absent")
            return ChangeResult(g.grantee, False, None, "failed", error=self.clean(r.message))
        return ChangeResult(g.grantee, False, None, "removed")

    def _call(self, method: str, username: str, *permission: str) -> None:
        """One request; ``_Refused`` for an answer about this grant, ``_Stop`` for one
        that holds for every grant of the call."""
        from mlflow.exceptions import MlflowException

        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _Stop("MLflow took too long: the remaining grants were not tried")
        self.client.timeout = min(self.timeout, left)
        try:
            getattr(self.client, method)(username, "experiment", self.experiment_id, *permission)
        except MlflowException as e:
            self._classify(e, username)
        self.answered = True

    def _classify(self, e: Exception, username: str) -> NoReturn:
        import requests
        from mlflow.exceptions import MlflowException

        cause = e.__cause__ or e.__context__
        if _timed_out(cause):
            raise _Stop(f"the tracking server did not answer within {self.client.timeout:g} s")
        if isinstance(cause, requests.RequestException):
            errno = re.search(r"\[Errno -?\d+\] [^'\")]+", str(cause))
            raise _Stop(f"cannot reach the tracking server ({errno[0] if errno else 'no answer'})")
        code = e.error_code if isinstance(e, MlflowException) else "INTERNAL_ERROR"
        if code == "UNAUTHENTICATED":
            raise _Stop(
                "MLflow refused the credentials (MLFLOW_TRACKING_USERNAME and "
                "MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN)"
            )
        if code == "PERMISSION_DENIED":
            raise _Stop(f"MANAGE on experiment {self.experiment_id} is needed to share it")
        if code == "ENDPOINT_NOT_FOUND":
            raise self._no_app_or_old(username)
        self.answered = True
        raise _Refused(code, getattr(e, "message", str(e)))

    def _no_app_or_old(self, username: str) -> _Stop:
        """A 404 page for the grant API: no app, or an app from before that API (its
        users API, older than the grant API, then answers)."""
        from mlflow.exceptions import MlflowException

        try:
            self.client.get_user(username)
        except MlflowException as e:
            if e.error_code == "ENDPOINT_NOT_FOUND":
                return _Stop("no permission app", status="no-app")
        return _Stop("the server's permission app predates MLflow's per-user permission API")

    def clean(self, text: str) -> str:
        """One short line with no credentials in it."""
        line = redact(text.strip().splitlines()[0] if text.strip() else text)[:300]
        for secret in self.secrets:
            line = line.replace(secret, MASK)
        return line


def _timed_out(cause: BaseException | None) -> bool:
    """Whether a request failed for its timeout: without retries, urllib3 reports a
    read timeout inside a ``MaxRetryError``, which requests turns into ConnectionError
    (and urllib3 counts a refused connection as a connect timeout)."""
    import requests
    from urllib3.exceptions import MaxRetryError, NewConnectionError
    from urllib3.exceptions import TimeoutError as Urllib3Timeout

    if isinstance(cause, requests.Timeout):
        return True
    inner = cause.args[0] if isinstance(cause, requests.ConnectionError) and cause.args else None
    reason = inner.reason if isinstance(inner, MaxRetryError) else None
    return isinstance(reason, Urllib3Timeout) and not isinstance(reason, NewConnectionError)


def _caller(tracking_uri: str) -> tuple[str | None, list[str]]:
    """The caller's MLflow username, and the password and token to keep out of messages."""
    from mlflow.utils.credentials import get_default_host_creds

    creds = get_default_host_creds(tracking_uri)
    return creds.username, [s for s in (creds.password, creds.token) if s]


def _client(tracking_uri: str) -> Any:
    """MLflow's client of its permission app, every request time-boxed and tried once."""
    try:
        from mlflow.server.auth.client import AuthServiceClient
    except ImportError:
        raise _Stop(
            "MLflow's permission client needs Flask-WTF: pip install 'mlflow[auth]'"
        ) from None
    if not hasattr(AuthServiceClient, "grant_user_permission"):
        raise _Stop("this MLflow's permission client has no per-user permission API")

    class Client(AuthServiceClient):
        timeout = TIMEOUT

        def _request(self, endpoint: str, method: str, **kwargs: Any) -> Any:
            return super()._request(endpoint, method, timeout=self.timeout, max_retries=0, **kwargs)

    return Client(tracking_uri)


class _Refused(Exception):
    """The app answered this one grant with an error."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
