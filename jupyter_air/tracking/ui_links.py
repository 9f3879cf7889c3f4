"""Where the MLflow UI of a tracking store lives, and links to its pages.

Kernel-side: imports neither tornado nor mlflow, since a kernel renders these links
after every job and ``import mlflow`` alone costs seconds.

A local store (``sqlite:``, ``file:`` or a plain path) has no UI of its own, so the
Jupyter server that started the kernel serves one under
``{base_url}jupyter-air/mlflow/<key>/`` (see ``ui_server`` and the server's
``mlflow_handlers``). ``MlflowUi.url`` in the server's configuration replaces that UI;
the server hands its value to its kernels through ``$AIR_MLFLOW_UI_URL``.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

from ..procs import alive
from ..redact import without_userinfo
from .stores import register_store

UI_URL_ENV = "AIR_MLFLOW_UI_URL"
LOCAL_SCHEMES = ("", "file", "sqlite")


@dataclass(frozen=True)
class JupyterServer:
    """A running Jupyter server, as its runtime file (``jpserver-<pid>.json``) says."""

    pid: int
    url: str
    """Its URL as the server sees itself, ending in its base URL: behind JupyterHub this
    is an internal address the browser cannot reach."""
    base_url: str
    """Its URL path, e.g. ``/user/ada/``: what a link in a notebook's output should start
    with, since the browser resolves it against the page it shows."""


def is_local_store(tracking_uri: str) -> bool:
    """Whether MLflow reads this store from the local disk (so no server shows it)."""
    return urlsplit(tracking_uri).scheme in LOCAL_SCHEMES


def ui_base(
    tracking_uri: str, *, absolute: bool = False, environ: Mapping[str, str] | None = None
) -> str | None:
    """The URL of the MLflow UI showing ``tracking_uri``, ending in ``/``; None if none.

    An http(s) tracking server is its own UI. Otherwise the configured override wins,
    then the UI that this kernel's Jupyter server serves for the store, which this
    registers (idempotent) so that the server agrees to serve it. ``absolute`` asks
    for the server's own URL rather than its base path: for text outside the browser,
    since the absolute URL is wrong behind a proxy such as JupyterHub.
    """
    env = os.environ if environ is None else environ
    if urlsplit(tracking_uri).scheme in ("http", "https"):
        return _slash(without_userinfo(tracking_uri))  # links never carry credentials
    if env.get(UI_URL_ENV):
        return _slash(env[UI_URL_ENV])
    if not is_local_store(tracking_uri):
        return None
    server = current_jupyter_server(env)
    if server is None:
        return None
    root = server.url if absolute else server.base_url
    return f"{_slash(root)}jupyter-air/mlflow/{register_store(tracking_uri)}/"


def logs_url(
    job_id: str,
    *,
    cell: int | None = None,
    stacks: bool = False,
    profile: bool = False,
    absolute: bool = False,
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """The job's logs view in JupyterLab (``lab?air-job=<id>``), on one cell of a warm
    session when ``cell`` is given (``&air-cell=N``), showing the ranks' stacks with
    ``stacks`` (``&air-stacks=1``: taken now if the job runs), profiling the ranks' next
    steps with ``profile`` (``&air-profile=1``), if a Jupyter server is known."""
    server = current_jupyter_server(os.environ if environ is None else environ)
    if server is None:
        return None
    root = server.url if absolute else server.base_url
    one_cell = "" if cell is None else f"&air-cell={cell:d}"
    show_stacks = "&air-stacks=1" if stacks else ""
    profiling = "&air-profile=1" if profile else ""
    job = quote(job_id, safe="")
    return f"{_slash(root)}lab?air-job={job}{one_cell}{show_stacks}{profiling}"


#: Opens a page in MLflow's model-training view: MLflow 3's UI picks the view from this
#: query (else from the browser's last choice, GenAI by default), not from the
#: experiment's kind tag (which ``run_page`` sets for other MLflow UIs).
MODEL_TRAINING_VIEW = "?workflowType=machine_learning"


def experiment_url(base: str, experiment_id: str) -> str:
    """The MLflow UI page of an experiment (the UI routes in the URL fragment)."""
    return f"{_experiment_route(base, experiment_id)}{MODEL_TRAINING_VIEW}"


def run_url(base: str, experiment_id: str, run_id: str, tab: str | None = None) -> str:
    """The MLflow UI page of a run, or one of its tabs (``artifacts``)."""
    run = quote(run_id, safe="") + (f"/{tab}" if tab else "")
    return f"{_experiment_route(base, experiment_id)}/runs/{run}{MODEL_TRAINING_VIEW}"


def _experiment_route(base: str, experiment_id: str) -> str:
    return f"{_slash(base)}#/experiments/{quote(experiment_id, safe='')}"


def current_jupyter_server(
    environ: Mapping[str, str] | None = None, runtime_dir: Path | None = None
) -> JupyterServer | None:
    """The Jupyter server that started this kernel; outside a kernel (``air``, a shell),
    the only one running; else None.

    Kernels carry the pid of what started them in ``JPY_PARENT_PID``. A kernel that no
    Jupyter server started (nbclient, VS Code) gets None, never some other server that
    happens to run: its links would name a server that knows nothing of this kernel
    and may not serve its store. This reads the runtime files as
    ``jupyter_server.serverapp.list_running_servers`` does, without importing the
    server (and tornado) into the kernel.
    """
    env = os.environ if environ is None else environ
    if runtime_dir is None:
        from jupyter_core.paths import jupyter_runtime_dir

        runtime_dir = Path(jupyter_runtime_dir())
    servers = list(_running_servers(runtime_dir))
    parent = env.get("JPY_PARENT_PID")
    if parent:
        return next((server for server in servers if str(server.pid) == parent), None)
    return servers[0] if len(servers) == 1 else None


def _running_servers(runtime_dir: Path) -> Iterator[JupyterServer]:
    for path in sorted(runtime_dir.glob("jpserver-*.json")):
        try:
            info = json.loads(path.read_text())
            server = JupyterServer(
                pid=int(info["pid"]), url=str(info["url"]), base_url=str(info["base_url"])
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being written, or not a server's file
        if alive(server.pid):
            yield server


def _slash(url: str) -> str:
    return url if url.endswith("/") else url + "/"


#: Where ``mlflow ui`` listens when given no address.
MLFLOW_UI_DEFAULT = "http://127.0.0.1:5000/"


def ui_command(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """What opens a run when no MLflow UI is served to this kernel (a kernel without a
    Jupyter server, as in VS Code): the command, then the run's page in what it serves.
    Credentials in the store's URI are masked, so the text can be shown and shared."""
    uri = without_userinfo(tracking_uri)
    page = run_url(MLFLOW_UI_DEFAULT, experiment_id, run_id)
    note = " (add the store's credentials, left out here)" if uri != tracking_uri else ""
    return f"mlflow ui --backend-store-uri {shlex.quote(uri)}{note}, then open {page}"
