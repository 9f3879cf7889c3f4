"""The quickstart notebook runs top to bottom, as ``make demo`` runs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_air.jobs.store import JobStore
from tests.kernel.conftest import execute_notebook

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"


def test_the_quickstart_trains_on_two_ranks_and_logs_to_mlflow(
    kernel_env: dict[str, str], air_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = execute_notebook(NOTEBOOK, kernel_env, tmp_path, monkeypatch)
    assert not [o for o in outputs if o["output_type"] == "error"]
    text = "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")
    assert "[rank 0] step 40: loss" in text
    assert "[rank 1] step 40: loss" in text
    results = [o["data"]["text/plain"] for o in outputs if o["output_type"] == "execute_result"]
    assert float(results[0]) < 1.0, "the loss went down"
    assert results[1] == "'rank 0 of 2'"

    from mlflow import MlflowClient

    jobs = JobStore(air_home).jobs()
    ddp = next(j for j in jobs if j.workload.run_name == "quickstart")
    (attempt,) = JobStore(air_home).attempts(ddp.id)
    client = MlflowClient(ddp.workload.tracking_uri)
    history = client.get_metric_history(attempt.run_id, "train_loss")
    assert len(history) == 50, "rank 0 logged each step once"
