"""Which MLflow experiment and run a distributed call uses, in a real kernel.

Precedence: ``--experiment`` > ``mlflow.set_experiment()`` > MLFLOW_EXPERIMENT_NAME >
``/Users/<user>/<notebook>``; an active run makes the new run its child; MLFLOW_RUN_ID
in the kernel resumes that run. The tests run in order in one kernel.
"""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.kernel.conftest import Kernel
from tests.kernel.test_distributed_magic import job_id_of, mlflow_client, runs_of_job

#: Every test drives a real kernel: left to make test.
pytestmark = pytest.mark.heavy

TRIVIAL = "%%air_distributed -n 1 {options}\n1 + 1"


def call(kernel: Kernel, air_home: Path, options: str = "") -> Any:
    execution = kernel.run(TRIVIAL.format(options=options))
    assert execution.value() == "2"
    (run,) = runs_of_job(air_home, job_id_of(execution))
    return run


def experiment_name(air_home: Path, run: Any) -> str:
    return str(mlflow_client(air_home).get_experiment(run.info.experiment_id).name)


def test_the_default_experiment_is_named_after_the_user_and_notebook(
    kernel: Kernel, air_home: Path
) -> None:
    run = call(kernel, air_home)
    assert experiment_name(air_home, run) == f"/Users/{getpass.getuser()}/train"


def test_a_notebook_that_never_loaded_mlflow_gets_a_whole_run_without_importing_it(
    kernel: Kernel, air_home: Path
) -> None:
    """The user's tail process makes the run and ends it: the kernel stays light."""
    run = call(kernel, air_home, "--run-name light")
    assert kernel.run("import sys; 'mlflow' in sys.modules").value() == "False"
    assert (run.info.status, run.info.run_name) == ("FINISHED", "light")  # as the cell returned
    assert run.data.tags["mlflow.source.name"].endswith("train.ipynb")
    code = mlflow_client(air_home).download_artifacts(run.info.run_id, "code/cell.py")
    assert Path(code).read_text().strip() == "1 + 1"
    assert experiment_name(air_home, run) == f"/Users/{getpass.getuser()}/train"


def test_mlflow_experiment_name_in_the_environment_is_used(kernel: Kernel, air_home: Path) -> None:
    kernel.run("import os; os.environ['MLFLOW_EXPERIMENT_NAME'] = 'from-env'")
    assert experiment_name(air_home, call(kernel, air_home)) == "from-env"


def test_set_experiment_in_the_notebook_wins_over_the_environment(
    kernel: Kernel, air_home: Path
) -> None:
    kernel.run("import mlflow; mlflow.set_experiment('from-notebook')")
    assert experiment_name(air_home, call(kernel, air_home)) == "from-notebook"


def test_the_experiment_option_wins_over_set_experiment(kernel: Kernel, air_home: Path) -> None:
    run = call(kernel, air_home, "--experiment from-option")
    assert experiment_name(air_home, run) == "from-option"


def test_an_active_run_in_the_kernel_makes_the_new_run_its_child(
    kernel: Kernel, air_home: Path
) -> None:
    parent = kernel.run("parent = mlflow.start_run(); parent.info.run_id").value().strip("'")
    try:
        run = call(kernel, air_home)
    finally:
        kernel.run("mlflow.end_run()")
    assert run.data.tags["mlflow.parentRunId"] == parent
    assert run.info.status == "FINISHED"


def test_mlflow_run_id_in_the_kernel_resumes_that_run(kernel: Kernel, air_home: Path) -> None:
    created = kernel.run(
        "existing = mlflow.MlflowClient().create_run(mlflow.get_experiment_by_name("
        "'from-notebook').experiment_id).info.run_id\n"
        "os.environ['MLFLOW_RUN_ID'] = existing\n"
        "existing"
    )
    run_id = created.value().strip("'")
    run = call(kernel, air_home)
    assert run.info.run_id == run_id
    assert run.info.status == "FINISHED"
    assert kernel.run("os.environ.get('MLFLOW_RUN_ID')").result is None, "used once"
    assert call(kernel, air_home).info.run_id != run_id


def test_a_run_is_named_after_its_notebook_and_cell_or_its_function(
    kernel: Kernel, air_home: Path
) -> None:
    run = call(kernel, air_home)
    following = int(kernel.run("get_ipython().execution_count").value())  # the next cell's
    assert run.info.run_name == f"train cell {following - 1}"  # the [N] beside the cell
    assert call(kernel, air_home, "--run-name baseline").info.run_name == "baseline"

    kernel.run(
        "from jupyter_air import distributed\n"
        "@distributed(nproc_per_node=1)\n"
        "def fit():\n"
        "    return 2\n"
    )
    execution = kernel.run("fit.distributed()")
    assert execution.value() == "2"
    job_id = job_id_of(execution)
    (run,) = runs_of_job(air_home, job_id)
    assert run.info.run_name == "fit"
    # `air list` shows the same name in its RUN column.
    listing = subprocess.run(
        [sys.executable, "-m", "jupyter_air.cli", "list", "--all-status"],
        env={**os.environ, "AIR_HOME": str(air_home)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    (row,) = [line for line in listing.splitlines() if line.startswith(job_id)]
    assert row.endswith(" fit")
