"""What of an attempt's run waits for its tracking server, and the one line that says so.

Whoever sends an attempt's data to MLflow (the supervisor's journal shipper while the
attempt runs, the user's tail process after it, a kernel at a cell's end, ``air sync``)
records here when the server does not take it, and takes the record back when it has
landed: ``attempt_K/tracking.json`` holds the server, since when it fails, its last
error and what waits (the journal's points, the run's end, its logs). The cell's status,
``air get``, ``air run --watch``, the jobs API and the runs panel all read it, and say
it in one line: ``tracking: http://host:5000 unreachable since 18:00:27; 412 points
waiting``. An error no wait changes (the run or its experiment deleted, permission
denied, an artifact store that refuses: anything but a server that does not answer, is
busy or fails) is ``permanent``: nothing is retried by itself, the data is kept, and the
line names it and the command that tries again.
"""

from __future__ import annotations

import contextlib
import enum
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..job_dir import AttemptDir, read_json, replace_json
from ..redact import redact
from . import journal
from .journal import NoRunYet

#: MLflow's error codes of a server that is busy: worth another try.
PASSING_CODES = frozenset({"TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED"})


#: Seconds a request may go unanswered before its wait is said.
STALL = 5.0


class Part(enum.StrEnum):
    """What of a run can wait for its server."""

    RUN = "run"  # a deferred attempt's run, not made yet
    METRICS = "metrics"
    END = "end"
    LOGS = "logs"


@dataclass(frozen=True)
class Backlog:
    """An attempt's data its tracking server has not taken yet."""

    tracking_uri: str
    since: float
    error: str
    permanent: bool
    parts: frozenset[Part]
    points: int

    def line(self, job_id: str) -> str:
        """The one line users read, in the cell, the CLI, the API and the runs panel."""
        uri = redact(self.tracking_uri) or "the tracking store"
        waiting = ["the run"] if Part.RUN in self.parts else []
        if self.points:
            waiting.append(f"{self.points} point{'s' if self.points != 1 else ''}")
        if Part.END in self.parts:
            waiting.append("the run's end")
        if Part.LOGS in self.parts:
            waiting.append("its logs")
        what = _join(waiting) if waiting else "nothing"
        if self.permanent:
            refused = f"tracking: {uri} refused the run's data ({self.error})"
            return f"{refused}; {what} kept: air sync {job_id}"
        verb = "waiting" if waiting else "left"
        why = f" ({self.error})" if self.error else ""
        return f"tracking: {uri} unreachable since {_clock(self.since)}{why}; {what} {verb}"


def failing(files: AttemptDir, tracking_uri: str, err: BaseException, parts: set[Part]) -> None:
    """The server did not take ``parts`` (and what was waiting before still waits). A
    request still unanswered (``NoAnswerYet``) tells no more than the server's last
    answer in this outage: that answer stays said (a retry under way, waiting out its
    back-off, would otherwise turn "HTTP 503" into "no answer in 5 s" for a while)."""
    state = _state(files)
    since = state.get("since") if isinstance(state.get("since"), (int, float)) else None
    waiting = set(_parts(state)) | parts
    answered = isinstance(err, NoAnswerYet) and bool(state.get("error"))
    replace_json(
        files.tracking_backlog,
        {
            "tracking_uri": redact(tracking_uri),  # only ever shown
            "since": since or time.time(),
            "error": state["error"] if answered else describe(err),
            "permanent": bool(state.get("permanent")) if answered else is_permanent(err),
            "parts": sorted(waiting),
        },
    )


class NoAnswerYet(TimeoutError):
    """A request under way that the server has not answered for a while."""


@contextlib.contextmanager
def watched(
    files: AttemptDir, tracking_uri: str, parts: set[Part], after: float = STALL
) -> Iterator[None]:
    """Run the block (requests to the server); if it has not ended ``after`` seconds on,
    say so now: a server that accepts and never answers is only given up on when
    MLflow's own timeouts and retries end, a minute later."""

    over = threading.Event()

    def stalled() -> None:
        if not over.is_set():
            with contextlib.suppress(OSError):
                failing(files, tracking_uri, NoAnswerYet(f"no answer in {after:g} s"), parts)

    timer = threading.Timer(after, stalled)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        over.set()
        timer.cancel()


def landed(files: AttemptDir, parts: set[Part]) -> None:
    """``parts`` are in MLflow now; the record goes with the last of them."""
    state = _state(files)
    if not state:
        return
    left = set(_parts(state)) - parts
    if left:
        replace_json(files.tracking_backlog, {**state, "parts": sorted(left)})
    else:
        with contextlib.suppress(FileNotFoundError):
            files.tracking_backlog.unlink()


def read(files: AttemptDir) -> Backlog | None:
    """The attempt's backlog, if its server failed to take something that still waits."""
    state = _state(files)
    if not state:
        return None
    parts = frozenset(_parts(state))
    points = journal.waiting_points(files) if Part.METRICS in parts else 0
    if not points and parts <= {Part.METRICS}:
        return None  # shipped since (the record's own end was not written yet)
    return Backlog(
        str(state.get("tracking_uri") or ""),
        float(state.get("since") or 0),
        str(state.get("error") or ""),
        bool(state.get("permanent")),
        parts,
        points,
    )


def refused_for_good(files: AttemptDir) -> bool:
    """Whether the server's last answer on what waits was one no wait changes."""
    return bool(_state(files).get("permanent"))


def is_permanent(err: BaseException) -> bool:
    """Whether waiting will not change the error: anything but a server that does not
    answer, drops the connection, is busy or fails (5xx), such as a run deleted, a
    permission denied or an artifact store that refuses. Those are kept for ``air sync``,
    not retried by themselves (a process retrying them would never end)."""
    if isinstance(err, (NoAnswerYet, NoRunYet, ConnectionError, TimeoutError)):
        return False
    if getattr(err, "error_code", None) in PASSING_CODES:
        return False
    text = str(err)
    return not any(pattern.search(text) for pattern, _, passing in _SHORT if passing)


def describe(err: BaseException) -> str:
    """The error in a few words (MLflow wraps a refused connection in a paragraph), or
    its first line, without credentials."""
    text = str(err).strip()
    for pattern, said, _ in _SHORT:
        if found := pattern.search(text):
            return said.format(*found.groups())
    return redact(text.splitlines()[0] if text else type(err).__name__)[:200]


#: MLflow's paragraphs in a few words, and whether another try may go better.
_SHORT = [
    (re.compile(r"Connection refused"), "connection refused", True),
    (re.compile(r"timed out|Timeout", re.IGNORECASE), "no answer in time", True),
    (re.compile(r"Name or service not known|nodename nor servname"), "unknown host", True),
    (
        re.compile(r"Connection (?:reset|aborted|broken)|RemoteDisconnected|IncompleteRead"),
        "connection dropped",
        True,
    ),
    (re.compile(r"(?:status code|response code|error code) (5\d\d)"), "HTTP {0}", True),
    (re.compile(r"too many (5\d\d) error responses"), "HTTP {0}", True),
    (re.compile(r"(?:status code|response code|error code) (\d{3})"), "HTTP {0}", False),
]


def _state(files: AttemptDir) -> dict[str, Any]:
    state = read_json(files.tracking_backlog)
    return state if isinstance(state, dict) else {}


def _parts(state: dict[str, Any]) -> list[Part]:
    raw = state.get("parts")
    return [Part(p) for p in raw if p in Part.__members__.values()] if isinstance(raw, list) else []


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _clock(epoch: float) -> str:
    """A time of today as ``18:00:27``, of another day with its date."""
    then = time.localtime(epoch)
    today = time.localtime()
    same_day = (then.tm_year, then.tm_yday) == (today.tm_year, today.tm_yday)
    return time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S", then)
