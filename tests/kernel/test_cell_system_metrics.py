"""A warm session's cells each carry the system metrics of their time (issue 16).

A real session of two gloo ranks, its system metrics sampled every second
(``AIR_SYSTEM_METRICS_INTERVAL`` in the kernel's environment): the session's run keeps
every sample; each cell's child run has those of its span, at its own steps.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient

from jupyter_air.job_dir import JobDir
from jupyter_air.jobs.sessions import cells as session_cells
from jupyter_air.jobs.store import JobStore
from tests.kernel.conftest import Kernel
from tests.kernel.test_session import session_run_sampled, start
from tests.waits import supervised_until_its_end, wait_done

#: Every test drives a real kernel: left to make test.
pytestmark = pytest.mark.heavy

CPU = "system/cpu_utilization_percentage"


def system_keys(client: MlflowClient, run_id: str) -> set[str]:
    return {k for k in client.get_run(run_id).data.metrics if k.startswith("system/")}


def test_each_cell_run_has_the_system_metrics_of_its_span_and_the_session_run_all(
    kernel: Kernel, air_home: Path, kernel_env: dict[str, str]
) -> None:
    client = MlflowClient(kernel_env["MLFLOW_TRACKING_URI"])
    store = JobStore(air_home)
    job_id = start(kernel)
    parent_id = session_run_sampled(air_home, job_id)

    slow = kernel.run("%%air_distributed --session\nimport time\ntime.sleep(2)")
    assert slow.error is None, slow.traceback
    quick = kernel.run("%%air_distributed --session\n1")  # shorter than the interval
    assert quick.error is None, quick.traceback
    kernel.run("%air_session stop")
    supervised_until_its_end(wait_done(air_home, job_id))

    slow_cell, quick_cell = session_cells.cells(JobDir(store.job_dir(job_id)))
    session_keys = system_keys(client, parent_id)
    assert {CPU, "system/gpu_0_utilization_percentage"} <= session_keys
    session_times = {m.timestamp for m in client.get_metric_history(parent_id, CPU)}

    history = client.get_metric_history(slow_cell.run_id, CPU)
    assert len(history) >= 1
    assert [m.step for m in sorted(history, key=lambda m: m.timestamp)] == list(
        range(len(history))
    ), "the cell's own steps, from 0"
    span = (int(slow_cell.started * 1000), int(slow_cell.ended * 1000) + 1)
    assert all(span[0] <= m.timestamp <= span[1] for m in history), (span, history)
    assert {m.timestamp for m in history} <= session_times, "the session's run has them too"
    assert system_keys(client, slow_cell.run_id) == session_keys

    # one sample, taken at its end, for a cell no regular sample fell in
    assert system_keys(client, quick_cell.run_id) == session_keys
    after = client.get_metric_history(quick_cell.run_id, CPU)
    assert all(m.timestamp >= int(quick_cell.started * 1000) for m in after)
