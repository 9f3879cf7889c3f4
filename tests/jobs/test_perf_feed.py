"""The supervisor journals the ranks' step time and throughput into the attempt's run
(issue 38, item 1): ``perf/step_time``, ``perf/samples_per_s``, ``perf/tokens_per_s``,
and each rank's step time when several mark steps; at the job's training step, once
per new mark, with the ranks' last figures at the attempt's end; a warm session's into
its latest cell's run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_air.job_dir import AttemptDir, JobDir
from jupyter_air.jobs.sessions import cells
from jupyter_air.jobs.supervision.perf_feed import PerfFeed
from jupyter_air.tracking import journal


def mark(files: AttemptDir, rank: int, steps: range, every: float) -> None:
    with (files.perf / f"rank-{rank}.jsonl").open("a") as f:
        for s in steps:
            line = {"s": s, "t": 1000.0 + s * every, "dt": every, "n": 4, "k": 64, "src": "hf"}
            f.write(json.dumps(line) + "\n")


def points(files: AttemptDir) -> dict[str, list[tuple[int, float]]]:
    found: dict[str, list[tuple[int, float]]] = {}
    for line, _ in journal.read(files.metrics_journal, 0):
        for point in line:
            assert point.run_id == "run-1"
            found.setdefault(point.key, []).append((point.step, point.value))
    return found


def test_the_marks_become_the_runs_perf_metrics_once_each(tmp_path: Path) -> None:
    files = AttemptDir(tmp_path / "attempt_1").make()
    feed = PerfFeed(files, "run-1", interval=3600)
    assert files.perf.is_dir(), "made before the ranks start, for their AIR_PERF_DIR"
    feed.look()
    assert not files.metrics_journal.exists(), "no step marked: nothing journaled"
    mark(files, 0, range(1, 11), 0.5)
    mark(files, 1, range(1, 11), 0.25)
    feed.look()
    feed.look()  # nothing new: nothing again
    mark(files, 0, range(11, 13), 0.5)
    feed.finish()
    got = points(files)
    assert [step for step, _ in got["perf/step_time"]] == [10, 12]
    assert got["perf/step_time"][0][1] == pytest.approx(0.5), "the leading rank's"
    assert got["perf/step_time/rank_1"][0][1] == pytest.approx(0.25)
    assert got["perf/samples_per_s"][0][1] == pytest.approx(4 / 0.5 + 4 / 0.25)
    assert got["perf/tokens_per_s"][0][1] == pytest.approx(64 / 0.5 + 64 / 0.25)


def test_a_warm_sessions_cell_gets_its_own_marks_in_its_own_run(tmp_path: Path) -> None:
    job = JobDir(tmp_path / "job")
    files = job.attempt(1).make()
    feed = PerfFeed(files, "run-1", interval=3600)
    cell2 = files.late_cell(2)
    cell2.perf.mkdir(parents=True)
    cells.set_latest(job, cells.LatestCell(2, "cell-run-2", started=1000.0))
    mark(cell2, 0, range(1, 5), 0.5)
    feed.look()
    cells.set_latest(job, cells.LatestCell(3, "", started=1010.0, previous_ended=1009.0))
    cell3 = files.late_cell(3)  # run before its run could be made: its own journal
    cell3.perf.mkdir(parents=True)
    mark(cell3, 0, range(1, 3), 0.25)
    feed.finish()
    (line,) = journal.read(files.metrics_journal, 0)
    assert {(p.run_id, p.key, p.step) for p in line[0]} >= {("cell-run-2", "perf/step_time", 4)}
    (late,) = journal.read(cell3.metrics_journal, 0)
    assert {(p.run_id, p.key, p.step) for p in late[0]} >= {("", "perf/step_time", 2)}
