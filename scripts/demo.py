"""``make demo``: run the quickstart notebook headless, say where its job and run are,
then start JupyterLab on the same MLflow store."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "quickstart.ipynb"
JOB = re.compile(r"Job (\S+)")


def run_quickstart() -> str:
    """Execute the quickstart in a fresh kernel beside it; the job id of its DDP cell."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    os.environ.setdefault("JPY_SESSION_NAME", str(NOTEBOOK))
    NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    ).execute()
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            text = output.get("data", {}).get("text/plain", "")
            match = JOB.search(text)
            if match:
                return match.group(1)
    raise SystemExit("the quickstart ran but showed no job")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--url", required=True, help="the URL JupyterLab will serve, with its token"
    )
    args = parser.parse_args()
    from mlflow import MlflowClient

    from jupyter_air.jobs.store import JobStore
    from jupyter_air.tracking.stores import register_store

    print(f"Running {NOTEBOOK.relative_to(ROOT)} (a 2-rank DDP training) ...", flush=True)
    job_id = run_quickstart()
    store = JobStore()
    job = store.get(job_id)
    (attempt,) = store.attempts(job_id)
    run = MlflowClient(job.workload.tracking_uri).get_run(attempt.run_id or "")
    base = args.url.split("?")[0].rstrip("/").removesuffix("/lab")
    key = register_store(job.workload.tracking_uri or "")
    print(f"Job {job_id}: {job.status.lower()}, MLflow run {run.info.run_name}")
    page = f"#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
    print(f"  run:  {base}/jupyter-air/mlflow/{key}/{page}")
    print(f"  logs: {store.attempt_dir(job_id, 1) / 'logs'}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
