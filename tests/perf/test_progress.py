"""Progress and ETA from the ranks' step marks (issue 38, item 3): a smoothed step time
that a slow first step and a log_metrics cadence of k steps do not throw off, the job's
throughput over all ranks, the line users read, and a reader that follows the files as
they grow (reading only what was appended) and starts a long job's file from its tail."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.perf import progress
from jupyter_air.perf.progress import Follower, Progress, duration, read


def write(path: Path, *lines: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)


def steady(first: int, last: int, every: float, start: float, **batch: int) -> list[dict[str, Any]]:
    return [
        {"s": s, "t": start + (s - first) * every, "dt": every, **batch, "src": "hf"}
        for s in range(first, last + 1)
    ]


def test_a_slow_first_step_leaves_the_step_time_and_the_eta_alone(tmp_path: Path) -> None:
    write(tmp_path / "rank-0.jsonl", {"plan": 1000, "src": "hf", "t": 0.0})
    write(tmp_path / "rank-0.jsonl", {"s": 1, "t": 30.0, "dt": 30.0, "src": "hf"})
    write(tmp_path / "rank-0.jsonl", *steady(2, 100, 0.5, 30.5))
    found = read(tmp_path)
    assert found is not None
    assert found.step == 100
    assert found.total == 1000
    assert found.step_time_s == pytest.approx(0.5)
    assert found.eta_s == pytest.approx(900 * 0.5)
    assert found.fraction() == pytest.approx(0.1)


def test_a_cadence_of_k_steps_counts_k_steps(tmp_path: Path) -> None:
    lines = [{"s": s, "t": 100 + s / 2, "dt": 0.5, "src": "loop"} for s in range(0, 200, 10)]
    write(tmp_path / "rank-0.jsonl", *lines)
    found = read(tmp_path)
    assert found is not None
    assert found.step == 190
    assert found.step_time_s == pytest.approx(0.5)
    assert found.total is None
    assert found.eta_s is None
    assert found.samples_per_s is None, "a plain loop's batch is not known"
    assert found.line() == "step 190, 2.0 steps/s"


def test_the_jobs_throughput_is_every_ranks_together(tmp_path: Path) -> None:
    for rank in (0, 1):
        write(tmp_path / f"rank-{rank}.jsonl", *steady(1, 50, 0.25, 10.0, n=8, k=1024))
    write(tmp_path / "rank-1.jsonl", {"flops": 1e12, "how": "6nd", "t": 30.0})  # not a step
    write(tmp_path / "rank-1.jsonl", {"cs": {"backward": 0.1}, "s": 50, "t": 30.0})  # nor this
    found = read(tmp_path)
    assert found is not None
    assert found.samples_per_s == pytest.approx(2 * 8 / 0.25)
    assert found.tokens_per_s == pytest.approx(2 * 1024 / 0.25)
    assert Follower(tmp_path).update() == found
    follower = Follower(tmp_path)
    follower.update()
    assert set(follower.rates()) == {0, 1}
    assert follower.rates()[1].step_time_s == pytest.approx(0.25)


def test_one_step_gives_no_step_time_and_no_mark_gives_no_progress(tmp_path: Path) -> None:
    assert read(tmp_path / "missing") is None
    write(tmp_path / "rank-0.jsonl", {"plan": 10, "src": "hf", "t": 0.0})
    assert read(tmp_path) is None
    write(tmp_path / "rank-0.jsonl", {"s": 1, "t": 30.0, "dt": 30.0, "src": "hf"})
    found = read(tmp_path)
    assert found is not None
    assert (found.step, found.step_time_s, found.eta_s) == (1, None, None)
    assert found.line() == "step 1 / 10 (10 %)"


def test_the_line_says_step_total_percent_eta_and_time_left() -> None:
    now = 1_800_000_000.0
    found = Progress(4210, 10_000, 0.24, 133.0, None, 23 * 60 + 10, now)
    ends = datetime.fromtimestamp(now + 23 * 60 + 10)
    clock = ends.strftime("%H:%M")
    if ends.date() != datetime.fromtimestamp(now).date():
        clock = f"{ends:%b} {ends.day} {clock}"
    assert found.line(now) == f"step 4,210 / 10,000 (42 %), ETA {clock} (23 min)"
    later = found.line(now + 10 * 60)
    assert later.endswith("(13 min)"), "the ETA counts down between marks"
    shown = found.to_json()
    assert shown["fraction"] == pytest.approx(0.421)
    assert shown["line"].startswith("step 4,210 / 10,000 (42 %), ETA ")
    assert Progress(10, None, 2.5, None, None, None, now).line() == "step 10, 2.5 s/step"
    assert [duration(s) for s in (45, 23 * 60, 2 * 3600 + 300, 3 * 86400 + 4 * 3600)] == [
        "45 s",
        "23 min",
        "2 h 05 min",
        "3 d 4 h",
    ]


def test_a_follower_reads_only_what_was_appended_and_waits_for_a_whole_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rank-0.jsonl"
    write(path, *steady(1, 10, 1.0, 0.0))
    follower = Follower(tmp_path)
    first = follower.update()
    assert first is not None
    assert first.step == 10
    with path.open("a") as f:
        f.write('{"s": 11, "t": 10.0, "dt"')
    partial = follower.update()
    assert partial is not None
    assert partial.step == 10
    with path.open("a") as f:
        f.write(': 1.0, "src": "hf"}\n')
    done = follower.update()
    assert done is not None
    assert done.step == 11


def test_a_long_jobs_file_is_read_from_its_tail_with_its_plan_from_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress, "TAIL_BYTES", 2000)
    monkeypatch.setattr(progress, "_CHUNK", 500)
    path = tmp_path / "rank-0.jsonl"
    write(path, {"plan": 5000, "src": "hf", "t": 0.0}, *steady(1, 400, 0.5, 1.0))
    follower = Follower(tmp_path)
    found = follower.update()
    assert found is not None
    assert (found.step, found.total) == (400, 5000)
    assert found.step_time_s == pytest.approx(0.5)
    assert len(follower._files[0].steps) < 100, "only the tail was read"


def test_a_new_numbering_in_the_same_file_starts_the_window_again(tmp_path: Path) -> None:
    write(tmp_path / "rank-0.jsonl", *steady(1, 20, 2.0, 0.0), *steady(1, 5, 0.1, 100.0))
    found = read(tmp_path)
    assert found is not None
    assert found.step == 5
    assert found.step_time_s == pytest.approx(0.1)
