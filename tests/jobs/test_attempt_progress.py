"""An attempt's progress, ETA and MFU as every display shows them (issue 38, item 3),
from step marks files written as the ranks write them."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.gpu.peaks import peak
from jupyter_air.identity import os_identity
from jupyter_air.job_dir import AttemptDir, JobDir
from jupyter_air.jobs.attempt_progress import of_attempt, percent, with_mfu
from jupyter_air.jobs.documents import job_document
from jupyter_air.jobs.sessions import cells
from jupyter_air.jobs.store import JobStore
from tests.factories import job_spec
from tests.marks import write_marks

NODES = [
    {"node": n, "node_id": f"n{n}", "ip": "10.0.0.1", "hostname": f"gpu-{n}", "label": None}
    for n in (0, 1)
]


def test_a_running_attempt_says_its_eta_and_an_ended_one_none(tmp_path: Path) -> None:
    write_marks(tmp_path, steps=100, every=0.6, end=time.time(), plan=1000)
    shown = of_attempt(AttemptDir(tmp_path), running=True, world_size=2)
    assert shown is not None
    assert (shown.progress.step, shown.progress.total) == (100, 1000)
    assert shown.progress.eta_s == pytest.approx(900 * 0.6)
    assert shown.line().startswith("step 100 / 1,000 (10 %), ETA ")
    assert shown.line().endswith(" (9 min)")

    ended = of_attempt(AttemptDir(tmp_path), running=False, world_size=2)
    assert ended is not None
    assert ended.progress.eta_s is None
    assert ended.line() == "step 100 / 1,000 (10 %)"
    assert ended.to_json()["eta_s"] is None


def test_a_job_of_unknown_length_says_its_step_and_rate(tmp_path: Path) -> None:
    write_marks(tmp_path, ranks=1, steps=40, every=0.25, end=time.time(), plan=None)
    shown = of_attempt(AttemptDir(tmp_path), running=True)
    assert shown is not None
    assert shown.line() == "step 40, 4.0 steps/s"
    assert shown.to_json()["total"] is None


def test_nothing_is_said_before_the_first_step_or_without_marks(tmp_path: Path) -> None:
    assert of_attempt(AttemptDir(tmp_path), running=True) is None
    (tmp_path / "perf").mkdir()
    (tmp_path / "perf" / "rank-0.jsonl").write_text('{"plan": 10, "src": "hf", "t": 1.0}\n')
    assert of_attempt(AttemptDir(tmp_path), running=True) is None


def test_a_cluster_attempt_without_some_nodes_marks_gives_no_throughput(tmp_path: Path) -> None:
    """Node 1's ranks marked their steps on its own disk: the job's samples per second
    are not rank 0 and 1's alone, so none is said; its step and ETA still are."""
    AttemptDir(tmp_path).write_nodes(NODES)
    write_marks(tmp_path, ranks=2, steps=50, every=0.5, end=time.time(), batch={"n": 8})
    partial = of_attempt(AttemptDir(tmp_path), running=True, world_size=4)
    assert partial is not None
    assert (partial.progress.samples_per_s, partial.progress.tokens_per_s) == (None, None)
    assert partial.progress.step == 50
    assert partial.progress.eta_s is not None

    whole = of_attempt(AttemptDir(tmp_path), running=True, world_size=2)
    assert whole is not None
    assert whole.progress.samples_per_s == pytest.approx(2 * 8 / 0.5)


def test_the_mfu_is_said_beside_the_line_when_known() -> None:
    line = "step 4,210 / 10,000 (42 %), ETA 18:40 (23 min)"
    assert with_mfu(line, 0.4123) == f"{line} · MFU 41 %"
    assert with_mfu(line, None) == line
    assert percent(0.052) == "5.2 %"


def test_without_a_gpu_the_mfu_is_absent_and_says_why(tmp_path: Path) -> None:
    write_marks(tmp_path, steps=20, end=time.time())
    shown = of_attempt(AttemptDir(tmp_path), running=True)
    assert shown is not None
    assert shown.mfu.value is None
    assert shown.mfu.why
    assert "MFU" not in shown.line()
    assert shown.to_json()["mfu"] == {"value": None, "why": shown.mfu.why}


def test_with_a_known_gpu_the_mfu_is_beside_the_line(tmp_path: Path) -> None:
    """The fake driver's H100 (its NVML name) at 41 % of its bf16 peak, 0.5 s a step."""
    h100 = "NVIDIA H100 80GB HBM3"
    flops = 0.41 * peak(h100, "bf16").flops * 0.5
    line = {"flops": flops, "how": "counted", "dtype": "bf16", "gpu": h100}
    write_marks(tmp_path, ranks=1, steps=20, every=0.5, end=time.time(), flops=line)
    shown = of_attempt(AttemptDir(tmp_path), running=True)
    assert shown is not None
    assert shown.mfu.value == pytest.approx(0.41)
    assert shown.line().endswith(" · MFU 41 %")
    assert shown.to_json()["mfu"]["value"] == pytest.approx(0.41)


def test_a_display_reading_again_sees_the_steps_marked_since(tmp_path: Path) -> None:
    """A server's panels and a kernel's status line read an attempt again and again:
    each read takes what the ranks appended since the last."""
    write_marks(tmp_path, ranks=2, steps=20, every=0.5, end=time.time() - 10, plan=100)
    first = of_attempt(AttemptDir(tmp_path), running=True)
    assert first is not None
    assert first.progress.step == 20
    for rank in (0, 1):
        with (AttemptDir(tmp_path).perf / f"rank-{rank}.jsonl").open("a") as f:
            f.writelines(
                json.dumps({"s": s, "t": time.time() - (30 - s) * 0.5, "dt": 0.5, "src": "hf"})
                + "\n"
                for s in range(21, 31)
            )
    again = of_attempt(AttemptDir(tmp_path), running=True)
    assert again is not None
    assert (again.progress.step, again.progress.total) == (30, 100)


def test_a_warm_sessions_progress_is_its_latest_cells(store: JobStore) -> None:
    """Each cell of a session marks its steps in its own folder: the session's attempt
    shows its running cell's, and no ETA once that cell ended."""
    session = store.create(job_spec("session", command=["loop"]))
    store.update(session.id, status="RUNNING")
    store.start_attempt(session.id, 1, "run-s")
    files = JobDir(store.job_dir(session.id))
    write_marks(files.attempt(1).late_cell(1).path, ranks=1, steps=500, plan=None)
    cell = files.attempt(1).late_cell(2)
    write_marks(cell.path, ranks=1, steps=40, every=0.6, end=time.time(), plan=100)

    def shown() -> dict[str, Any] | None:
        doc = job_document(store, store.get(session.id), os_identity())
        progress: dict[str, Any] | None = doc["attempts"][0]["progress"]
        return progress

    assert shown() is None  # before its first cell
    cells.set_latest(files, cells.LatestCell(2, "run-c2", time.time()))
    running = shown()
    assert running is not None
    assert running["step"] == 40
    assert running["eta_s"] == pytest.approx(60 * 0.6)
    cells.set_latest(files, cells.LatestCell(2, "run-c2", time.time(), ended=time.time()))
    ended = shown()
    assert ended is not None
    assert (ended["step"], ended["eta_s"]) == (40, None)


def test_a_figure_that_is_not_a_number_is_unknown_in_the_api(tmp_path: Path) -> None:
    """A rank's code that gave ``jupyter_air.step`` a NaN batch: JSON has no NaN, and one
    would break every page listing the job."""
    write_marks(tmp_path, ranks=1, steps=20, end=time.time(), batch={"n": 8})
    with (AttemptDir(tmp_path).perf / "rank-0.jsonl").open("a") as f:
        f.write(json.dumps({"s": 21, "t": time.time(), "dt": 0.5, "n": math.nan, "src": "step"}))
        f.write("\n")
    shown = of_attempt(AttemptDir(tmp_path), running=True)
    assert shown is not None
    assert shown.to_json()["samples_per_s"] is None
    json.dumps(shown.to_json(), allow_nan=False)
