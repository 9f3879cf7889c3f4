"""Where a job's MLflow runs go, and what they carry, said without importing MLflow.

``import mlflow`` costs about 2 s of CPU. A kernel pays it once and resolves a
``RunTarget`` (its experiment, a run to resume or nest under); ``air run`` should not
pay it at all, so it names an ``ExperimentRef`` (a tracking store and an experiment's
name) and the job's supervisor makes the experiment and the first run. This module
resolves the tracking URI as MLflow would, so both find the same store.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse
from urllib.request import pathname2url

#: MLflow's own defaults (``mlflow.store.tracking``): a sqlite file in the working
#: directory, unless ``./mlruns`` already holds a file store's experiments.
DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
DEFAULT_FILE_STORE = "./mlruns"


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


def current_tracking_uri() -> str:
    """What ``mlflow.get_tracking_uri()`` answers in a process that never called
    ``mlflow.set_tracking_uri()``, made absolute (see ``absolute_tracking_uri``)."""
    if uri := os.environ.get("MLFLOW_TRACKING_URI"):
        return absolute_tracking_uri(uri)
    if _holds_file_store(DEFAULT_FILE_STORE):
        return absolute_tracking_uri(Path(os.path.abspath(DEFAULT_FILE_STORE)).as_uri())
    sqlite_path = unquote(DEFAULT_TRACKING_URI[len("sqlite:///") :])
    return "sqlite:///" + os.path.abspath(pathname2url(os.path.abspath(sqlite_path)))


def _holds_file_store(directory: str) -> bool:
    """Whether ``directory`` holds experiments of MLflow's file store (``N/meta.yaml``):
    MLflow keeps using such a store rather than switch to its sqlite default."""
    try:
        with os.scandir(directory) as entries:
            return any(
                entry.is_dir()
                and entry.name.isdigit()
                and os.path.lexists(os.path.join(entry.path, "meta.yaml"))
                for entry in entries
            )
    except OSError:
        return False


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
