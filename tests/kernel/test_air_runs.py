"""``%air_runs`` in a real kernel: the runs of the notebook's experiment (``/Users/ada/train``
in the kernel's MLflow store, with runs as three distributed calls leave them, one failed),
and their comparison."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.kernel.conftest import Kernel

#: Every test drives a real kernel: left to make test.
pytestmark = pytest.mark.heavy

WIDGET = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def kernel_env(kernel_env: dict[str, str]) -> dict[str, str]:
    return {**kernel_env, "JUPYTER_USER": "ada"}


@pytest.fixture(scope="module")
def runs(kernel_env: dict[str, str], air_home: Path) -> dict[str, str]:
    """Three calls' runs in the notebook's default experiment, and one elsewhere."""
    from mlflow import MlflowClient

    client = MlflowClient(kernel_env["MLFLOW_TRACKING_URI"])
    experiment = client.create_experiment("/Users/ada/train")
    other = client.create_experiment("other")
    made = {}
    for start, (name, status, lr) in enumerate(
        [("a", "FINISHED", "0.1"), ("b", "FAILED", "0.2"), ("c", "FINISHED", "0.1")]
    ):
        tags = {"air.job_id": f"20261130-10000{start}-abcdef", "air.attempt": "1"}
        run = client.create_run(experiment, start_time=1000 * (start + 1), tags=tags, run_name=name)
        client.log_param(run.info.run_id, "lr", lr)
        for step in range(3):
            client.log_metric(run.info.run_id, "loss", float(start + step), step=step)
            client.log_metric(run.info.run_id, "system/cpu_utilization_percentage", 50.0, step=step)
        client.set_terminated(run.info.run_id, status, end_time=1000 * (start + 1) + 2000)
        made[name] = run.info.run_id
    client.create_run(other, run_name="elsewhere")
    return made


def value(kernel: Kernel, expression: str) -> object:
    return ast.literal_eval(kernel.run(expression).value())


def test_load_ext_imports_no_mlflow(kernel: Kernel) -> None:
    assert value(kernel, "'mlflow' in __import__('sys').modules") is False


def test_the_notebooks_runs_newest_first_with_their_statuses(
    kernel: Kernel, runs: dict[str, str]
) -> None:
    assigned = kernel.run("view = %air_runs")
    assert assigned.error is None, assigned.traceback
    rows = value(kernel, "[(r['name'], r['status'], r['attempt']) for r in view.page.runs]")
    assert rows == [("c", "FINISHED", 1), ("b", "FAILED", 1), ("a", "FINISHED", 1)]
    shown = kernel.run("view")
    [bundle] = shown.displays
    assert WIDGET in bundle
    text = bundle["text/plain"]
    assert "Experiment /Users/ada/train (3 runs)" in text
    assert "status\tname\tstart\tduration\tattempt\tjob\tlr\tloss" in text
    assert "FAILED\tb\t" in text
    assert "\t2.0 s\t1\t20261130-100001-abcdef\t0.2\t3\n" in text + "\n"


def names(kernel: Kernel, line: str) -> object:
    assigned = kernel.run(f"listed = %air_runs {line}")
    assert assigned.error is None, assigned.traceback
    return value(kernel, "[r['name'] for r in listed.page.runs]")


def test_status_search_and_experiment_options(kernel: Kernel, runs: dict[str, str]) -> None:
    assert names(kernel, "--status failed") == ["b"]
    assert names(kernel, "--search \"params.lr = '0.1'\"") == ["c", "a"]
    assert names(kernel, "--search B") == ["b"]
    assert names(kernel, "--experiment other") == ["elsewhere"]
    assert names(kernel, "--max-results 1") == ["c"]


def test_comparing_two_runs_gives_both_curves_and_the_differing_param(
    kernel: Kernel, runs: dict[str, str]
) -> None:
    kernel.run("view = %air_runs")
    doc = kernel.run(f"doc = view.compare([{runs['a']!r}, {runs['b']!r}])")
    assert doc.error is None, doc.traceback
    assert value(kernel, "doc['params']") == {"lr": {runs["a"]: "0.1", runs["b"]: "0.2"}}
    curves = value(
        kernel, "{k: [p['value'] for p in v] for k, v in doc['metrics']['loss'].items()}"
    )
    assert curves == {runs["a"]: [0.0, 1.0, 2.0], runs["b"]: [1.0, 2.0, 3.0]}
    # checking two runs' boxes draws the same comparison as plotly lines
    kernel.run("view")
    picked = kernel.run(
        f"view.picks[{runs['a']!r}].value = True\n"
        f"view.picks[{runs['b']!r}].value = True\n"
        "sorted((t.name, list(t.y)) for t in view.chart.data)"
    )
    assert ast.literal_eval(picked.value()) == [("a", [0.0, 1.0, 2.0]), ("b", [1.0, 2.0, 3.0])]
    assert "lr" in str(value(kernel, "view.differing.value"))


def test_the_users_metrics_come_first_and_system_metrics_are_one_switch_away(
    kernel: Kernel, runs: dict[str, str]
) -> None:
    kernel.run("view = %air_runs")
    shown = kernel.run("view")
    assert "system/" not in shown.displays[0]["text/plain"], "no system columns by default"
    assert value(kernel, "view.metric.options") == ("loss",)
    assert value(kernel, "view.metric.value") == "loss", "a comparison starts on the user's"
    assert "system/" not in str(value(kernel, "view.table.value"))
    kernel.run("view.system.value = True")
    assert value(kernel, "view.metric.options") == ("loss", "system/cpu_utilization_percentage")
    assert value(kernel, "view.metric.value") == "loss"
    assert "system/cpu_utilization_percentage" in str(value(kernel, "view.table.value"))


def test_runs_by_time_start_at_zero_and_same_named_runs_stay_apart(
    kernel: Kernel, runs: dict[str, str], kernel_env: dict[str, str]
) -> None:
    """Two runs named "a", started 10 minutes apart: by time, both curves start at 0 s,
    and the legend tells them apart by the start of their ids."""
    from mlflow import MlflowClient

    client = MlflowClient(kernel_env["MLFLOW_TRACKING_URI"])
    experiment = client.get_experiment_by_name("/Users/ada/train")
    assert experiment is not None
    twin = client.create_run(experiment.experiment_id, start_time=600_000, run_name="a")
    for step in range(3):
        client.log_metric(twin.info.run_id, "loss", 1.0, step=step, timestamp=600_000 + step * 1000)
    try:
        kernel.run("view = %air_runs")
        kernel.run("view")
        drawn = kernel.run(
            f"view.picks[{runs['a']!r}].value = True\n"
            f"view.picks[{twin.info.run_id!r}].value = True\n"
            "view.axis.value = 'time'\n"
            "[(t.name, list(t.x)) for t in view.chart.data]"
        )
        traces = dict(ast.literal_eval(drawn.value()))
        assert traces[f"a ({twin.info.run_id[:7]})"] == [0.0, 1.0, 2.0]
        assert f"a ({runs['a'][:7]})" in traces
        assert all(x[0] >= 0 for x in traces.values()), "seconds since each run's first point"
    finally:
        client.delete_run(twin.info.run_id)


def test_refresh_reads_the_runs_again(
    kernel: Kernel, runs: dict[str, str], kernel_env: dict[str, str]
) -> None:
    kernel.run("view = %air_runs")
    from mlflow import MlflowClient

    client = MlflowClient(kernel_env["MLFLOW_TRACKING_URI"])
    experiment = client.get_experiment_by_name("/Users/ada/train")
    assert experiment is not None
    newer = client.create_run(experiment.experiment_id, start_time=9000, run_name="d")
    try:
        assert value(kernel, "[r['name'] for r in view.refresh().runs]") == ["d", "c", "b", "a"]
    finally:
        client.delete_run(newer.info.run_id)  # the other tests see the three calls


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--status DONE", "--status must be one of"),
        ("--max-results 0", "--max-results must be between 1 and 1000"),
        ("--experiment nowhere", "no experiment named or numbered 'nowhere'"),
        ("--search 'params.lr = = 1'", "--search:"),
        ("--colour red", "unrecognized arguments"),
    ],
)
def test_bad_options_are_usage_errors(
    kernel: Kernel, runs: dict[str, str], line: str, message: str
) -> None:
    refused = kernel.run(f"%air_runs {line}")
    assert refused.stderr.startswith("UsageError: ")  # IPython prints it, with the usage
    assert message in refused.stderr
    assert refused.displays == []
