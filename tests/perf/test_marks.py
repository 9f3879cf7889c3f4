"""A rank's step marks (issue 38): one line per step appended to its own file, private to
the user; the highest source wins; a log_metrics cadence of every k steps gives the time
of one step; a warm session's next cell writes to its own folder; nothing of ours ever
stops the training (a folder gone, a listener that raises)."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.perf import marks
from jupyter_air.perf.marks import Phase, Source


@pytest.fixture
def perf_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "perf"
    folder.mkdir()
    monkeypatch.setenv("AIR_PERF_DIR", str(folder))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.delenv("AIR_PERF", raising=False)
    monkeypatch.setattr(marks, "_made", None)
    monkeypatch.setattr(marks, "_missing", None)
    return folder


def lines(perf_dir: Path, rank: int = 3) -> list[dict[str, Any]]:
    text = (perf_dir / f"rank-{rank}.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def current() -> marks.Marks:
    found = marks.current()
    assert found is not None
    return found


def test_each_step_is_one_line_of_this_ranks_private_file(perf_dir: Path) -> None:
    m = current()
    m.begin()
    m.step(Source.HF, 1, samples=8, tokens=512)
    m.phase(Phase.DATA, 0.25)
    m.phase(Phase.DATA, 0.25)
    m.step(Source.HF, 2, samples=8)
    m.plan(Source.HF, 100)
    m.plan(Source.HF, 100)
    m.note(flops=1.5e9, how="6nd")
    first, second, plan, note = lines(perf_dir)
    assert first["s"] == 1
    assert first["n"] == 8
    assert first["k"] == 512
    assert first["src"] == "hf"
    assert "ph" not in first
    assert first["dt"] >= 0
    assert second["ph"] == {"data": 0.5}
    assert "k" not in second
    assert plan["plan"] == 100, "a plan is written again only when it changes"
    assert note["flops"] == 1.5e9
    assert note["how"] == "6nd"
    assert "t" in note
    assert stat.S_IMODE(os.stat(perf_dir / "rank-3.jsonl").st_mode) == 0o600


def test_a_higher_source_wins_and_lower_ones_are_then_ignored(perf_dir: Path) -> None:
    m = current()
    m.step(Source.LOOP, 10)
    m.step(Source.HF, 1, samples=4)
    m.step(Source.LOOP, 20)
    m.plan(Source.LOOP, 7)
    m.step(Source.HF, 2, samples=4)
    assert [(line["s"], line["src"]) for line in lines(perf_dir)] == [
        (10, "loop"),
        (1, "hf"),
        (2, "hf"),
    ]


def test_a_cadence_of_k_steps_gives_the_time_of_one_step(
    perf_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = iter([100.0, 101.0, 105.0, 105.5, 109.0])
    monkeypatch.setattr(time, "time", lambda: next(clock))
    m = current()  # created at 100
    m.step(Source.LOOP, 0)  # 101: 1 s since the rank began marking
    m.step(Source.LOOP, 4)  # 105: 4 steps in 4 s
    m.step(Source.LOOP, 4)  # 105.5: the same step logged again is no step
    m.step(Source.LOOP, 8)  # 109
    assert [(line["s"], line["dt"]) for line in lines(perf_dir)] == [(0, 1.0), (4, 1.0), (8, 1.0)]


def test_a_step_number_going_back_starts_the_count_again(perf_dir: Path) -> None:
    m = current()
    for number in (1, 2, 3, 1, 2):
        m.step(Source.STEP, number)
    assert [line["s"] for line in lines(perf_dir)] == [1, 2, 3, 2]
    m.step(Source.STEP)
    assert lines(perf_dir)[-1]["s"] == 3, "no number: the next one"


def test_a_warm_sessions_next_cell_marks_into_its_own_folder(
    perf_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = current()
    heard: list[int] = []
    m.on_step(heard.append)
    m.step(Source.STEP)
    m.step(Source.STEP)
    cell2 = tmp_path / "cell2"
    cell2.mkdir()
    monkeypatch.setenv("AIR_PERF_DIR", str(cell2))
    assert current() is m, "the same marks, listeners kept"
    m.step(Source.LOOP, 5)
    assert [line["s"] for line in lines(cell2)] == [5], "a fresh numbering and source"
    assert heard == [1, 2, 5]


def test_marks_are_off_without_a_folder_or_with_air_perf_0(
    perf_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_PERF", "0")
    assert marks.current() is None
    monkeypatch.delenv("AIR_PERF")
    monkeypatch.setenv("AIR_PERF_DIR", str(tmp_path / "missing"))
    assert marks.current() is None
    monkeypatch.delenv("AIR_PERF_DIR")
    assert marks.current() is None


def test_a_listener_that_raises_is_dropped_with_one_line(
    perf_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = current()
    heard: list[int] = []

    def broken(step: int) -> None:
        raise RuntimeError("boom")

    m.on_step(broken)
    unsubscribe = m.on_step(heard.append)
    m.step(Source.STEP)
    m.step(Source.STEP)
    unsubscribe()
    m.step(Source.STEP)
    assert heard == [1, 2]
    err = capsys.readouterr().err
    assert err.count("[air] step listener") == 1
    assert "RuntimeError('boom')" in err
    assert len(lines(perf_dir)) == 3


def test_a_folder_that_goes_away_turns_the_marks_off_with_one_line(
    perf_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = current()
    perf_dir.rmdir()
    m.step(Source.STEP)
    m.step(Source.STEP)
    assert capsys.readouterr().err.count("[air] step marks are off") == 1


def test_a_line_cut_short_is_skipped_and_one_being_written_is_left_for_later() -> None:
    data = b'{"s":1,"t":1.0}\n{"s":2,"t"\n{"s":3,"t":3.0}\n{"s":4,'
    found, used = marks.parse(data)
    assert [line["s"] for line in found] == [1, 3]
    assert data[used:] == b'{"s":4,'
