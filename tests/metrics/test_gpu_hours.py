"""GPU-hours per user from the jobs' own records (issue 41, item 3): a scripted day of
two users' jobs, counted by ``metrics.gpu_hours``, as the usage view and ``air usage``
show them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jupyter_air.identity import os_user
from jupyter_air.jobs.store import JobStore
from jupyter_air.metrics.gpu_hours import gpu_hours, usage_document, window_seconds
from tests.air_cli import air
from tests.metrics.usage_day import HOUR, scripted_day

NOW = 1_765_000_000.0


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobStore:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    return JobStore()


def test_a_day_of_two_users_jobs_in_gpu_hours_idle_hours_and_jobs(
    store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    day = scripted_day(monkeypatch, store, "alice", "bob", NOW)
    users = gpu_hours(store, store.jobs(), NOW - 24 * HOUR, NOW, idle_threshold=5.0)

    alice, bob = users
    assert (alice.user, alice.gpu_hours, alice.idle_gpu_hours) == ("alice", 5.5, 3.0)
    assert [(j.name, j.gpus, j.gpu_hours, j.idle_gpu_hours) for j in alice.jobs] == [
        ("train", 2, 4.0, 2.0),  # its GPU 1 idle the whole time
        ("retry", 1, 1.5, 1.0),  # two attempts; GPU 0 idle in the second only
    ]
    # only the 2 h of "overnight" inside the day; "yesterday" ended before it
    assert (bob.user, bob.gpu_hours, bob.idle_gpu_hours) == ("bob", 2.0, 2.0)
    assert [j.job for j in bob.jobs] == [day.jobs["overnight"]]


def test_the_documents_owner_keeps_to_their_own_jobs_and_the_window_is_checked(
    store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripted_day(monkeypatch, store, "alice", "bob", NOW)
    doc = usage_document(store, "bob", "24h", NOW, 5.0)  # bob may view "train": not his
    assert [u["user"] for u in doc["users"]] == ["bob"]
    week = usage_document(store, None, "7d", NOW, 5.0)["users"]  # everyone's: an admin's
    assert [(u["user"], u["gpu_hours"]) for u in week] == [("bob", 6.0), ("alice", 5.5)]
    assert window_seconds("7d") == 7 * 24 * HOUR
    for bad in ("", "24", "0h", "1w", "-1d", "99999d"):
        with pytest.raises(ValueError, match="a window is hours or days"):
            window_seconds(bad)


def test_air_usage_gives_the_os_users_own_hours_as_json(
    store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    scripted_day(monkeypatch, store, os_user(), "mallory", now)
    doc = json.loads(air("usage", "--since", "7d", "--output", "json").stdout)
    (me,) = doc["users"]  # mallory's jobs are not shown
    assert me["user"] == os_user()
    assert me["gpu_hours"] == pytest.approx(5.5)
    assert me["idle_gpu_hours"] == pytest.approx(3.0)
    assert [job["name"] for job in me["jobs"]] == ["train", "retry"]
    text = air("usage").stdout
    assert f"  {os_user()}: 5.50 GPU-hours, 3.00 idle\n" in text
    refused = air("usage", "--since", "week")
    assert refused.returncode == 1
    assert "air: --since: a window is hours or days, e.g. 24h or 7d; got 'week'" in refused.stderr
