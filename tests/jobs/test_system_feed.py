"""The one feed of every backend's system metrics into MLflow (issues 16 and 17),
through the attempt's journal (issue 23).

What is specified is which run each sample goes to, under which name, at which step and
time, as the journal (shipped to MLflow as it is) holds them; MLflow's run status is a
recorder.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from jupyter_air.job_dir import AttemptDir, JobDir
from jupyter_air.jobs.sessions.cells import LatestCell, set_latest
from jupyter_air.jobs.supervision import system_feed
from jupyter_air.jobs.supervision.system_feed import SystemMetricsFeed
from jupyter_air.tracking import journal
from jupyter_air.tracking.sampling import Sample
from tests.waits import until


@dataclass
class Journaled:
    """The attempt whose journal takes the samples, and what it holds."""

    attempt: AttemptDir

    @classmethod
    def at(cls, tmp_path: Path) -> Journaled:
        return cls(AttemptDir(tmp_path / "attempt_1").make())

    def of(self, run_id: str) -> list[tuple[str, float, int, int]]:
        """The run's points in the journal, in order."""
        lines = journal.read(self.attempt.metrics_journal, 0)
        points = [p for line, _ in lines for p in line if p.run_id == run_id]
        return [(p.key, p.value, p.step, p.timestamp) for p in points]


def sample(t: float, step: int, cpu: float = 5.0) -> Sample:
    return Sample(t, step, {"cpu_utilization_percentage": cpu})


def test_one_node_logs_under_mlflows_names_at_each_samples_own_step_and_time(
    tmp_path: Path,
) -> None:
    """Into the journal, without MLflow: a tracking server that is down loses none."""
    journaled = Journaled.at(tmp_path)
    feed = SystemMetricsFeed("run", journaled.attempt, 1)
    feed.add(0, [sample(100.0, 0, 5.0), sample(110.0, 1, 7.0)])
    feed.finish()
    assert journaled.of("run") == [
        ("system/cpu_utilization_percentage", 5.0, 0, 100_000),
        ("system/cpu_utilization_percentage", 7.0, 1, 110_000),
    ]
    assert feed.sampled


def test_several_nodes_log_each_under_its_node(tmp_path: Path) -> None:
    journaled = Journaled.at(tmp_path)
    feed = SystemMetricsFeed("run", journaled.attempt, 2)
    feed.add(1, [sample(100.0, 0)])
    feed.add(0, [sample(100.5, 0)])
    feed.finish()
    assert [key for key, *_ in journaled.of("run")] == [
        "system/node_1/cpu_utilization_percentage",
        "system/node_0/cpu_utilization_percentage",
    ]


def test_without_samples_nothing_is_logged(tmp_path: Path) -> None:
    attempt = AttemptDir(tmp_path / "attempt_1").make()
    feed = SystemMetricsFeed("run", attempt, 1)
    feed.add(0, [])
    feed.finish()
    assert not feed.sampled
    assert not attempt.metrics_journal.exists()


def test_a_sample_that_comes_after_the_attempts_end_is_dropped(tmp_path: Path) -> None:
    """A local node's loop still loading MLflow's monitors is not waited for at the end;
    what it samples then is not the run's: the run's tail samples instead."""
    journaled = Journaled.at(tmp_path)
    feed = SystemMetricsFeed("run", journaled.attempt, 1)
    feed.finish()
    feed.add(0, [sample(100.0, 0)])
    assert journaled.of("run") == []
    assert not feed.sampled


def test_a_sessions_samples_go_to_its_run_and_to_the_cell_whose_span_holds_them(
    tmp_path: Path,
) -> None:
    files = JobDir(tmp_path)
    journaled = Journaled.at(tmp_path)
    feed = SystemMetricsFeed("session", journaled.attempt, 2, files)
    set_latest(files, LatestCell(1, "cell-1", started=100.0))
    feed.add(0, [sample(99.0, 0), sample(101.0, 1), sample(102.0, 2)])
    feed.add(1, [sample(101.5, 0)])
    feed.flush()
    set_latest(files, LatestCell(1, "cell-1", started=100.0, ended=102.5))
    set_latest(files, LatestCell(2, "cell-2", started=103.0))
    feed.add(0, [sample(103.5, 3)])
    feed.finish()
    assert len(journaled.of("session")) == 5, "the session's run has every sample"
    assert [(key, step, t) for key, _, step, t in journaled.of("cell-1")] == [
        ("system/node_0/cpu_utilization_percentage", 0, 101_000),
        ("system/node_0/cpu_utilization_percentage", 1, 102_000),
        ("system/node_1/cpu_utilization_percentage", 0, 101_500),
    ], "the cell's own steps, from 0 on each node, at the samples' times"
    assert [(step, t) for _, _, step, t in journaled.of("cell-2")] == [(0, 103_500)]


def test_a_cell_whose_end_the_feed_never_saw_ends_when_the_kernel_says_not_at_the_next_start(
    tmp_path: Path,
) -> None:
    """The next cell can start milliseconds after one ends, between two looks at the
    file: a sample of that gap belongs to no cell."""
    files = JobDir(tmp_path)
    journaled = Journaled.at(tmp_path)
    feed = SystemMetricsFeed("session", journaled.attempt, 1, files)
    now = float(int(time.time()))
    set_latest(files, LatestCell(1, "cell-1", started=now - 4))
    feed.add(0, [sample(now - 3, 0)])
    feed.flush()
    set_latest(files, LatestCell(2, "cell-2", started=now - 1, previous_ended=now - 1.5))
    feed.add(0, [sample(now - 1.2, 1), sample(now - 0.5, 2)])
    feed.finish()
    assert [t for *_, t in journaled.of("cell-1")] == [int(now - 3) * 1000]
    assert [t for *_, t in journaled.of("cell-2")] == [int((now - 0.5) * 1000)]


def test_a_sample_taken_while_the_kernel_takes_a_cells_end_waits_for_that_end(
    tmp_path: Path,
) -> None:
    """The kernel marks the cell closing, then takes its end's time and writes it: a
    sample read in between may fall on either side, and goes where the end says."""
    files = JobDir(tmp_path)
    journaled = Journaled.at(tmp_path)
    feed = SystemMetricsFeed("session", journaled.attempt, 1, files)
    now = float(int(time.time()))
    running = LatestCell(1, "cell-1", started=now - 3)
    set_latest(files, running)
    feed.add(0, [sample(now - 2, 0)])
    feed.flush()
    set_latest(files, replace(running, closing=True))
    feed.add(0, [sample(now - 1, 1), sample(now - 0.2, 2)])
    feed.flush()
    assert len(journaled.of("cell-1")) == 1, "held until the end is known"
    set_latest(files, replace(running, ended=now - 0.5))
    until(  # the feed's next look at the cells file
        lambda: len(journaled.of("cell-1")) >= 2, "the held samples placed", 10, step=0.05
    )
    feed.finish()
    assert [(step, t) for _, _, step, t in journaled.of("cell-1")] == [
        (0, int(now - 2) * 1000),
        (1, int(now - 1) * 1000),
    ], "the one taken before the end is the cell's, the one after is not"
    assert len(journaled.of("session")) == 3


def test_samples_still_held_at_the_attempts_end_get_a_last_look_at_their_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(system_feed, "CELL_POLL", 3600.0)  # no look but the last
    files = JobDir(tmp_path)
    journaled = Journaled.at(tmp_path)
    feed = SystemMetricsFeed("session", journaled.attempt, 2, files)
    now = float(int(time.time()))
    closing = LatestCell(1, "cell-1", started=now - 3, closing=True)
    set_latest(files, closing)
    feed.add(0, [sample(now - 2, 0), sample(now - 1, 1)])
    feed.add(1, [sample(now - 1.5, 0)])
    feed.flush()
    assert journaled.of("cell-1") == []
    set_latest(files, replace(closing, closing=False, ended=now - 1.2))
    feed.finish()
    assert [(key, step, t) for key, _, step, t in journaled.of("cell-1")] == [
        ("system/node_0/cpu_utilization_percentage", 0, int(now - 2) * 1000),
        ("system/node_1/cpu_utilization_percentage", 0, int((now - 1.5) * 1000)),
    ]


def test_a_cell_shorter_than_the_interval_asks_for_a_sample_and_gets_the_next_one(
    tmp_path: Path,
) -> None:
    files = JobDir(tmp_path)
    journaled = Journaled.at(tmp_path)
    asked: list[float] = []
    feed = SystemMetricsFeed("session", journaled.attempt, 1, files)
    feed.ask_sample = lambda: asked.append(time.time())
    now = time.time()
    feed.add(0, [sample(now - 5, 0)])  # before the cell
    feed.flush()
    set_latest(files, LatestCell(1, "cell-1", started=now - 2, ended=now - 1))
    until(lambda: asked, "a sample asked for the cell that had none", 10, step=0.05)
    feed.add(0, [sample(now, 1)])  # the one asked for, after the cell's end
    feed.flush()
    feed.add(0, [sample(now + 10, 2)])  # the next: not the cell's
    feed.finish()
    assert [(step, t) for _, _, step, t in journaled.of("cell-1")] == [(0, int(now * 1000))]
    assert len(journaled.of("session")) == 3
