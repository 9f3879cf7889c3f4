"""``%%air_sweep`` and ``sweep(fn, ...)`` in a real kernel (issue 40): 1-rank gloo trials
of a toy objective with a known optimum (x = 2), 2 at a time.

One sweep is checked for most things at once: the cell shows a live table of its
trials, its kernel is killed mid-sweep, and the same cell run in a new kernel follows
the same sweep (its driver never stopped) to its end, with every trial run once; the
table's last state marks the best, and the cell's value is the best parameters; the
runs panel's rows nest the trials' runs under the sweep's. Then
``sweep()`` over a ``@distributed`` function whose return value is the objective, and
the Stop button, which stops a sweep as ``air sweep stop`` does. The sweep's end is
told (``--notify jupyterlab``) with its best trial.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from jupyter_air.jobs.store import JobStore
from jupyter_air.sweeps.store import SweepStatus, SweepStore
from jupyter_air.sweeps.trials import SWEEP_TAG, TRIAL_TAG
from jupyter_air.tracking.experiment_runs import RunQuery, search_page
from tests.kernel.conftest import Execution, Kernel, air_home, kernel_env  # noqa: F401
from tests.waits import until

pytestmark = [pytest.mark.heavy, pytest.mark.slow]

MAGIC = (
    "%%air_sweep --trials 6 --parallel 2 --sampler grid --minimize loss "
    "--space 'x: int(0, 5)' --notify jupyterlab\n"
)
CELL = (
    MAGIC
    + """\
import time, torch.distributed as dist
from jupyter_air import log_metrics, params

dist.init_process_group("gloo")
x = params()["x"]
time.sleep(1)
log_metrics({"loss": (x - 2) ** 2 + 0.5}, step=1)
dist.destroy_process_group()
"""
)


def started_kernel(env: dict[str, str], air_home: Path) -> Kernel:  # noqa: F811
    kernel = Kernel(env, cwd=air_home / "notebooks")
    loaded = kernel.run("%load_ext jupyter_air")
    assert loaded.error is None, loaded.traceback
    return kernel


def sweep_table(execution: Execution) -> dict[str, Any]:
    """The sweep's one display, as last drawn."""
    (table,) = [d for d in execution.displays if "sweep sw-" in d.get("text/plain", "")]
    return table


def test_a_cell_sweep_follows_its_table_survives_a_kernel_restart_and_returns_the_best(
    kernel_env: dict[str, str],  # noqa: F811
    air_home: Path,  # noqa: F811
) -> None:
    (air_home / "notebooks").mkdir(exist_ok=True)
    first = started_kernel(kernel_env, air_home)
    try:
        running = first.start(CELL)
        first.wait_shown(running, "COMPLETE", timeout=180)  # the table, redrawn live
    finally:
        first.kill()  # the kernel dies mid-sweep; the sweep's driver goes on
    (sweep,) = SweepStore(air_home).sweeps()
    assert sweep.status is SweepStatus.RUNNING, "killed mid-sweep"

    second = started_kernel(kernel_env, air_home)
    try:
        again = second.run(CELL, timeout=300)
        assert f"Following sweep {sweep.id}" in again.stdout or (
            f"Sweep {sweep.id} of this cell completed" in again.stdout
        ), again.text
        assert again.value() == "{'x': 2}", again.text
        table = sweep_table(again)
        text = table["text/plain"]
        assert f"sweep {sweep.id} COMPLETED: 6 of 6 trials ended" in text
        assert "best loss = 0.5 (trial" in text
        rows = {line.split()[0]: line.split() for line in text.splitlines()[2:]}
        assert sorted(rows) == [str(n) for n in range(6)]
        best = [r for r in rows.values() if r[-2] == "★"]
        assert [r[1:4] for r in best] == [["COMPLETE", "2", "0.5"]], text
        assert "<table" in table["text/html"]
        assert "font-weight: bold" in table["text/html"]  # the best row
        assert table["text/html"].count("<circle") == 6  # the chart: each trial's objective

        trials = SweepStore(air_home).trials(sweep.id)
        assert sorted(t.params["x"] for t in trials) == list(range(6))
        assert {t.state for t in trials} == {"COMPLETE"}
        jobs = [j for j in JobStore(air_home).jobs() if j.spec.tracking.tags.get(SWEEP_TAG)]
        numbers = sorted(int(j.spec.tracking.tags[TRIAL_TAG]) for j in jobs)
        assert numbers == list(range(6)), "every trial ran once, none twice"
        runs_panel = search_page(
            MlflowClient(kernel_env["MLFLOW_TRACKING_URI"]),
            RunQuery(str(SweepStore(air_home).get(sweep.id).experiment_id)),
        ).runs
        at = [r["run_id"] for r in runs_panel].index(SweepStore(air_home).get(sweep.id).run_id)
        trial_rows = runs_panel[at + 1 : at + 7]
        assert [r["depth"] for r in runs_panel[at : at + 7]] == [0] + [1] * 6, "nested"
        assert sorted(int(r["params"]["x"]) for r in trial_rows) == list(range(6))
        outbox = JobStore(air_home).outbox
        told = until(lambda: outbox.for_lab(sweep.owner, 0), "the sweep's end told", 60)
        assert [r.message.title for r in told] == [
            f"sweep {sweep.id} done: best loss = 0.5 (trial {best[0][0]}: x=2)"
        ]

        function = second.run(
            "from jupyter_air import distributed, sweep\n"
            "@distributed()\n"
            "def score(x=0):\n"
            "    return (x - 1) ** 2 + 0.25\n"
            "sweep(score, {'x': [0, 1]}, objective='score', trials=2, parallel=2, "
            "sampler='grid')",
            timeout=300,
        )
        assert function.value() == "{'x': 1}", function.text
        assert "best score = 0.25" in sweep_table(function)["text/plain"]

        stopped = second.start(
            "%%air_sweep --trials 2 --minimize loss --space 'x: int(0, 1)'\n"
            "import time\n"
            "time.sleep(600)\n"
        )
        second.wait_shown(stopped, "1 running", timeout=180)
        second.interrupt()
        out = second.collect(stopped, timeout=120)
        assert out.error is not None, out.text
        assert out.error["ename"] == "Interrupted", out.text
        said = re.search(r"interrupted; sweep (sw-[0-9a-f]{8}) stopped", out.traceback)
        assert said, out.traceback
        store = SweepStore(air_home)
        until(lambda: store.get(said[1]).status is SweepStatus.STOPPED, "the sweep stopped", 60)
        assert [t.state for t in store.trials(said[1])] == ["FAIL"]
    finally:
        second.shutdown()
