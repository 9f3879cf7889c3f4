"""What every ``air`` command shares: one-line errors, the jobs service as the OS
user, a job looked up for it, the run links it prints."""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
from datetime import datetime

from ..identity import os_identity
from ..jobs.permissions import (
    Forbidden,
    Level,
)
from ..jobs.service import JobService
from ..jobs.store import Job, JobStore, StoreError, UnknownJob
from ..paths import UnsafeHome


class CliError(Exception):
    """A reason to stop, said in one line."""


def _output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", choices=["text", "json"], default="text")


def _service(settle: bool = False) -> JobService:
    """The jobs service as the OS user; with ``settle``, once the jobs whose supervisor
    died are recorded as failed (what is shown is the same; the record keeps their end
    time), unless another process holds the database."""
    try:
        store = JobStore()
    except (UnsafeHome, StoreError) as err:
        raise CliError(str(err)) from None
    if settle:
        with contextlib.suppress(sqlite3.OperationalError):
            store.settle()
    from ..tracking.run_tails import resume_pending

    resume_pending(store.home)  # what a server that was down still owes: tried again
    return JobService(store, os_identity(), _run_link)


def _job(service: JobService, job_id: str, needed: Level = Level.CAN_VIEW) -> Job:
    """The job, if the OS user holds ``needed`` on it."""
    try:
        return service.get(job_id, needed)
    except UnknownJob:
        raise CliError(f"no job {job_id!r}") from None
    except Forbidden as err:
        raise CliError(str(err)) from None


def _run_link(tracking_uri: str, experiment_id: str, run_id: str) -> str | None:
    from ..tracking.ui_links import run_url, ui_base

    base = ui_base(tracking_uri, absolute=True)
    return run_url(base, experiment_id, run_id) if base else None


def _time(t: float | None) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t else "-"
