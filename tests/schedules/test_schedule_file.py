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
