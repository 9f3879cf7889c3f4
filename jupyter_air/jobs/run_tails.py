"""The MLflow tail of each attempt, done by one process per user that keeps MLflow loaded.

Once an attempt's ranks have exited, its run still needs its last system-metrics
sample, its end, and the ranks' logs as artifacts. Done by each supervisor, that meant
importing MLflow (about 2 s of CPU and 200 MB) in every finished job's process: ten
back-to-back cells left ten such processes competing with the next cell's ranks. So a
supervisor hands the tail to this process, which does tails one at a time, and waits,
asleep and small, for its answer: the supervisor's log, the job's recorded end and
"nothing outlives its owner" stay as they were.

Who can reach it: requests are files in ``AIR_HOME/tails/`` (private to the user, like
every file of the store); the process listens on nothing. How long it lives: it holds a
lock on ``tails/.lock`` while it runs and exits ``IDLE_EXIT`` seconds after its last
request, or at once when the store is gone. ``python -m jupyter_air.jobs.run_tails HOME``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..job_dir import AttemptDir
from ..logs.capture import plain_lines
from ..paths import private_dir, write_private

log = logging.getLogger("jupyter_air.run_tails")

#: Seconds the process waits for another request before it exits.
IDLE_EXIT = 20.0
#: Seconds between two looks for a request, or for an answer.
POLL = 0.02
#: Seconds a supervisor waits for its tail's answer (a large log takes a while).
ANSWER_TIMEOUT = 600.0
LOCK = ".lock"


@dataclass(frozen=True)
class Tail:
    """What is left to do on one attempt's run once its ranks have exited."""

    job_id: str
    attempt: int
    run_id: str
    status: str
    tracking_uri: str
    attempt_dir: str
    #: Take the run's last system-metrics sample here: the supervisor never loaded MLflow
    #: (a job shorter than the sampling interval), so no sample of it was recorded.
    sample: bool

    @property
    def name(self) -> str:
        return f"{self.job_id}-{self.attempt}"


@dataclass(frozen=True)
class Answer:
    """What went wrong, if anything (the run and the job stay as they are)."""

    end_error: str | None = None
    logs_error: str | None = None


def hand_over(home: Path, tail: Tail, timeout: float = ANSWER_TIMEOUT) -> Answer:
    """Ask the user's tail process to do ``tail`` (starting one if none runs), and wait
    for its answer."""
    spool = private_dir(home / "tails")
    request, answer = spool / f"{tail.name}.json", spool / f"{tail.name}.done"
    answer.unlink(missing_ok=True)
    tmp = spool / f".{tail.name}.tmp"
    write_private(tmp, json.dumps(asdict(tail)))
    tmp.replace(request)
    ensure_running(home)
    deadline = time.monotonic() + timeout
    checked = time.monotonic()
    while not answer.exists():
        if time.monotonic() > deadline:
            request.unlink(missing_ok=True)
            return Answer("no answer from the tail process", "no answer from the tail process")
        if time.monotonic() - checked > 1.0:  # it may have died with the request pending
            checked = time.monotonic()
            ensure_running(home)
        time.sleep(POLL)
    try:
        done = json.loads(answer.read_text())
    finally:
        answer.unlink(missing_ok=True)
    return Answer(done.get("end_error"), done.get("logs_error"))


def ensure_running(home: Path) -> None:
    """Start the tail process unless one holds the lock. Requests are written first: a
    process leaving as this runs looks for them again once it has let the lock go."""
    spool = private_dir(home / "tails")
    fd = os.open(spool / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # one runs
    finally:
        os.close(fd)  # closing lets the lock go
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIR_JOB", "MLFLOW_RUN"))}
    with open(spool / "tails.log", "ab", opener=_private) as out:
        subprocess.Popen(
            [sys.executable, "-m", "jupyter_air.jobs.run_tails", str(home)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,  # a signal to the supervisor's group is not for it
            env=env,
            cwd="/",
        )


def _private(path: str | os.PathLike[str], flags: int) -> int:
    return os.open(path, flags, 0o600)


class TailProcess:
    """The loop of the process: take requests in order, one at a time."""

    def __init__(self, home: Path) -> None:
        self.spool = home / "tails"
        self._clients: dict[str, Any] = {}

    def serve(self, lock_fd: int) -> None:
        idle_since = time.monotonic()
        while self.spool.is_dir():
            pending = self._pending()
            if pending:
                for request in pending:
                    self._do(request)
                idle_since = time.monotonic()
                continue
            if time.monotonic() - idle_since < IDLE_EXIT:
                time.sleep(POLL)
                continue
            fcntl.flock(lock_fd, fcntl.LOCK_UN)
            if not self._pending():
                return
            try:  # a request came as this process was leaving
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another process took over
            idle_since = time.monotonic()

    def _pending(self) -> list[Path]:
        found = []
        for path in self.spool.glob("*.json"):
            with contextlib.suppress(OSError):
                found.append((path.stat().st_mtime, path))
        return [path for _, path in sorted(found)]

    def _do(self, request: Path) -> None:
        try:
            tail = Tail(**json.loads(request.read_text()))
        except (OSError, ValueError, TypeError) as err:
            log.error("unreadable request %s: %r", request.name, err)
            request.unlink(missing_ok=True)
            return
        answer = self.finish(tail)
        write_private(request.with_suffix(".tmp"), json.dumps(asdict(answer)))
        request.with_suffix(".tmp").replace(request.with_suffix(".done"))
        request.unlink(missing_ok=True)

    def finish(self, tail: Tail) -> Answer:
        """The last sample, the run's end, then the logs: each failure only noted."""
        from ..tracking import runs

        end_error = logs_error = None
        try:
            client = self._client(tail.tracking_uri)
            if tail.sample:
                _last_sample(tail)
            runs.end_run(client, tail.run_id, tail.status)
        except Exception as err:
            end_error = repr(err)
        try:
            attach_logs(self._client(tail.tracking_uri), tail.run_id, Path(tail.attempt_dir))
        except Exception as err:
            logs_error = repr(err)
            with contextlib.suppress(Exception):
                client = self._client(tail.tracking_uri)
                client.set_tag(tail.run_id, "air.logs", f"not attached: {err!r}"[:500])
        return Answer(end_error, logs_error)

    def _client(self, tracking_uri: str) -> Any:
        if tracking_uri not in self._clients:
            from mlflow import MlflowClient

            self._clients[tracking_uri] = MlflowClient(tracking_uri)
        return self._clients[tracking_uri]


def _last_sample(tail: Tail) -> None:
    """One system-metrics sample of this machine into the run, as the supervisor's
    monitor takes at its end, so even a short run has its figures."""
    from ..tracking.guard import RunGuard
    from ..tracking.system_metrics import RunMetrics

    try:
        RunMetrics(tail.run_id, tail.tracking_uri, 10.0, None, RunGuard()).finish()
    except Exception as err:  # the run's end still comes
        log.warning("last system-metrics sample of run %s not taken: %s", tail.run_id, err)


def attach_logs(client: Any, run_id: str, attempt_dir: Path) -> None:
    """Each rank's output as plain text artifacts ``logs/node_N/rank_R.log``, so
    MLflow's own UI shows them; line by line, so a log of any size costs no memory."""
    files = AttemptDir(attempt_dir)
    with tempfile.TemporaryDirectory() as tmp:
        for log_file in files.rank_logs():
            target = Path(tmp) / log_file.path.relative_to(files.logs)
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("w", encoding="utf-8") as out:
                for text in plain_lines(log_file.path):
                    out.write(f"{text}\n")
        if any(Path(tmp).iterdir()):
            client.log_artifacts(run_id, tmp, artifact_path=files.logs.name)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    home = Path(argv[0])
    spool = home / "tails"
    try:
        fd = os.open(spool / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (BlockingIOError, FileNotFoundError):
        return 0  # another one runs, or the store is gone
    TailProcess(home).serve(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
