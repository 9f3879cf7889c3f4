"""``make demo``: copy the example notebooks into a scratch folder, run the quickstart
there headless, say where its job and run are; JupyterLab then serves that folder.

The scratch folder (``.demo/`` by default, ignored by git) is where the demo's
notebooks are saved with their outputs and where JupyterLab keeps its checkpoints, so
a demo never changes a file git tracks (its runs go to the user's one MLflow store,
``AIR_HOME/mlflow.db``). A copy the user has edited there is kept, never overwritten.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import nbformat
from nbclient import NotebookClient

if TYPE_CHECKING:
    from jupyter_air.jobs.store import JobStore

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
WORKDIR = ROOT / ".demo"
#: The demo lab's Jupyter settings, on ``JUPYTER_CONFIG_PATH`` (see the Makefile).
LAB_CONFIG = ROOT / "scripts" / "demo_lab"
QUICKSTART = "quickstart.ipynb"
JOB = re.compile(r"Job (\S+)")


def prepare(workdir: Path) -> list[str]:
    """Copy each example notebook into ``workdir`` unless a copy is there already; a
    note for each copy kept whose code differs from the example's."""
    workdir.mkdir(parents=True, exist_ok=True)
    notes = []
    for example in sorted(NOTEBOOKS.glob("*.ipynb")):
        copy = workdir / example.name
        if not copy.exists():
            shutil.copyfile(example, copy)
        elif _sources(copy) != _sources(example):
            notes.append(f"kept your edited {copy} (delete it to get {example.name} afresh)")
    return notes


def _sources(path: Path) -> list[str]:
    return [cell.source for cell in nbformat.read(path, as_version=4).cells]


def run_quickstart(workdir: Path) -> nbformat.NotebookNode:
    """Execute the quickstart's copy in a fresh kernel beside it; the notebook with its
    outputs (not saved: JupyterLab shows the copy as the user left it)."""
    notebook = workdir / QUICKSTART
    nb = nbformat.read(notebook, as_version=4)
    os.environ.setdefault("JPY_SESSION_NAME", str(notebook))
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}
    ).execute()
    return nb


def job_of(nb: nbformat.NotebookNode) -> str:
    """The job id the first distributed cell's header shows."""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            match = JOB.search(output.get("data", {}).get("text/plain", ""))
            if match:
                return match.group(1)
    raise SystemExit("the quickstart ran but showed no job")


def lab_root(url: str) -> str:
    """The server's root URL, ending in ``/``, from the lab's URL (``.../lab?token=...``)."""
    return url.split("?")[0].rstrip("/").removesuffix("/lab") + "/"


def job_logs_url(server: str, job_id: str) -> str:
    """The job's logs view in JupyterLab, the page a cell's logs link opens
    (``ui_links.logs_url``'s shape). That helper finds the server among the running
    ones, and the demo's lab is not running yet when this is printed."""
    return f"{server}lab?air-job={quote(job_id, safe='')}"


def summary(store: JobStore, job_id: str, lab_url: str) -> list[str]:
    """What the console says of the quickstart's job once it ended: its run's page in
    the demo lab's MLflow UI, its logs view in that lab, and ``air logs`` for a shell."""
    from mlflow import MlflowClient

    from jupyter_air.tracking.stores import register_store
    from jupyter_air.tracking.ui_links import run_url

    job = store.get(job_id)
    (attempt,) = store.attempts(job_id)
    tracking_uri = job.spec.tracking.tracking_uri or ""
    run = MlflowClient(tracking_uri).get_run(attempt.run_id or "")
    server = lab_root(lab_url)
    # The lab serves a store's UI once it is registered, as a kernel's cell registers it.
    mlflow_ui = f"{server}jupyter-air/mlflow/{register_store(tracking_uri, store.home)}/"
    return [
        f"Job {job_id}: {job.status.lower()}, MLflow run {run.info.run_name}",
        f"  run:  {run_url(mlflow_ui, run.info.experiment_id, run.info.run_id)}",
        f"  logs: {job_logs_url(server, job_id)}  (in a terminal: air logs {job_id})",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url", required=True, help="the URL JupyterLab will serve, with its token"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=WORKDIR,
        help=f"the scratch folder JupyterLab will serve (default {WORKDIR.relative_to(ROOT)})",
    )
    args = parser.parse_args()
    from jupyter_air.jobs.store import JobStore

    workdir = args.workdir.resolve()
    for note in prepare(workdir):
        print(note)
    print(f"Running {workdir / QUICKSTART} (a 2-rank DDP training, about 20 s) ...", flush=True)
    job_id = job_of(run_quickstart(workdir))
    print("\n".join(summary(JobStore(), job_id, args.url)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
