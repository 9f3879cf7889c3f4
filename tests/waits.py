"""Waits shared by the tests: on a condition, never a fixed sleep, with limits generous
enough for a loaded machine (CI shares its 2 cores with other work)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import psutil

from jupyter_air.jobs.store import Job, JobStore
from jupyter_air.procs import alive

T = TypeVar("T")


def until(
    check: Callable[[], T | Literal[False] | None],
    what: str,
    timeout: float = 120.0,
    step: float = 0.2,
    seen: Callable[[], object] | None = None,
) -> T:
    """``check()``'s first truthy value; fails naming ``what`` after ``timeout`` seconds,
    with what ``seen()`` says was there instead, where given."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() >= deadline:
            raise _not_after(what, timeout, seen)
        time.sleep(step)
    return found


async def until_async(
    check: Callable[[], T | Literal[False] | None],
    what: str,
    timeout: float = 120.0,
    step: float = 0.2,
    seen: Callable[[], object] | None = None,
) -> T:
    """``until`` for a test on the server's own event loop: it polls with ``asyncio.sleep``,
    so that the server it waits on keeps answering meanwhile."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() >= deadline:
            raise _not_after(what, timeout, seen)
        await asyncio.sleep(step)
    return found


def _not_after(what: str, timeout: float, seen: Callable[[], object] | None) -> AssertionError:
    there = f"; instead: {seen()!r}" if seen is not None else ""
    return AssertionError(f"{what}: not after {timeout:g} s{there}")


def answers(
    ask: Callable[[], object], process: subprocess.Popen[Any], log: Path
) -> Callable[[], bool]:
    """A check for ``until`` on a server being started: true once ``ask()`` raises no
    ``OSError``; fails at once, with the end of its ``log``, if ``process`` exits first."""

    def check() -> bool:
        try:
            ask()
        except OSError:
            if process.poll() is not None:
                raise AssertionError(
                    f"exited ({process.returncode}) before it answered:\n{log_tail(log)}"
                ) from None
            return False
        return True

    return check


def log_tail(log: Path, chars: int = 3000) -> str:
    """The end of a server's log, for a failure's message (``seen=``)."""
    return log.read_text(errors="replace")[-chars:] if log.exists() else f"(no {log})"


def job_processes(job_id: str) -> list[psutil.Process]:
    """Live processes of a job: its ranks and anything they started."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("AIR_JOB_ID") == job_id and proc.status() != "zombie":
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def children_running(needle: str) -> list[psutil.Process]:
    """This process's live descendants whose command line holds ``needle`` (a zombie an
    earlier test left, or a process that exits while looked at, is not one)."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if needle in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def assert_gone_within(job_id: str, since: float, seconds: float = 10.0) -> None:
    """Every process of the job gone ``seconds`` after ``since`` (a monotonic time)."""
    until(
        lambda: not job_processes(job_id),
        f"every process of job {job_id} gone {seconds:g} s after the kill",
        max(0.0, since + seconds - time.monotonic()),
        seen=lambda: _described(job_processes(job_id)),
    )


def _described(processes: list[psutil.Process]) -> list[tuple[int, str]]:
    described = []
    for proc in processes:
        try:
            described.append((proc.pid, proc.name()))
        except psutil.Error:
            continue
    return described


def wait_done(air_home: Path | JobStore, job_id: str, timeout: float = 60) -> Job:
    """The job once it ended."""
    store = air_home if isinstance(air_home, JobStore) else JobStore(air_home)
    return until(lambda: (job := store.get(job_id)).done and job, f"job {job_id} to end", timeout)


def wait_settled(air_home: Path | JobStore, job_id: str, timeout: float = 120) -> Job:
    """The job once it ended and its supervisor exited: its run's tail (its last points,
    its end, its logs), which comes after the outcome, is done too."""
    job = wait_done(air_home, job_id, timeout)
    supervised_until_its_end(job, timeout)
    return job


def supervised_until_its_end(job: Any, timeout: float = 60) -> None:
    """Once the job's supervisor has exited: what it writes after the job's end is done."""
    until(
        lambda: not (job.supervisor_pid and alive(job.supervisor_pid)),
        f"the supervisor of job {job.id} to end",
        timeout,
    )
