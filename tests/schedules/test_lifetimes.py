"""Our background processes leave once nothing is left for them (docs/processes.md): here
the scheduler, whose store was deleted. The courier's case is in tests/notify/test_notify.py,
the tail process's in tests/tracking/test_run_tails.py."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from jupyter_air.identity import Identity
from jupyter_air.jobs.store import JobStore
from jupyter_air.procs import alive
from jupyter_air.schedules.scheduler import ensure_scheduler
from jupyter_air.schedules.service import Schedules
from tests.schedules.test_schedule_tick import Clock
from tests.waits import until


def test_a_scheduler_whose_store_is_deleted_leaves_at_its_next_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "air"
    monkeypatch.setenv("AIR_HOME", str(home))
    schedules = Schedules(JobStore(home), Clock())
    doc = {
        "name": "yearly",
        "schedule": {"quartz_cron_expression": "0 0 0 1 1 ?"},
        "tasks": [{"task_key": "train", "workload": {"command": "python train.py"}}],
    }
    schedules.create(
        Identity("alice"), schedules.parse(doc, tmp_path), tracking_uri="sqlite:///x.db"
    )
    info = ensure_scheduler(schedules.jobs)
    assert info is not None
    shutil.rmtree(home)  # the user removed the store (a test's folder, a cleanup)
    os.kill(info.pid, signal.SIGUSR1)  # its next look, without waiting for it
    until(lambda: not alive(info.pid, info.started), "the scheduler gone", timeout=30)
    assert not home.exists(), "no new store is made for it"
