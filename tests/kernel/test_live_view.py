"""Where widgets are not drawn (nbclient here), a distributed cell still leaves its
links, its final status and the run's chart (a static plotly figure with a text summary)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, NamedTuple

import nbformat
import pytest

from jupyter_air.jobs.node.hints import read_hints
from jupyter_air.jobs.store import JobStore
from tests.fake_nvml import FakeGpu, Scenario, write_scenario_text
from tests.kernel.conftest import Kernel, execute_notebook
from tests.waits import until

#: Every test drives a real kernel: left to make test.
pytestmark = pytest.mark.heavy

PLOTLY = "application/vnd.plotly.v1+json"

CELL = """%%air_distributed -n 2 --run-name live
from jupyter_air import log_metrics
import os, time
for step in range(30):
    log_metrics({"train_loss": 1.0 / (step + 1), "lr": 0.1}, step=step)
    time.sleep(0.2)
if os.environ["RANK"] == "0":  # the chart, drawn at the end, has the host's CPU once the
    from mlflow import MlflowClient  # supervisor has loaded MLflow: seconds under load

    run, deadline = MlflowClient().get_run, time.monotonic() + 120
    while "system/cpu_utilization_percentage" not in run(os.environ["MLFLOW_RUN_ID"]).data.metrics:
        assert time.monotonic() < deadline, "no system sample in the run"
        time.sleep(0.5)
print("rank", os.environ["RANK"], "done")
"""


def outputs_of(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, cell: str = CELL
) -> Any:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext jupyter_air"), nbformat.v4.new_code_cell(cell)]
    path = tmp_path / "live.ipynb"
    nbformat.write(nb, path)
    env = {k: v for k, v in env.items() if k != "JPY_SESSION_NAME"}  # as `jupyter execute`
    return execute_notebook(path, env, tmp_path, monkeypatch)


def test_nbclient_gets_links_final_status_and_the_runs_chart_with_a_summary(
    kernel_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = outputs_of(tmp_path, kernel_env, monkeypatch)
    assert not [o for o in outputs if o["output_type"] == "error"]
    displays = [o["data"] for o in outputs if o["output_type"] == "display_data"]
    assert not any("application/vnd.jupyter.widget-view+json" in d for d in displays)

    header = displays[0]
    assert header["text/plain"].startswith("Job ")
    # No Jupyter server here: no link to nowhere, but the command that opens the run.
    assert "href" not in header["text/html"]
    assert "open run: mlflow ui --backend-store-uri" in header["text/plain"]
    assert "#/experiments/" in header["text/plain"]
    assert "logs: air logs " in header["text/plain"]

    status = displays[1]["text/plain"]
    assert status.startswith("succeeded · ")
    # its steps, from log_metrics' cadence (issue 38, item 3): no planned length, no ETA
    assert re.search(r" · attempt 1/1 · step 29, [\d.]+ steps/s$", status.splitlines()[0])

    chart = displays[2]
    figure = chart["application/vnd.plotly.v1+json"]
    traces = {t["name"]: t for t in figure["data"]}
    assert traces["train_loss"]["x"] == list(range(30))
    assert traces["train_loss"]["y"][-1] == pytest.approx(1 / 30)
    assert "CPU %" in traces, "the host's CPU from the run's system metrics"
    assert "GPU 0 util %" not in traces, "the fake GPU is not the job's (no CUDA devices)"
    start, end = figure["layout"]["xaxis3"]["range"]  # the host CPU's time axis
    first, last = traces["CPU %"]["x"][0], traces["CPU %"]["x"][-1]
    assert first - 0.03 * (end - start) <= start <= first, "it starts at the job's start"
    assert last <= end <= last + 0.03 * (end - start), "it ends at the job's last sample"
    assert traces["CPU %"]["y"][0] > 0, "not psutil's meaningless first 0 %"
    summary = chart["text/plain"]
    assert "train_loss: last 0.0333333 (step 29), min 0.0333333 (step 29), 30 steps" in summary
    assert "lr: last 0.1 (step 29)" in summary
    json.dumps(figure)  # saved as is in the notebook

    text = "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")
    assert "[rank 0] rank 0 done" in text
    assert "[rank 1] rank 1 done" in text


def test_without_a_jupyter_server_the_header_gives_the_command_that_opens_the_run(
    tmp_path: Path,
) -> None:
    from jupyter_air.kernel.launch import job_links

    env = {"JUPYTER_RUNTIME_DIR": str(tmp_path)}  # no server's runtime file here
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        patch.delenv("AIR_MLFLOW_UI_URL", raising=False)
        links = job_links("sqlite:////data/my runs/mlflow.db", "3", "abc123", "job1")
    assert links["run"] is None
    assert links["experiment"] is None
    assert links["logs"] is None
    assert links["stacks"] is None, "no logs view to show them in"
    assert links["open run"] == (
        "mlflow ui --backend-store-uri 'sqlite:////data/my runs/mlflow.db', "
        "then open http://127.0.0.1:5000/#/experiments/3/runs/abc123?workflowType=machine_learning"
    )


def test_the_command_never_shows_the_stores_credentials() -> None:
    from jupyter_air.tracking.ui_links import ui_command

    text = ui_command("postgresql://ada:s3cret@db.internal/mlflow", "1", "r")
    assert "s3cret" not in text
    assert "ada" not in text
    assert text.startswith("mlflow ui --backend-store-uri postgresql://db.internal/mlflow (add")


IDLE_CELL = """%%air_distributed -n 1 --run-name idle
import os, time
from pathlib import Path
from mlflow import MlflowClient
# Until the run has a GPU sample for the chart (the supervisor logs them once it has
# loaded MLflow, seconds on a loaded machine), then until the supervisor has said
# something (at most 2 minutes): no fixed sleep to tune.
deadline = time.monotonic() + 120
run = MlflowClient().get_run
while "system/gpu_0_utilization_percentage" not in run(os.environ["MLFLOW_RUN_ID"]).data.metrics:
    assert time.monotonic() < deadline, "no GPU sample in the run"
    time.sleep(0.5)
hints = Path(os.environ["AIR_HOME"], "jobs", os.environ["AIR_JOB_ID"], "attempt_1", "hints.json")
while '"idle_gpu"' not in (hints.read_text() if hints.exists() else ""):
    assert time.monotonic() < deadline, "no hint"
    time.sleep(0.5)
time.sleep(1)  # the kernel reads hints every 0.5 s
"""


def test_a_mostly_idle_gpu_raises_the_idle_hint_in_the_status_the_run_and_the_chart(
    kernel: Kernel, air_home: Path
) -> None:
    """With the fake GPU held at 30 % and the idle threshold at 55 % over a 2 s window,
    the job's GPU (its rank's CUDA_VISIBLE_DEVICES=0) is mostly idle from its first
    samples to its end, however long a loaded machine makes the job."""
    scenario = air_home / "nvml-scenario.txt"
    usual = scenario.read_text()
    # Each process's sampler reads the module's 20, 40, 60 once, then holds 60 (busy).
    Scenario(gpus=[FakeGpu(util=[30], temp=[45])]).write(scenario)
    limits = {
        "CUDA_VISIBLE_DEVICES": "0",
        "AIR_HINT_IDLE_WINDOW": "2",
        "AIR_HINT_IDLE_UTILIZATION": "55",
    }
    set_env = kernel.run(f"import os; saved = dict(os.environ); os.environ.update({limits!r})")
    assert set_env.error is None, set_env.traceback
    try:
        execution = kernel.run(IDLE_CELL)
    finally:
        kernel.run("os.environ.clear(); os.environ.update(saved)")
        write_scenario_text(scenario, usual)
    assert execution.error is None, execution.traceback
    status = next(d["text/plain"] for d in execution.displays if " · attempt " in d["text/plain"])
    assert "⚠ GPU 0 averaged" in status
    assert "utilization over the last 2 s: likely input-bound" in status

    from mlflow import MlflowClient

    store = JobStore(air_home)
    job = next(j for j in store.jobs() if j.spec.tracking.run_name == "idle")
    (attempt,) = store.attempts(job.id)
    doc = read_hints(store.attempt_dir(job.id, attempt.attempt))
    assert doc["gpus"] == [0]
    assert [h["kind"] for h in doc["hints"]] == ["idle_gpu"]
    # The run is tagged by the supervisor's sampling thread, which may still be loading
    # MLflow when the job's outcome (what the cell waits for) is recorded.
    client = MlflowClient(job.spec.tracking.tracking_uri)

    def tags() -> dict[str, str]:
        return dict(client.get_run(attempt.run_id).data.tags)

    until(lambda: "air.hint.idle_gpu" in tags(), "the run's hint tag", 60, step=0.5, seen=tags)
    assert tags()["air.hint.idle_gpu"].startswith("GPU 0 averaged")
    chart = next(d for d in execution.displays if PLOTLY in d)
    assert "GPU 0 util %" in {t["name"] for t in chart[PLOTLY]["data"]}


STEPS_CELL = """%%air_distributed -n 1 --run-name widget
import time
from jupyter_air import log_metrics
for step in range(24):
    log_metrics({"train_loss": 1.0 / (step + 1)}, step=step)
    time.sleep(0.25)
"""


def test_the_widget_view_sends_each_new_point_once_then_leaves_static_outputs(
    kernel: Kernel,
) -> None:
    """Where widgets are drawn: the chart widget gets traces, then only new points, as
    custom messages, read every ``c.LiveView.interval``; at the end its display becomes
    the static header and status and the widgets are closed."""
    setup = "from jupyter_air.kernel.live_view import live_view_config as c\n"
    assert kernel.run(setup + "c().mode = 'widget'; c().interval = 0.5").error is None
    try:
        seen = collect(kernel, kernel.start(STEPS_CELL))
    finally:
        kernel.run(setup + "c().mode = 'auto'; c().interval = 2.0")
    custom, opened, closed, outputs, library = seen
    steps = sent_points(custom)
    sent = steps["train_loss"]
    assert sent == list(range(len(sent))), "every point once, in order"
    assert [m["revision"] for m in custom] == list(range(1, len(custom) + 1)), "numbered"
    assert len(sent) >= 12, "most points were sent while the job ran"
    extends = [m for m in custom if m["type"] == "extend"]
    assert len(extends) >= 2, "points arrive while the job runs, a few at a time"
    assert len(opened) >= 4  # the view, its header, status and chart
    assert closed == opened, "the widgets are closed at the end"
    assert len(library) <= 1, "the chart library crosses the wire once per kernel, not per cell"
    static = [u for u in outputs if "jp-air-JobHeader" in u.get("text/html", "")]
    assert static, "the widget view's display became the static header"
    assert "succeeded" in static[-1]["text/plain"]
    chart = next(u for u in reversed(outputs) if PLOTLY in u)  # every point, at the end
    final = {trace["name"]: trace for trace in chart[PLOTLY]["data"]}
    assert final["train_loss"]["x"] == list(range(24))
    assert chart[PLOTLY]["layout"]["showlegend"] is True


NOTHING_CELL = """%%air_distributed -n 1 --run-name nothing
print("nothing logged")
"""


def test_a_cell_that_logs_nothing_shows_no_chart_and_no_sentence_about_it(
    kernel_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No metric, and no system sample by the cell's end: samples hourly, and the one
    taken for a job that ended before its first comes seconds later, from a process that
    loads MLflow first (this store's first job: none has loaded it yet). The chart's place
    under the status stays an empty output, which takes no room in a notebook."""
    env = {
        **kernel_env,
        "AIR_HOME": str(tmp_path / "air"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db",
        "AIR_SYSTEM_METRICS_INTERVAL": "3600",
    }
    outputs = outputs_of(tmp_path, env, monkeypatch, NOTHING_CELL)
    assert not [o for o in outputs if o["output_type"] == "error"]
    header, status, chart = [o["data"] for o in outputs if o["output_type"] == "display_data"]
    assert header["text/plain"].startswith("Job ")
    assert status["text/plain"].startswith("succeeded · ")
    assert chart == {"text/plain": ""}
    assert "no metrics" not in json.dumps(outputs)
    text = "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")
    assert "[rank 0] nothing logged" in text


def output_order(kernel: Kernel, code: str) -> list[str]:
    """What a cell shows, top to bottom, as a notebook lays out its outputs: "header",
    "status", "chart" (the chart's place: a figure, or empty where nothing was logged)
    and "output" (the ranks' lines), each display by what it holds at the end."""
    msg_id = kernel.start(code)
    shown: list[str] = []  # display ids and "output", in order
    data: dict[str, dict[str, Any]] = {}
    while True:
        msg = kernel.client.get_iopub_msg(timeout=240)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream" and shown[-1:] != ["output"]:
            shown.append("output")
        elif kind in ("display_data", "update_display_data"):
            key = content["transient"]["display_id"]
            if key not in data:
                shown.append(key)
            data[key] = content["data"]
        elif kind == "error":
            pytest.fail("\n".join(content["traceback"]))
        elif kind == "status" and content["execution_state"] == "idle":
            break
    order: list[str] = []
    for key in shown:
        html = data.get(key, {}).get("text/html", "")
        if key == "output":
            order.append(key)
        elif "jp-air-JobHeader" in html or "jp-air-JobStatus" in html:
            order += [role for role in ("header", "status") if f"jp-air-Job{role.title()}" in html]
        else:
            assert PLOTLY in data[key] or data[key] == {"text/plain": ""}, data[key]
            order.append("chart")
    return order


def sent_points(custom: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Each trace's x values as the chart's messages brought them (``add`` then
    ``extend``s by trace index), in the order they came."""
    names: list[str] = []
    steps: dict[str, list[float]] = {}
    for message in custom:
        if message["type"] == "add":
            for trace in message["traces"]:
                names.append(trace["name"])
                steps[trace["name"]] = list(trace["x"])
        else:
            for index, xs in zip(message["indices"], message["x"], strict=True):
                steps[names[index]] += xs
    return steps


class CellMessages(NamedTuple):
    """What one cell sent on iopub that its live view is made of."""

    custom: list[dict[str, Any]]  # the chart's custom messages
    opened: set[str]  # widgets opened, the chart library's own model aside
    closed: set[str]
    outputs: list[dict[str, Any]]  # displays and their updates, in order
    library: set[str]  # the chart library's model, opened at most once per kernel


def collect(kernel: Kernel, msg_id: str) -> CellMessages:
    """The live view's messages of one cell, until the kernel is idle; its error fails."""
    seen = CellMessages([], set(), set(), [], set())
    while True:
        msg = kernel.client.get_iopub_msg(timeout=240)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "comm_open":
            is_library = "source" in content["data"].get("state", {})
            (seen.library if is_library else seen.opened).add(content["comm_id"])
        elif kind == "comm_close":
            seen.closed.add(content["comm_id"])
        elif kind == "comm_msg" and content["data"].get("method") == "custom":
            seen.custom.append(content["data"]["content"])
        elif kind in ("display_data", "update_display_data"):
            seen.outputs.append(content["data"])
        elif kind == "error":
            pytest.fail("\n".join(content["traceback"]))
        elif kind == "status" and content["execution_state"] == "idle":
            return seen
