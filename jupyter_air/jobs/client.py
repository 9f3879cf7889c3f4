"""Submitting jobs, following their output, cancelling them: for the kernel and the CLI."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..logs.capture import parse_record
from ..logs.query import read_records
from ..paths import private_opener, write_private
from .permissions import Grant
from .spec import Workload
from .store import Job, JobStore


def submit(
    store: JobStore,
    workload: Workload,
    payload: bytes | None,
    job_id: str | None = None,
    watch_pid: int | None = None,
    owner: str | None = None,
    grants: tuple[Grant, ...] = (),
) -> Job:
    """Record the job (owned by ``owner``, the OS user by default, with ``grants``) and
    start its supervisor in a session of its own.

    With ``watch_pid`` the job is cancelled when that process (the kernel) dies.
    """
    job = store.create(workload, job_id=job_id, owner=owner, grants=grants)
    job_dir = store.job_dir(job.id)
    if payload is not None:
        write_private(job_dir / "payload.pkl", payload)
    argv = [sys.executable, "-m", "jupyter_air.jobs.supervisor", job.id]
    if watch_pid is not None:
        argv += ["--watch-pid", str(watch_pid)]
    with open(job_dir / "supervisor.log", "ab", opener=private_opener) as out:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "AIR_HOME": str(store.home)},
        )
    store.update(job.id, supervisor_pid=process.pid, supervisor_host=socket.gethostname())
    return store.get(job.id)


class Elsewhere(RuntimeError):
    """The job's supervisor runs on another machine sharing this job store."""


def cancel(store: JobStore, job_id: str) -> bool:
    """Ask the job's supervisor to stop every rank. False if it already ended."""
    job = store.get(job_id)
    if job.done or job.supervisor_pid is None:
        return False
    if not job.supervised_here:
        raise Elsewhere(f"job {job_id} is supervised on {job.supervisor_host}: cancel it there")
    try:
        os.kill(job.supervisor_pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    return True


def wait(store: JobStore, job_id: str, timeout: float) -> Job:
    deadline = time.monotonic() + timeout
    job = store.get(job_id)
    while not job.done and time.monotonic() < deadline:
        time.sleep(0.05)
        job = store.get(job_id)
    return job


@dataclass(frozen=True)
class Record:
    attempt: int
    node: int
    rank: int
    ts: float
    kind: str  # O / E: a line of stdout / stderr; o / e: a progress update
    level: str  # info, warning, error
    text: str


class LogFollower:
    """Reads the records rank log files gained since the last call, attempt by attempt."""

    def __init__(self, store: JobStore, job_id: str) -> None:
        self._job_dir = store.job_dir(job_id)
        self._offsets: dict[Path, int] = {}

    def poll(self) -> list[Record]:
        records: list[Record] = []
        for path, attempt, node, rank in self._files():
            records.extend(self._read(path, attempt, node, rank))
        records.sort(key=lambda r: (r.attempt, r.ts))
        return records

    def _files(self) -> Iterator[tuple[Path, int, int, int]]:
        for attempt_dir in sorted(self._job_dir.glob("attempt_*"), key=_number):
            for node_dir in sorted((attempt_dir / "logs").glob("node_*"), key=_number):
                for path in sorted(node_dir.glob("rank_*.log"), key=_number):
                    yield path, _number(attempt_dir), _number(node_dir), _number(path)

    def _read(self, path: Path, attempt: int, node: int, rank: int) -> list[Record]:
        """The records ended since the last call, read as the logs view reads them: a
        window at a time, a record of any length whole (or cut with a marker), one still
        being written left for the next call."""
        out = []
        offset = self._offsets.get(path, 0)
        while True:
            data, end, eof = read_records(path, offset)
            for line in data.decode("utf-8", errors="replace").split("\n")[:-1]:
                parsed = parse_record(line)
                if parsed is not None:
                    out.append(Record(attempt, node, rank, *parsed))
            done, offset = eof or end == offset, end
            if done:
                break
        self._offsets[path] = offset
        return out


def _number(path: Path) -> int:
    return int(path.stem.rsplit("_", 1)[1])
