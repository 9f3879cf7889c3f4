"""What a warm session's cell shows (the live view of a fresh cell, over the cell's own
run) and what ``%air_session status`` says (the running cell, or idle since when and
for how long more)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.kernel.conftest import Kernel
from tests.kernel.test_live_view import PLOTLY, collect, output_order, sent_points
from tests.kernel.test_session import SESSION_JOB, cell, session_run_sampled, start
from tests.waits import until

#: Each test drives a kernel, a session or a job with its supervisor and ranks.
pytestmark = pytest.mark.heavy

LOSS_CELL = """%%air_distributed --session
import time
from jupyter_air import log_metrics
for step in range({steps}):
    log_metrics({{"loss": 1.0 / (step + 1)}}, step=step)
    time.sleep({pause})
"""
WIDGET = "application/vnd.jupyter.widget-view+json"


def test_a_session_cell_leaves_its_own_runs_chart_and_status_as_a_fresh_cell_does(
    kernel: Kernel, air_home: Path
) -> None:
    """Where widgets are not drawn: the header and the final status naming the cell (one
    display, until an output line comes between them), and the chart of the cell's own
    child run, as a static plotly figure with its summary; a later cell's chart holds its
    own points only."""
    session_run_sampled(air_home, start(kernel))
    first = kernel.run(LOSS_CELL.format(steps=20, pause=0.25))
    assert first.error is None, first.traceback
    assert not any(WIDGET in d for d in first.displays)
    header_and_status, chart = first.displays
    header, status = header_and_status["text/plain"].split("\n")
    assert header.startswith("Job ")
    assert "run cell 1" in header
    assert re.fullmatch(r"succeeded · [\d.]+ s · cell 1 · step 19, [\d.]+ steps/s", status)
    assert header_and_status["text/html"].startswith('<div class="jp-air-JobHeader">')
    traces = {t["name"]: t for t in chart[PLOTLY]["data"]}
    assert traces["loss"]["x"] == list(range(20))
    assert "CPU %" in traces, "the host's CPU from the system metrics of the cell's own run"
    assert "loss: last 0.05 (step 19), min 0.05 (step 19), 20 steps" in chart["text/plain"]

    second = kernel.run(LOSS_CELL.format(steps=3, pause=0))
    *_, status, chart = second.displays
    last = status["text/plain"].split("\n")[-1]
    assert re.fullmatch(r"succeeded · [\d.]+ s · cell 2 · step 2(, [\d.]+ steps/s)?", last)
    traces = {t["name"]: t for t in chart[PLOTLY]["data"]}
    assert traces["loss"]["x"] == [0, 1, 2]  # cell 2's run, not cell 1's 20 points

    failed = kernel.run("%%air_distributed --session\nraise ValueError('no')")
    header_and_status, *chart = failed.displays  # the chart's place, then the traceback
    header, status = header_and_status["text/plain"].split("\n")
    assert header.startswith("Job ")
    assert re.fullmatch(r"failed · [\d.]+ s · cell 3", status)
    assert "loss" not in str(chart)  # its own run, which logged none
    kernel.run("%air_session stop")


def test_a_session_cells_widget_view_sends_new_points_then_leaves_static_outputs(
    kernel: Kernel,
) -> None:
    """Where widgets are drawn: the session cell's chart widget gets its run's points as
    they are logged, each once; at its end the view becomes static and is closed. A cell
    over before the first chart update (most session cells) builds no widgets at all."""
    start(kernel)
    setup = "from jupyter_air.kernel.live_view import live_view_config as c\n"
    assert kernel.run(setup + "c().mode = 'widget'; c().interval = 0.5").error is None
    try:
        messages = collect(kernel, kernel.start(LOSS_CELL.format(steps=16, pause=0.25)))
        short = collect(kernel, kernel.start("%%air_distributed --session\nx = 1"))
    finally:
        kernel.run(setup + "c().mode = 'auto'; c().interval = 2.0")
    custom, opened, closed, outputs, _ = messages
    steps = sent_points(custom)
    sent = steps["loss"]
    assert sent == list(range(len(sent))), "every point once, in order"
    assert len(sent) >= 8, "most points were sent while the cell ran"
    assert any(m["type"] == "extend" for m in custom), "points arrive while the cell runs"
    assert opened, "a widget view"
    assert closed == opened, "the widgets are closed at the end"
    static = [u for u in outputs if "jp-air-JobHeader" in u.get("text/html", "")]
    assert static, "the widget view's display became the static header"
    assert re.search(r"succeeded · [\d.]+ s · cell \d+", static[-1]["text/plain"])
    final = next(u for u in reversed(outputs) if PLOTLY in u)
    final_traces = {t["name"]: t for t in final[PLOTLY]["data"]}
    assert final_traces["loss"]["x"] == list(range(16))

    custom, opened, closed, outputs, _ = short
    assert (custom, opened, closed) == ([], set(), set())
    assert "loss" not in outputs[-1]["text/plain"]  # its static chart: its own run's
    kernel.run("%air_session stop")


def test_status_says_the_running_cell_or_how_long_idle_and_the_time_left(
    kernel: Kernel, tmp_path: Path
) -> None:
    """Idle before the first cell, with the idle timeout left; "running cell N" while a
    cell runs (here from a thread of the kernel, so that a kernel cell can ask meanwhile);
    idle again once it ended."""
    start(kernel, "--idle-timeout 10")
    status = kernel.run("%air_session status").text
    assert re.search(
        r"0 cells, .*\nidle for \d+ s; stops in (9 min \d+|10 min 0) s without a cell "
        r"\(--idle-timeout 10\)\npids: rank 0: \d+, rank 1: \d+\n",
        status,
    ), status

    go = tmp_path / "go"
    body = f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n"
    started = kernel.run(
        "import threading\n"
        "in_thread = threading.Thread(target=get_ipython().run_cell_magic, "
        f"args=('air_distributed', '--session', {body!r}))\n"
        "in_thread.start()"
    )
    assert started.error is None, started.traceback
    until(
        lambda: re.search(
            r"\nrunning cell 1 for \d+ s\npids: rank 0", kernel.run("%air_session status").text
        ),
        "the status saying the cell runs",
        60,
    )
    go.touch()
    assert kernel.run("in_thread.join(60)\nin_thread.is_alive()").value() == "False"

    status = kernel.run("%air_session status").text
    assert re.search(r"1 cell, .*\nidle for \d+ s; stops in (9 min \d+|10 min 0) s", status), status
    assert cell(kernel, "1") == "1"
    kernel.run("%air_session stop")
    stopped = kernel.run("%air_session status").text
    assert "ended: stopped by %air_session stop" in stopped
    assert "%air_session restart starts it again with the same options" in stopped


def test_a_session_cell_shows_header_status_chart_then_output_as_a_fresh_cell_does(
    kernel: Kernel,
) -> None:
    """Whether its first line comes before its first status (a short cell) or after (a
    longer one); and a cell that logs nothing has no chart, nor a sentence about it."""
    fresh = output_order(kernel, '%%air_distributed -n 1\nprint("fresh")')
    start(kernel)
    quick = output_order(kernel, '%%air_distributed --session\nprint("warm")')
    later = output_order(
        kernel, '%%air_distributed --session\nimport time\ntime.sleep(1.5)\nprint("later")'
    )
    assert fresh == quick == later == ["header", "status", "chart", "output"]

    quiet = kernel.run("%%air_distributed --session\nx = 1")
    assert quiet.error is None, quiet.traceback
    assert "no metrics" not in quiet.text
    header_and_status, *charts = quiet.displays
    assert header_and_status["text/plain"].startswith("Job ")
    for chart in charts:  # only where the session sampled the system in the cell
        assert not [t["name"] for t in chart[PLOTLY]["data"] if t["meta"]["metric"]]
    kernel.run("%air_session stop")


def test_the_start_message_names_the_run_and_how_to_open_it_where_no_server_links_it(
    kernel: Kernel,
) -> None:
    """This kernel has no Jupyter server: the run's name and the commands that open it,
    as a cell's header gives them, no link to nowhere."""
    started = kernel.run("%air_session start -n 2 --oversubscribe --run-name warm")
    assert started.error is None, started.traceback
    (message,) = started.displays
    text, html = message["text/plain"], message["text/html"]
    job = start_job(text)
    assert text.startswith(f"Session job {job}: 2 ranks ready | run warm | logs: air logs {job} | ")
    assert "| open run: mlflow ui --backend-store-uri " in text
    assert text.endswith("%air_session stop ends it.")
    assert "href" not in html
    assert f"· run warm · logs: <code>air logs {job}</code> · open run: <code>" in html
    kernel.run("%air_session stop")


def start_job(text: str) -> str:
    found = SESSION_JOB.search(text)
    assert found, text
    return found.group(1)
