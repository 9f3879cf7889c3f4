"""What a notebook task runs before the notebook's own cells, and where it keeps the
executed notebook (tests/schedules/test_schedule_e2e.py runs a notebook task for real)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest

from jupyter_air.jobs.store import JobStore
from jupyter_air.schedules import executed
from jupyter_air.schedules.notebook_task import loads_air, parameters_cell
from tests.factories import job_spec


def notebook(*sources: str) -> Any:
    cells = [{"cell_type": "code", "source": s, "metadata": {}, "outputs": []} for s in sources]
    return nbformat.from_dict({"cells": cells, "metadata": {}, "nbformat": 4})  # type: ignore[no-untyped-call]


@pytest.mark.parametrize(
    ("sources", "loads"),
    [
        (["%load_ext jupyter_air", "%%air_distributed -n 2\nprint(1)"], True),
        (["import os\n  %load_ext autoreload jupyter_air\nx = 1"], True),
        (["%%air_distributed -n 1\nprint(1)"], False),
        (["%load_ext jupyter_air_other", "# %load_ext jupyter_air"], False),
    ],
)
def test_a_notebook_that_loads_jupyter_air_itself_is_seen_to(
    sources: list[str], loads: bool
) -> None:
    assert loads_air(notebook(*sources)) is loads


def test_the_parameters_cell_loads_jupyter_air_only_for_a_notebook_that_does_not() -> None:
    """Else the notebook's own %load_ext says "already loaded" in its output and the
    task's log."""
    assert parameters_cell({"lr": 0.1}) == "%load_ext jupyter_air\nlr = 0.1"
    assert parameters_cell({"lr": 0.1}, load_air=False) == "lr = 0.1"


def test_the_newest_attempts_executed_notebook_is_found_and_private(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "air")
    job = store.create(job_spec("command", command=["true"])).id
    assert executed.latest(store, job) is None
    store.start_attempt(job, 1, None)
    first = executed.keep(store, job, 1, "report.ipynb", "{}")
    store.start_attempt(job, 2, None)
    assert executed.latest(store, job) == executed.Executed(job, 1, first), "2 still runs"
    second = executed.keep(store, job, 2, "../report.ipynb", "{}")
    assert second.parent.parent == store.attempt_dir(job, 2), "a name, not a path"
    assert executed.latest(store, job) == executed.Executed(job, 2, second)
    assert second.stat().st_mode & 0o777 == 0o600
    assert executed.latest(store, "20990101-000000-abcdef") is None
