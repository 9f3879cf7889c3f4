"""``make demo``: copy the example notebooks into a scratch folder, run the quickstart
there headless, say where its job and run are and the URL that opens the quickstart;
JupyterLab then serves that folder.

The scratch folder (``.demo/`` by default, ignored by git) is where the demo's
notebooks are saved with their outputs and where JupyterLab keeps its checkpoints, so
a demo never changes a file git tracks. A copy the user has edited there is kept,
never overwritten. The headless check's runs go to the user's one MLflow store
(``AIR_HOME/mlflow.db``) in an experiment of their own, ``/Users/<user>/make demo
check``, so that the quickstart's own experiment holds only the runs the user makes.
Its kernel talks to this process over Unix sockets in a private folder (no kernel
port on loopback, where other users of the machine could reach it).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit, urlunsplit

import nbformat
from jupyter_client.manager import KernelManager
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
#: The experiment of the headless check's runs (``/Users/<user>/`` before it).
CHECK_EXPERIMENT = "make demo check"


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


def check_experiment(user: str) -> str:
    """Where the headless check's runs go: not the quickstart's own experiment."""
    return f"/Users/{user}/{CHECK_EXPERIMENT}"


def run_quickstart(workdir: Path, experiment: str) -> nbformat.NotebookNode:
    """Execute the quickstart's copy in a fresh kernel beside it, its runs in
    ``experiment``; the notebook with its outputs (not saved: JupyterLab shows the copy
    as the user left it)."""
    notebook = workdir / QUICKSTART
    nb = nbformat.read(notebook, as_version=4)
    env = {**os.environ, "MLFLOW_EXPERIMENT_NAME": experiment}
    env.setdefault("JPY_SESSION_NAME", str(notebook))
    sockets = tempfile.mkdtemp(prefix="air-demo-kernel-")  # 0700: this user's alone
    km = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(sockets, "k"))
    client = NotebookClient(
        nb,
        km=km,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    )
    try:
        client.execute(env=env)
    finally:
        if km.has_kernel:  # a kernel manager given to nbclient is the giver's to stop
            km.shutdown_kernel()
        shutil.rmtree(sockets, ignore_errors=True)
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


def notebook_url(lab_url: str, notebook: str = QUICKSTART) -> str:
    """The URL that opens ``notebook`` (relative to the lab's root folder) in JupyterLab,
    with the lab URL's token: JupyterLab's ``/lab/tree/<path>``."""
    parts = urlsplit(lab_url)
    path = urlsplit(lab_root(lab_url)).path + "lab/tree/" + quote(notebook)
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def job_logs_url(server: str, job_id: str) -> str:
    """The job's logs view in JupyterLab, the page a cell's logs link opens
    (``ui_links.logs_url``'s shape). That helper finds the server among the running
    ones, and the demo's lab is not running yet when this is printed."""
    return f"{server}lab?air-job={quote(job_id, safe='')}"


def summary(store: JobStore, job_id: str, lab_url: str) -> list[str]:
    """What the console says of the quickstart's job once it ended: its run's page in
    the demo lab's MLflow UI and its experiment, its logs view in that lab, and ``air
    logs`` for a shell."""
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
    experiment = MlflowClient(tracking_uri).get_experiment(run.info.experiment_id).name
    return [
        f"Job {job_id}: {job.status.lower()}, MLflow run {run.info.run_name} in experiment "
        f"{experiment!r} (the check's own: the quickstart's experiment holds your runs only)",
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
    from jupyter_air.identity import os_identity
    from jupyter_air.jobs.store import JobStore

    workdir = args.workdir.resolve()
    for note in prepare(workdir):
        print(note)
    print(f"Checking {workdir / QUICKSTART} (a 2-rank DDP training, about 20 s) ...", flush=True)
    job_id = job_of(run_quickstart(workdir, check_experiment(os_identity().name)))
    print("\n".join(summary(JobStore(), job_id, args.url)))
    print(
        f"Starting JupyterLab with jupyter_air. Open {QUICKSTART}:\n"
        f"    {notebook_url(args.url)}\n"
        f"(a copy of notebooks/ in {workdir}; the chip icon in the right sidebar opens GPU\n"
        " resources; `air` works in its terminals; Ctrl-C stops)"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
