"""Waits shared by the tests: on a condition, never a fixed sleep, with limits generous
enough for a loaded machine (CI shares its 2 cores with other work)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psutil

from jupyter_air.jobs.store import Job, JobStore
from jupyter_air.procs import alive

T = TypeVar("T")


def until(
    check: Callable[[], T],
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
            there = f"; instead: {seen()!r}" if seen is not None else ""
            raise AssertionError(f"{what}: not after {timeout:g} s{there}")
        time.sleep(step)
    return found


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
    while (left := job_processes(job_id)) and time.monotonic() < since + seconds:
        time.sleep(0.2)
    described = [(p.pid, p.name()) for p in left if p.is_running()]
    assert not left, f"{seconds:g} s after the kill, job {job_id} still has {described}"


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
