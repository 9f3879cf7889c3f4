"""Schedule files: the issue's YAML read in, and every kind of bad input refused in one
line with nothing created."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_air.cli import main
from jupyter_air.schedules.model import CatchUp, PauseStatus, RunIf
from jupyter_air.schedules.schedule_file import ScheduleFileError, load

ISSUE_EXAMPLE = """\
name: nightly-train                       # required, unique per owner
schedule:
  quartz_cron_expression: "0 30 2 * * ?"  # Quartz: seconds first, ? in one day field
  timezone_id: Europe/Paris               # IANA name; default UTC
  pause_status: UNPAUSED                  # or PAUSED
max_concurrent_runs: 1                    # a run due while this many run is SKIPPED
catch_up: latest                          # after downtime: latest (one run) | none
tasks:
  - task_key: prep
    workload: {command: python prep.py, compute: {nproc_per_node: 1}}
  - task_key: train
    depends_on: [{task_key: prep}]
    run_if: ALL_SUCCESS                   # ALL_SUCCESS | ALL_DONE | NONE_FAILED
    experiment_name: nightly              # the task's runs go to this experiment
    workload: {file: train.yaml}          # or inline: the fields of a workload file
  - task_key: report
    notebook: report.ipynb                # a notebook, executed headless
    parameters: {lr: 0.001}               # injected as a first cell, as papermill does
"""

TRAIN = "experiment_name: train-exp\ncommand: python train.py --epochs 2\nmax_retries: 1\n"
NOTEBOOK = json.dumps(
    {
        "cells": [
            {
                "cell_type": "code",
                "id": "c1",
                "metadata": {},
                "source": "print(lr)",
                "outputs": [],
                "execution_count": None,
            }
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "train.yaml").write_text(TRAIN)
    (tmp_path / "report.ipynb").write_text(NOTEBOOK)
    (tmp_path / "s.yaml").write_text(ISSUE_EXAMPLE)
    return tmp_path


def test_the_issue_example_reads_with_its_workload_file_and_notebook_snapshot(
    folder: Path,
) -> None:
    spec = load(folder / "s.yaml")
    assert (spec.name, spec.cron, spec.dialect, spec.timezone) == (
        "nightly-train",
        "0 30 2 * * ?",
        "quartz",
        "Europe/Paris",
    )
    assert spec.pause_status is PauseStatus.UNPAUSED
    assert spec.catch_up is CatchUp.LATEST
    prep, train, report = spec.tasks
    assert prep.workload is not None
    assert prep.workload["command"] == "python prep.py"
    assert prep.workload["working_dir"] == str(folder.resolve())
    assert train.depends_on == ("prep",)
    assert train.run_if is RunIf.ALL_SUCCESS
    assert train.workload is not None
    assert train.workload["experiment_name"] == "train-exp"
    assert train.workload["max_retries"] == 1
    assert report.notebook == NOTEBOOK  # the snapshot: later edits change nothing
    assert report.parameters == {"lr": 0.001}
    (folder / "report.ipynb").write_text("changed")
    assert spec.tasks[2].notebook == NOTEBOOK


def edit(folder: Path, old: str, new: str) -> Path:
    path = folder / "s.yaml"
    assert old in ISSUE_EXAMPLE
    path.write_text(ISSUE_EXAMPLE.replace(old, new))
    return path


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ('"0 30 2 * * ?"', '"0 30 2 * * *"', "exactly one of them must be '?'"),
        ('"0 30 2 * * ?"', '"0 30 25 * * ?"', "the hours field '25' is not valid"),
        ("Europe/Paris", "Europe/Pariss", "unknown time zone 'Europe/Pariss'"),
        ("pause_status: UNPAUSED", "pause_status: UNPASUED", "'UNPAUSED' or 'PAUSED'"),
        (
            "depends_on: [{task_key: prep}]",
            "depends_on: [{task_key: prepp}]",
            "task 'train' depends_on 'prepp', which is no task here",
        ),
        ("task_key: report", "task_key: prep", "task_key 'prep' is used by more than one task"),
        ("{file: train.yaml}", "{file: nope.yaml}", "nope.yaml: No such file or directory"),
        ("notebook: report.ipynb", "notebook: gone.ipynb", "gone.ipynb: No such file or directory"),
        ("run_if: ALL_SUCCESS", "run_if: ALL_SUCCES", "'ALL_SUCCESS', 'ALL_DONE' or 'NONE_FAILED'"),
        ("catch_up: latest", "catch_up: all", "'latest' or 'none'"),
        ("max_concurrent_runs: 1", "max_concurrent_runs: 0", "greater than or equal to 1"),
        (
            "{command: python prep.py, compute: {nproc_per_node: 1}}",
            "{command: python prep.py, gpus: 2}",
            "gpus: Extra inputs are not permitted",
        ),
    ],
)
def test_bad_input_is_one_clear_line(folder: Path, old: str, new: str, said: str) -> None:
    with pytest.raises(ScheduleFileError) as err:
        load(edit(folder, old, new))
    assert said in str(err.value)
    assert "\n" not in str(err.value)


def test_a_depends_on_cycle_is_named(folder: Path) -> None:
    path = edit(
        folder, "  - task_key: prep\n", "  - task_key: prep\n    depends_on: [{task_key: train}]\n"
    )
    with pytest.raises(ScheduleFileError, match=r"depends_on makes a cycle \((prep|train) -> "):
        load(path)


def test_a_file_that_is_not_a_notebook_is_refused(folder: Path) -> None:
    (folder / "report.ipynb").write_text("{not json")
    with pytest.raises(ScheduleFileError, match=r"report\.ipynb is not a notebook"):
        load(folder / "s.yaml")


def test_the_cli_refuses_in_one_line_and_creates_nothing(
    folder: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    bad = edit(folder, "Europe/Paris", "Mars/Olympus")
    assert main(["schedule", "create", "-f", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "unknown time zone 'Mars/Olympus'" in err
    assert main(["schedule", "list", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


SEARCH = """\
name: nightly-search
schedule: {cron: "0 4 * * *"}
experiment_name: searches
tasks:
  - task_key: search
    sweep:
      command: python train.py
      space: {lr: {type: float, low: 1.0e-4, high: 0.1, log: true}}
      objective: {minimize: val_loss}
      trials: 2
      storage: sqlite:///studies.db
  - task_key: again
    sweep: {file: sweep.yaml}
"""

SWEEP = """\
experiment_name: sweep-exp
command: python train.py
space: {layers: [1, 2]}
objective: {maximize: accuracy}
trials: 2
"""


def test_a_sweep_task_is_a_sweep_file_inline_or_by_file_read_in_now(tmp_path: Path) -> None:
    (tmp_path / "sweep.yaml").write_text(SWEEP)
    (tmp_path / "s.yaml").write_text(SEARCH)
    search, again = load(tmp_path / "s.yaml").tasks
    assert (search.kind, again.kind) == ("sweep", "sweep")
    assert search.sweep is not None
    assert again.sweep is not None
    assert search.sweep["experiment_name"] is None  # the schedule's, when it fires
    assert search.sweep["working_dir"] == str(tmp_path.resolve())
    assert search.sweep["storage"] == f"sqlite:///{tmp_path.resolve()}/studies.db"
    assert again.sweep["objective"] == {"minimize": None, "maximize": "accuracy"}


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (
            "low: 1.0e-4, high: 0.1",
            "low: 0.1, high: 1.0e-4",
            "tasks.0 (search): sweep: space.lr: low (0.1) must be below high (0.0001)",
        ),
        (
            "objective: {minimize: val_loss}",
            "objective: {lowest: val_loss}",
            "tasks.0 (search): sweep: objective.lowest: Extra inputs are not permitted",
        ),
        (
            "storage: sqlite:///studies.db",
            "storage: redis://cache/0",
            "tasks.0 (search): sweep: storage: 'redis' is not a database Optuna keeps",
        ),
        ("{file: sweep.yaml}", "{file: gone.yaml}", "tasks.1 (again): sweep: "),
        (
            "    sweep: {file: sweep.yaml}",
            "    sweep: {file: sweep.yaml}\n    notebook: x.ipynb",
            "task 'again': give exactly one of workload, notebook or sweep",
        ),
    ],
)
def test_a_bad_sweep_task_is_refused_in_one_line_naming_the_field(
    tmp_path: Path, old: str, new: str, said: str
) -> None:
    (tmp_path / "sweep.yaml").write_text(SWEEP)
    assert old in SEARCH
    (tmp_path / "s.yaml").write_text(SEARCH.replace(old, new))
    with pytest.raises(ScheduleFileError) as err:
        load(tmp_path / "s.yaml")
    assert said in str(err.value)
    assert "\n" not in str(err.value)


def test_a_sweep_task_its_owner_could_not_start_is_refused_when_the_schedule_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """More trials at once than this machine holds: the sweeps service's own check, at
    ``air schedule create``, not at the first firing."""
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    (tmp_path / "sweep.yaml").write_text(SWEEP)
    (tmp_path / "s.yaml").write_text(
        SEARCH.replace("trials: 2\n", "trials: 2\n      parallel: 256\n", 1)
    )
    assert main(["schedule", "create", "-f", str(tmp_path / "s.yaml")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "tasks.0 (search): sweep: parallel: 256 trials of 1 rank(s) at once" in err
    assert main(["schedule", "list", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
