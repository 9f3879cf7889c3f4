"""A sweep file: its space, objective and search checked before anything starts, each
bad field refused in one line naming it (and its line); the checked space in Optuna's
terms; a trial's parameters as its ranks read them."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import optuna
import pytest

from jupyter_air import params
from jupyter_air.jobs.workload_file import WorkloadError
from jupyter_air.sweeps import space
from jupyter_air.sweeps.store import SweepStore
from jupyter_air.sweeps.sweep_file import Direction, PrunerName, SamplerName, SweepFile, load
from tests.air_cli import air
from tests.sweeps.test_sweep_jobs import ended

GOOD = """\
experiment_name: toy
command: python train.py
compute: {nproc_per_node: 2}
space:
  lr: {type: float, low: 1e-5, high: 0.1, log: true}
  layers: {type: int, low: 1, high: 4}
  optimizer: [adam, sgd]
objective: {minimize: val_loss}
trials: 12
parallel: 2
sampler: tpe
pruner: {name: median, n_startup_trials: 2}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def refusal(tmp_path: Path, text: str) -> str:
    with pytest.raises(WorkloadError) as err:
        load(write(tmp_path, text))
    message = str(err.value)
    assert "\n" not in message
    return message


def test_a_sweep_file_is_a_workload_with_its_search(tmp_path: Path) -> None:
    spec = load(write(tmp_path, GOOD))
    assert spec.argv == ["python", "train.py"]
    assert spec.compute.nproc_per_node == 2
    assert (spec.trials, spec.parallel, spec.sampler) == (12, 2, SamplerName.TPE)
    assert spec.objective.metric == "val_loss"
    assert spec.direction is Direction.MINIMIZE
    assert spec.pruner.name is PrunerName.MEDIAN
    assert spec.pruner.n_startup_trials == 2
    found = space.distributions(spec)
    assert found["lr"] == optuna.distributions.FloatDistribution(1e-5, 0.1, log=True)
    assert found["layers"] == optuna.distributions.IntDistribution(1, 4)
    assert found["optimizer"] == optuna.distributions.CategoricalDistribution(["adam", "sgd"])
    assert isinstance(space.pruner(spec), optuna.pruners.MedianPruner)
    # What the store keeps reads back the same.
    assert SweepFile.model_validate(spec.model_dump(mode="json")) == spec


def test_the_defaults_are_one_trial_at_a_time_with_tpe_and_no_pruner(tmp_path: Path) -> None:
    spec = load(write(tmp_path, GOOD.replace("parallel: 2\n", "").split("sampler:")[0]))
    assert (spec.parallel, spec.sampler, spec.pruner.name) == (1, "tpe", PrunerName.NONE)
    assert isinstance(space.pruner(spec), optuna.pruners.NopPruner)
    spec = load(
        write(
            tmp_path,
            GOOD.replace("pruner: {name: median, n_startup_trials: 2}", "pruner: hyperband"),
        )
    )
    assert isinstance(space.pruner(spec), optuna.pruners.HyperbandPruner)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            ("layers: {type: int, low: 1, high: 4}", "layers: {type: int, low: 4, high: 1}"),
            "space.layers (line 6): low (4) must be below high (1)",
        ),
        (
            ("lr: {type: float, low: 1e-5", "lr: {type: float, low: 0"),
            "space.lr (line 5): log: true needs low above 0, not 0.0",
        ),
        (
            ("lr: {type: float, low: 1e-5, high: 0.1, log: true}", "lr: {type: normal, mean: 0}"),
            "space.lr (line 5): expected {type: float|int|categorical, ...} or a list of choices",
        ),
        (
            ("layers: {type: int, low: 1, high: 4}", "layers: {type: int, low: 1, hi: 4}"),
            "space.layers.high (line 6): Field required; space.layers.hi (line 6): Extra inputs",
        ),
        (
            ("optimizer: [adam, sgd]", "optimizer: []"),
            "space.optimizer.choices (line 7): List should have at least 1 item",
        ),
        (
            ("optimizer: [adam, sgd]", "2x: [adam, sgd]"),
            "space (line 4): '2x': a parameter's name is a Python identifier",
        ),
        (
            ("objective: {minimize: val_loss}", "objective: {minimize: val_loss, maximize: acc}"),
            "objective (line 8): give exactly one of minimize: METRIC or maximize: METRIC",
        ),
        (
            ("objective: {minimize: val_loss}", "objective: {lowest: val_loss}"),
            "objective.lowest (line 8): Extra inputs are not permitted",
        ),
        (
            ("trials: 12", "trials: 0"),
            "trials (line 9): Input should be greater than or equal to 1",
        ),
        (("parallel: 2", "parallel: two"), "parallel (line 10): Input should be a valid integer"),
        (
            ("sampler: tpe", "sampler: cmaes"),
            "sampler (line 11): Input should be 'tpe', 'random' or 'grid'",
        ),
        (
            ("pruner: {name: median, n_startup_trials: 2}", "pruner: patient"),
            "pruner.name (line 12): Input should be 'median', 'hyperband' or 'none'",
        ),
        (
            ("sampler: tpe", "sampler: grid"),
            "space (line 4): lr: sampler grid needs every value listed: give the float a step",
        ),
    ],
)
def test_a_bad_space_objective_or_search_is_refused_naming_the_field(
    tmp_path: Path, change: tuple[str, str], said: str
) -> None:
    assert change[0] in GOOD
    message = refusal(tmp_path, GOOD.replace(*change))
    assert message.startswith(f"{tmp_path / 'sweep.yaml'}: ")
    assert said in message


def test_a_sweep_needs_a_space_an_objective_and_a_number_of_trials(tmp_path: Path) -> None:
    message = refusal(tmp_path, "experiment_name: toy\ncommand: python train.py\n")
    for field in ("objective", "trials", "space"):
        assert f"{field}: Field required" in message


def test_a_grid_lists_every_point_and_caps_the_trials_at_their_number(tmp_path: Path) -> None:
    text = GOOD.replace("sampler: tpe", "sampler: grid").replace(
        "lr: {type: float, low: 1e-5, high: 0.1, log: true}",
        "lr: {type: float, low: 0.1, high: 0.3, step: 0.1}",
    )
    spec = load(write(tmp_path, text))
    points = space.grid(spec)
    assert points["lr"] == pytest.approx([0.1, 0.2, 0.3])
    assert points["layers"] == [1, 2, 3, 4]
    assert points["optimizer"] == ["adam", "sgd"]
    assert space.grid_size(spec) == 24
    assert space.planned(spec) == 12
    spec = spec.model_copy(update={"trials": 100})
    assert space.planned(spec) == 24, "a grid point is never run twice"


def test_params_are_the_trials_parameters_and_empty_outside_a_sweep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AIR_PARAMS", raising=False)
    assert params() == {}
    monkeypatch.setenv("AIR_PARAMS", json.dumps({"lr": 0.01, "optimizer": "sgd"}))
    assert params() == {"lr": 0.01, "optimizer": "sgd"}


def test_air_sweep_refuses_a_bad_file_in_one_line_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    path = write(tmp_path, GOOD.replace("trials: 12", "trials: -1"))
    done = air("sweep", "-f", str(path))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"air: {path}: trials (line 9): Input should be greater than or equal to 1"
    ]
    assert not (tmp_path / "air" / "sweeps").exists()


def test_air_sweep_refuses_a_bad_notify_target_in_one_line_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--notify`` tells of the sweep's end (the file's ``notify:`` is each trial's)."""
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    path = write(tmp_path, GOOD)
    done = air("sweep", "-f", str(path), "--notify", "pager:ops")
    assert done.returncode == 1
    (said,) = done.stderr.strip().splitlines()
    assert said.startswith("air: --notify pager:ops: say one of jupyterlab")
    assert not (tmp_path / "air" / "sweeps").exists()


@pytest.mark.heavy
def test_air_sweep_notify_targets_are_the_sweeps_end_not_its_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "air"
    monkeypatch.setenv("AIR_HOME", str(home))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    one = GOOD.replace("nproc_per_node: 2", "nproc_per_node: 1").replace("parallel: 2", "")
    path = write(tmp_path, one.replace("trials: 12", "trials: 1"))
    told = ["jupyterlab", "webhook:http://127.0.0.1:9/end"]
    started = air("sweep", "-f", str(path), *(f"--notify={t}" for t in told), "--output", "json")
    assert started.returncode == 0, started.stderr
    sweep_id = json.loads(started.stdout)["id"]
    assert air("sweep", "stop", sweep_id).returncode == 0
    sweep = ended(home, sweep_id, timeout=120)
    kept = SweepStore(home).get(sweep_id)
    assert [t.channel.value for t in kept.notify] == ["jupyterlab", "webhook"]
    assert kept.spec.notify is None, "the trials' jobs keep the user's defaults"
    assert sweep["status"] == "STOPPED"
