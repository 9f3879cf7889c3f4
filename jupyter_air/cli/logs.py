"""``air logs``: a job's logs, filtered, followed or downloaded."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from ..jobs.service import NoLogs
from ..jobs.store import JobStore
from ..logs.query import BadFilter, LogFilter, LogLine, read_all_text, read_tail
from ..logs.text import format_line
from .common import CliError, _job, _service


def add_commands(sub: Any) -> None:
    """Register ``logs``."""
    logs = sub.add_parser("logs", help="a job's logs (the latest attempt by default)")
    logs.add_argument("job_id")
    logs.add_argument("--attempt", type=int)
    logs.add_argument("--node", type=int)
    logs.add_argument("--rank", type=int)
    logs.add_argument(
        "--level",
        choices=["info", "warning", "error"],
        default="info",
        help="lines at least this level",
    )
    logs.add_argument("--since", help="ISO time (2026-11-29T08:30) or Unix seconds")
    logs.add_argument("--until", help="ISO time or Unix seconds")
    logs.add_argument("--minutes", type=float, help="only the last M minutes")
    logs.add_argument("--lines", type=int, help="only the last N lines")
    logs.add_argument("--search", help="case-insensitive substring")
    logs.add_argument("--regex", action="store_true", help="--search is a regular expression")
    logs.add_argument("--cell", type=int, metavar="N", help="a session's cell N only")
    logs.add_argument(
        "--follow",
        action="store_true",
        help="stream new lines until the job ends (Ctrl-C stops following only)",
    )
    logs.add_argument(
        "--download-to",
        type=Path,
        metavar="DIR",
        help="write attempt_K/node_N/rank_R.log files into DIR",
    )
    logs.set_defaults(func=_logs)


def _logs(args: argparse.Namespace) -> int:
    service = _service()
    store = service.store
    job = _job(service, args.job_id)
    if args.follow:  # just submitted: its supervisor is starting it
        _first_attempt(store, job.id)
    try:
        logs = service.log_attempt(job, args.attempt)
    except NoLogs as err:
        raise CliError(str(err)) from None
    since = _when(args.since, "--since")
    if args.minutes is not None:
        since = max(since or 0.0, time.time() - args.minutes * 60)
    try:
        flt = LogFilter(
            node=args.node,
            rank=args.rank,
            level=args.level,
            since=since,
            until=_when(args.until, "--until"),
            search=args.search,
            regex=args.regex,
        )
    except BadFilter as err:
        raise CliError(str(err)) from None
    if args.cell is not None:
        from ..jobs.sessions.cells import NoCell, NotASession, cell_filter

        try:
            flt = cell_filter(store, job, flt, args.cell)
        except (NotASession, NoCell) as err:
            raise CliError(str(err)) from None
    if args.download_to is not None:
        return _download(logs.directory, flt, args.download_to, logs.attempt)
    if args.follow:  # the attempt asked for, else the latest and the retries after it
        _follow(store, job.id, flt, args.lines, args.attempt)
        return 0
    if args.lines:
        _print(read_tail(logs.directory, flt, args.lines).lines)
        return 0
    for page in read_all_text(logs.directory, flt):
        sys.stdout.write(page.text)
    sys.stdout.flush()
    return 0


def _first_attempt(store: JobStore, job_id: str) -> list[Any]:
    """The job's attempts once it has one, or none if it ended first."""
    while not (attempts := store.attempts(job_id)) and not store.get(job_id).done:
        time.sleep(0.05)
    return attempts


def _when(value: str | None, option: str) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise CliError(f"{option} {value!r}: expected an ISO time or Unix seconds") from None


def _print(lines: list[LogLine]) -> None:
    sys.stdout.write("".join(map(format_line, lines)))
    sys.stdout.flush()


def _follow(
    store: JobStore, job_id: str, flt: LogFilter, last: int | None, attempt: int | None = None
) -> None:
    """Stream lines as they come until the job ends; Ctrl-C stops following, not the job.
    Without ``attempt``: from the latest attempt on, through the retries that follow."""
    from ..jobs.follow import LogFollower

    stop = {"now": False}
    previous = signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    try:
        current = attempt or max(len(store.attempts(job_id)), 1)
        cursor = None
        if last:
            page = read_tail(store.attempt_dir(job_id, current), flt, last)
            _print(page.lines)
            cursor = page.cursor
        follower = LogFollower(store, job_id, flt, current, retries=attempt is None, cursor=cursor)
        tracking = TrackingNotes(store, job_id)
        for number, text in follower.follow_text(stop=lambda: tracking.look() or stop["now"]):
            if number > current:
                current = number
                print(f"--- attempt {current} ---", flush=True)
            sys.stdout.write(text)
            sys.stdout.flush()
    finally:
        signal.signal(signal.SIGINT, previous)


class TrackingNotes:
    """While a job is followed: its tracking line (``jobs.documents.tracking_line``)
    printed when it changes, and a word when what waited has landed."""

    EVERY = 2.0

    def __init__(self, store: JobStore, job_id: str) -> None:
        self._store, self._job_id = store, job_id
        self._said: str | None = None
        self._looked = 0.0

    def look(self) -> bool:
        """Say what changed; never asks the follower to stop."""
        from ..jobs.documents import tracking_line

        if time.monotonic() - self._looked < self.EVERY:
            return False
        self._looked = time.monotonic()
        store, job = self._store, self._store.get(self._job_id)
        line = tracking_line(store, job, store.attempts(job.id))
        if line != self._said:
            print(line or "tracking: everything waiting has landed", file=sys.stderr, flush=True)
            self._said = line
        return False


def _download(directory: Path, flt: LogFilter, target: Path, attempt: int) -> int:
    from ..logs.export import write_rank_files

    written = write_rank_files(directory, flt, target, attempt)
    for path, count in written:
        print(f"wrote {path} ({count} lines)")
    if not written:
        print("no log files match")
    return 0
