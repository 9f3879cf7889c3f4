"""``%air_schedule`` in a real kernel: it schedules a snapshot of the kernel's notebook
(``JPY_SESSION_NAME``), lists, pauses, resumes and deletes schedules, and refuses bad
input in one line. The crons here are far from now: nothing fires (the end-to-end firing
is tests/schedules/test_schedule_e2e.py's); the scheduler process the magic starts is stopped at
the end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_air.jobs.store import JobStore
from jupyter_air.schedules import scheduler
from jupyter_air.schedules.service import Schedules
from tests.kernel.conftest import Execution, Kernel

#: Every test drives a real kernel: left to make test.
pytestmark = pytest.mark.heavy


def notebook(text: str) -> str:
    cell = {"id": "c1", "cell_type": "code", "source": text, "metadata": {}, "outputs": []}
    cell["execution_count"] = None
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


@pytest.fixture(scope="module")
def kernel_env(kernel_env: dict[str, str]) -> dict[str, str]:
    return {**kernel_env, "JUPYTER_USER": "ada", "JUPYTERHUB_USER": "ada"}


@pytest.fixture(scope="module")
def train(air_home: Path) -> Iterator[Path]:
    """The kernel's notebook, saved; the scheduler is stopped when the module ends."""
    path = air_home / "notebooks" / "train.ipynb"
    path.parent.mkdir(exist_ok=True)
    path.write_text(notebook("print('version 1')"))
    yield path
    scheduler.stop(air_home)


def schedules(air_home: Path) -> Schedules:
    return Schedules(JobStore(air_home))


def refused(execution: Execution) -> str:
    """The one-line UsageError a bad line gets (IPython prints it on stderr)."""
    assert execution.stderr.startswith("UsageError: "), execution.text
    (line,) = execution.stderr.strip().splitlines()
    return line


def test_scheduling_takes_a_snapshot_of_the_saved_notebook_and_says_what_runs(
    kernel: Kernel, train: Path, air_home: Path
) -> None:
    out = kernel.run(
        '%air_schedule --cron "30 2 * * *" --timezone Europe/Paris -n 2 --experiment nightly'
    )
    assert out.error is None, out.traceback
    assert "Scheduled train" in out.stdout
    assert "02:30" in out.stdout
    assert "Europe/Paris" in out.stdout
    assert out.stdout.count("next: ") == 3
    assert "its code, not this kernel's variables" in out.stdout
    (made,) = schedules(air_home).store.schedules()
    assert made.owner == "ada"
    assert made.spec.experiment_name == "nightly"
    (task,) = made.spec.tasks
    assert "version 1" in (task.notebook or "")
    assert task.parameters == {"nproc_per_node": 2}  # for %%air_distributed -n {nproc_per_node}
    assert scheduler.running(air_home) is not None  # started, since a schedule exists


def test_scheduling_again_under_the_same_name_takes_a_new_snapshot(
    kernel: Kernel, train: Path, air_home: Path
) -> None:
    train.write_text(notebook("print('version 2')"))
    out = kernel.run('%air_schedule --cron "30 2 * * *" --timezone Europe/Paris')
    assert out.error is None, out.traceback
    assert "Updated (a new snapshot) train" in out.stdout
    (made,) = schedules(air_home).store.schedules()
    assert "version 2" in (made.spec.tasks[0].notebook or "")


def test_the_list_shows_each_schedule_its_state_and_its_cron_in_words(kernel: Kernel) -> None:
    out = kernel.run("%air_schedule list")
    assert out.error is None, out.traceback
    (line,) = out.stdout.strip().splitlines()
    assert line.startswith("train [")
    assert "active" in line
    assert "02:30" in line
    assert "last run no runs yet" in line


def test_pause_and_resume_by_name(kernel: Kernel, air_home: Path) -> None:
    paused = kernel.run("%air_schedule pause train")
    assert paused.error is None, paused.traceback
    assert "train: paused" in paused.stdout
    assert schedules(air_home).store.schedules()[0].paused
    assert "paused" in kernel.run("%air_schedule list").stdout
    resumed = kernel.run("%air_schedule resume train")
    assert "train: resumed; next " in resumed.stdout
    assert not schedules(air_home).store.schedules()[0].paused


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('%air_schedule --cron "61 * * * *"', "minute"),
        ('%air_schedule --cron "0 2 * * *" --timezone Mars/Olympus', "unknown time zone"),
        ('%air_schedule --cron "0 2 * * *" --name "two words"', "letters"),
        ("%air_schedule", "give --cron"),
        ("%air_schedule stop train", "unknown action 'stop'"),
        ("%air_schedule pause", "which schedule"),
        ("%air_schedule pause nosuch", "no schedule 'nosuch'"),
        ('%air_schedule --cron "0 2 * * *" --notebook missing.ipynb', "missing.ipynb"),
        ('%air_schedule --cron "0 2 * * *" -n 0', "ranks must be between 1 and 1024"),
        ('%air_schedule --cron "0 2 * * * --name x', "No closing quotation"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    kernel: Kernel, air_home: Path, line: str, says: str
) -> None:
    before = [s.spec for s in schedules(air_home).store.schedules()]
    assert says in refused(kernel.run(line))
    assert [s.spec for s in schedules(air_home).store.schedules()] == before


def test_a_scheduled_run_of_the_notebook_does_not_schedule_it_again(
    kernel: Kernel, air_home: Path
) -> None:
    """The notebook's own ``%air_schedule`` line runs again in each scheduled run."""
    from jupyter_air.schedules.launch import NOTEBOOK_ENV

    out = kernel.run(
        f"import os; os.environ['{NOTEBOOK_ENV}'] = 'nightly'\n"
        '%air_schedule --cron "0 3 * * *" --name again\n'
        f"del os.environ['{NOTEBOOK_ENV}']"
    )
    assert out.error is None, out.traceback
    assert "not scheduling again" in out.stdout
    assert [s.name for s in schedules(air_home).store.schedules()] == ["train"]


def test_the_help_says_what_a_scheduled_notebook_gets(kernel: Kernel) -> None:
    out = kernel.run("print(get_ipython().find_line_magic('air_schedule').__doc__)")
    assert "its code, not this" in " ".join(out.stdout.split())
    assert "--cron" in out.stdout


def test_delete_by_name(kernel: Kernel, air_home: Path) -> None:
    out = kernel.run("%air_schedule delete train")
    assert "train: deleted" in out.stdout
    assert schedules(air_home).store.schedules() == []
    assert "No schedules" in kernel.run("%air_schedule list").stdout
