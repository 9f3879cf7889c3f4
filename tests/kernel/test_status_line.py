"""The cell's status line says how far its job is (issue 38, item 3): the step, the
planned length, the ETA and the MFU, from the attempt's step marks (a warm session's
cell: its own), read again every few seconds while it runs and once at its end. In
process: an IPython shell's displays, captured."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from jupyter_air.job_dir import JobDir
from jupyter_air.kernel import display
from jupyter_air.kernel.display import JobView
from tests.marks import write_marks

JOB = "20261206-090000-abc123"


@pytest.fixture
def job_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[JobDir]:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    InteractiveShell.instance()
    yield JobDir.under(tmp_path / "air", JOB)
    InteractiveShell.clear_instance()


def status_lines(view: JobView, *statuses: str) -> list[str]:
    """The status line's text after each of ``statuses`` (attempt 1 of 1)."""
    with capture_output() as captured:
        for status in statuses:
            view.status(status, 1, 1)
    return [output.data["text/plain"] for output in captured.outputs]


def test_the_status_line_says_the_progress_while_it_runs_and_no_eta_at_its_end(
    job_dir: JobDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    view = JobView(JOB, "all")
    (before,) = status_lines(view, "RUNNING")
    assert before.startswith("running · ")
    assert before.endswith(" · attempt 1/1")

    write_marks(job_dir.attempt(1).path, steps=100, every=0.6, end=time.time(), plan=1000)
    (soon,) = status_lines(view, "RUNNING")
    assert soon.endswith(" · attempt 1/1"), "marks are read every PROGRESS_EVERY seconds"
    monkeypatch.setattr(display, "PROGRESS_EVERY", 0.0)
    (running,) = status_lines(view, "RUNNING")
    assert " · attempt 1/1 · step 100 / 1,000 (10 %), ETA " in running
    assert running.endswith(" (9 min)")

    monkeypatch.setattr(display, "PROGRESS_EVERY", 3600.0)
    (ended,) = status_lines(view, "SUCCEEDED")  # read once more at the end: no ETA
    assert ended.startswith("succeeded · ")
    assert ended.endswith(" · attempt 1/1 · step 100 / 1,000 (10 %)")


def test_a_session_cells_status_line_says_its_own_progress(job_dir: JobDir) -> None:
    write_marks(job_dir.attempt(1).path, steps=500, plan=None)  # not this cell's
    write_marks(
        job_dir.attempt(1).late_cell(2).path,
        ranks=1,
        steps=40,
        every=0.25,
        end=time.time(),
        plan=None,
    )
    (line,) = status_lines(JobView(JOB, "all", cell=2), "RUNNING")
    assert line.endswith(" · cell 2 · step 40, 4.0 steps/s")
