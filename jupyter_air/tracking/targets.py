"""Where a job's MLflow runs go, and what they carry, said without importing MLflow.

``import mlflow`` costs about 2 s of CPU. A kernel pays it once and resolves a
``RunTarget`` (its experiment, a run to resume or nest under); ``air run`` should not
pay it at all, so it names an ``ExperimentRef`` (a tracking store and an experiment's
name) and the job's supervisor makes the experiment and the first run.

Without a tracking URI set, every process of a user (a kernel, ``air run``, the
scheduler, the server) uses one store, ``AIR_HOME/mlflow.db``, whatever its working
directory: MLflow's own default, ``./mlflow.db``, scattered runs over as many stores as
directories a user started things from.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

#: Where a cell's code is kept on its run.
CELL_SOURCE = "code/cell.py"
#: The user's own store and its artifacts, under AIR_HOME.
STORE_FILE = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"


#: MLflow's HTTP client retries a request for minutes by default (7 retries of up to 120 s
#: each, backing off). Our processes that talk to a tracking server (a job's supervisor and
#: its ranks, the tail process, ``air sync``) give up on a request within a minute; what
#: did not land stays in the journal for the next try. A user's own setting wins.
BOUNDED_REQUESTS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "20", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2"}


def bound_requests() -> None:
    """Set ``BOUNDED_REQUESTS`` in this process's environment, where the user set none."""
    for name, value in BOUNDED_REQUESTS.items():
        os.environ.setdefault(name, value)


def quiet_retries() -> None:
    """No log line for each HTTP retry, in a process of ours that logs to a file (a
    supervisor, the tail process): against a server down for days, urllib3's warnings
    grew that file by about 10 MB a day. What waits for the server is said once, and in
    the attempt's backlog line (``air get``)."""
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


@dataclass(frozen=True)
class RunTarget:
    """Where a call's first run goes, decided in the kernel before anything starts."""

    tracking_uri: str
    experiment_id: str
    experiment_name: str
    resume_run_id: str | None
    parent_run_id: str | None


@dataclass(frozen=True)
class ExperimentRef:
    """An experiment by name in a tracking store, made by the job's supervisor if missing
    (with ``artifact_location`` then), so the submitting process needs no MLflow."""

    tracking_uri: str
    experiment_name: str
    artifact_location: str | None = None


def default_experiment_name(user: str, notebook: str | None) -> str:
    """``/Users/<user>/<notebook name>``, as the managed product names notebook experiments."""
    name = Path(notebook).stem if notebook else "notebook"
    return f"/Users/{user}/{name}"


def default_tracking_uri(home: Path | None = None) -> str:
    """The user's one store when no tracking URI is set: ``AIR_HOME/mlflow.db``."""
    from ..paths import air_home

    return f"sqlite:///{(home or air_home()).resolve() / STORE_FILE}"


def current_tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI`` made absolute (see ``absolute_tracking_uri``), else the
    user's default store: what a process that never called ``mlflow.set_tracking_uri()``
    uses once ``adopt_default_store`` ran."""
    if uri := os.environ.get("MLFLOW_TRACKING_URI"):
        return absolute_tracking_uri(uri)
    return default_tracking_uri()


def adopt_default_store() -> None:
    """Make the user's default store this process's (and its children's) tracking URI,
    unless one is set already (``mlflow.set_tracking_uri()`` sets the variable too)."""
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        os.environ["MLFLOW_TRACKING_URI"] = default_tracking_uri()


def default_artifact_location(tracking_uri: str) -> str | None:
    """Where a new experiment of the default store keeps its artifacts:
    ``AIR_HOME/mlartifacts/<uuid>``, not MLflow's ``./mlartifacts`` of whichever working
    directory made the experiment. None (MLflow's choice) for any other store."""
    from ..paths import air_home

    home = air_home()
    if tracking_uri != default_tracking_uri(home):
        return None
    return (home / ARTIFACTS_DIR / uuid.uuid4().hex).as_uri()


def absolute_tracking_uri(uri: str, cwd: str | None = None) -> str:
    """The same store, spelled so that a process started elsewhere finds it."""
    base = Path(cwd or os.getcwd())
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file") and not uri.startswith(("databricks", "http")):
        path = Path(unquote(parsed.path) if parsed.scheme == "file" else uri)
        return (base / path).resolve().as_uri() if not path.is_absolute() else path.as_uri()
    if parsed.scheme.startswith("sqlite"):
        path_text = uri.split(":///", 1)[1] if ":///" in uri else ""
        if path_text and not path_text.startswith("/") and path_text != ":memory:":
            return f"{parsed.scheme}:///{(base / path_text).resolve()}"
    return uri


def job_tags(
    job_id: str, attempt: int, nproc_per_node: int, nnodes: int, notebook: str | None, user: str
) -> dict[str, str]:
    """The tags every run of a job carries (``air.attempt`` is the attempt's own)."""
    tags = {
        "air.job_id": job_id,
        "air.attempt": str(attempt),
        "air.nproc_per_node": str(nproc_per_node),
        "air.nnodes": str(nnodes),
        "air.world_size": str(nproc_per_node * nnodes),
        "air.host": socket.gethostname(),
        "mlflow.user": user,
    }
    if notebook:
        tags["air.notebook"] = notebook
        tags["mlflow.source.name"] = notebook
        tags["mlflow.source.type"] = "NOTEBOOK"
    return tags
