"""``%%air_sweep``'s flags and ``sweep()``'s arguments, read into a sweep (fast: no
kernel, no job): the inline space's forms, and bad input refused in one line naming the
flag or the argument, with no sweep made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError

from jupyter_air import distributed, sweep
from jupyter_air.jobs.workload_file import WorkloadError
from jupyter_air.kernel.options import Options
from jupyter_air.kernel.sweep_launch import Search, sweep_key, sweep_spec
from jupyter_air.kernel.sweep_magic import flag_of, parsed
from jupyter_air.sweeps.space_text import BadSpace, parse_line, parse_space
from jupyter_air.sweeps.store import SweepStore
from jupyter_air.sweeps.sweep_file import FloatParam, IntParam, SamplerName


def search(line: str) -> Search:
    return parsed(line)[1]


def refused(line: str) -> str:
    with pytest.raises(UsageError) as caught:
        search(line)
    return str(caught.value)


def spec_refused(line: str) -> str:
    with pytest.raises(WorkloadError) as caught:
        sweep_spec(
            search(line),
            Options().validate(),
            experiment="toy",
            run_name="toy",
            label="%%air_sweep",
            name=flag_of,
        )
    return str(caught.value)


def test_the_inline_forms_are_the_sweep_files_parameters() -> None:
    found = search(
        "-n 2 --trials 12 --parallel 2 --minimize val_loss --sampler random --seed 7 "
        "--space 'lr: loguniform(1e-4, 1e-1)' --space 'layers: int(1, 4)' "
        "--space 'dropout: float(0, 0.5, step=0.1)' --space 'opt: choice(adam, sgd)' "
        "--space 'bs: [16, 32]'"
    )
    assert found.objective == {"minimize": "val_loss"}
    assert (found.trials, found.parallel, found.seed) == (12, 2, 7)
    spec = sweep_spec(
        found,
        Options(nproc_per_node=2).validate(),
        experiment="toy",
        run_name="toy",
        label="%%air_sweep",
        name=flag_of,
    )
    assert spec.space["lr"] == FloatParam.model_validate(
        {"type": "float", "low": 1e-4, "high": 0.1, "log": True}
    )
    assert spec.space["layers"] == IntParam.model_validate({"type": "int", "low": 1, "high": 4})
    assert spec.space["dropout"].step == 0.1  # type: ignore[union-attr]
    assert spec.space["opt"].choices == ["adam", "sgd"]  # type: ignore[union-attr]
    assert spec.space["bs"].choices == [16, 32]  # type: ignore[union-attr]
    assert spec.sampler is SamplerName.RANDOM
    assert spec.compute.nproc_per_node == 2


def test_a_grid_needs_no_trials_and_sweep_takes_the_same_forms() -> None:
    assert search("--sampler grid --maximize acc --space 'x: int(0, 3)'").trials == 10_000
    assert parse_space({"lr": "loguniform(1e-3, 1)", "opt": ["a", "b"]}) == {
        "lr": {"type": "float", "low": 1e-3, "high": 1, "log": True},
        "opt": ["a", "b"],
    }


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("--trials 3 --space 'x: int(0, 3)'", "give --minimize METRIC or --maximize METRIC"),
        ("--trials 3 --minimize a --maximize b --space 'x: int(0, 3)'", "--minimize METRIC or"),
        ("--trials 3 --minimize loss", "--space 'NAME: FORM' is needed"),
        ("--minimize loss --space 'x: int(0, 3)'", "--trials N is needed"),
        ("--trials 3 --minimize loss --space 'x: int(1)'", "--space x: int() takes (LOW, HIGH)"),
        ("--trials 3 --minimize loss --space 'x: normal(0, 1)'", "--space x: no form normal()"),
        ("--trials 3 --minimize loss --space 'x int(0, 1)'", "expected NAME: FORM"),
        (
            "--trials 3 --minimize loss --space 'x: int(0, 1)' --space 'x: int(1, 2)'",
            "--space x: given twice",
        ),
        ("--trials three --minimize loss --space 'x: int(0, 1)'", "--trials: invalid int value"),
        ("--trials 3 --minimize loss --space 'x: int(0,1)' --bogus", "unrecognized arguments"),
        ("--trials 3 --minimize loss --space 'x: int(0,1)' --notify pager:me", "--notify: "),
    ],
)
def test_bad_flags_are_refused_in_one_line_naming_the_flag(line: str, said: str) -> None:
    message = refused(line)
    assert said in message
    assert "\n" not in message
    assert message.endswith("see %%air_sweep? for the options")


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("--trials 3 --minimize loss --space 'x: int(4, 1)'", "--space x: low (4) must be below"),
        (
            "--trials 3 --minimize loss --space 'lr: loguniform(0, 1)'",
            "--space lr: log: true needs low above 0",
        ),
        ("--trials 0 --minimize loss --space 'x: int(0, 3)'", "--trials: Input should be greater"),
        ("--trials 3 --minimize loss --space 'x: int(0, 3)' --parallel 0", "--parallel: Input"),
        ("--trials 3 --minimize loss --space 'x: int(0, 3)' --sampler cmaes", "--sampler: Input"),
        ("--trials 3 --minimize loss --space 'x: int(0, 3)' --pruner asha", "--pruner: Input"),
        ("--sampler grid --minimize loss --space 'x: float(0, 1)'", "--space: x: sampler grid"),
    ],
)
def test_a_space_or_search_a_sweep_file_would_refuse_is_named_by_its_flag(
    line: str, said: str
) -> None:
    assert said in spec_refused(line)


def test_a_form_is_read_never_evaluated() -> None:
    with pytest.raises(BadSpace, match="is not a plain value"):
        parse_line("x: choice(__import__('os').getpid())")
    with pytest.raises(BadSpace, match="is not one of"):
        parse_line("x: os.system('true')")


def test_a_sweeps_key_is_its_notebook_and_its_text() -> None:
    cell = "--trials 3 --minimize loss\nprint(1)"
    assert sweep_key(cell, "a.ipynb") == sweep_key(cell, "a.ipynb")
    assert sweep_key(cell, "a.ipynb") != sweep_key(cell, "b.ipynb")
    assert sweep_key(cell, "a.ipynb") != sweep_key(cell + " ", "a.ipynb")


def no_call(x: int = 0) -> None: ...


@pytest.mark.parametrize(
    ("arguments", "error", "said"),
    [
        ({"space": {"x": "int(1)"}}, ValueError, "space x: int() takes (LOW, HIGH)"),
        ({"space": {"x": {"type": "int", "low": 3, "high": 1}}}, ValueError, "space['x']: low"),
        ({"trials": None}, TypeError, "sweep() needs trials=N"),
        ({"trials": 0}, ValueError, "trials=: Input should be greater than or equal to 1"),
        ({"direction": "down"}, ValueError, "direction= must be minimize or maximize"),
        ({"sampler": "cmaes"}, ValueError, "sampler=: Input should be"),
        ({"notify": ["pager:me"]}, ValueError, "notify=: say one of jupyterlab"),
    ],
)
def test_sweep_refuses_bad_arguments_naming_them_before_anything_starts(
    arguments: dict[str, Any],
    error: type[Exception],
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    given = {"space": {"x": "int(0, 3)"}, "objective": "loss", "trials": 2, **arguments}
    with pytest.raises(error) as caught:
        sweep(no_call, **given)
    assert said in str(caught.value)
    assert SweepStore(tmp_path / "air").sweeps() == []


def test_sweep_runs_no_trial_on_a_sessions_ranks() -> None:
    with pytest.raises(TypeError, match="without session=True"):
        sweep(distributed(session=True)(no_call), {"x": [1, 2]}, objective="loss", trials=2)
