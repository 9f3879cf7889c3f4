"""Links to a job's MLflow run, experiment and logs, for the cell output."""

from __future__ import annotations

from ..tracking.stores import store_key


def ui_base(tracking_uri: str) -> str | None:
    """Where the MLflow UI of this store is: the tracking server itself, or the Jupyter
    server's proxy for a local store (None when no Jupyter server is known)."""
    override = _override()
    if override:
        return override.rstrip("/") + "/"
    if tracking_uri.startswith(("http://", "https://")):
        return tracking_uri.rstrip("/") + "/"
    server = jupyter_server_url()
    if server is None:
        return None
    return f"{server}jupyter-air/mlflow/{store_key(tracking_uri)}/"


def _override() -> str | None:
    import os

    return os.environ.get("AIR_MLFLOW_UI_URL") or None


def jupyter_server_url() -> str | None:
    """The URL (with base_url) of the Jupyter server that started this kernel."""
    import os

    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return None
    servers = list(list_running_servers())
    parent = os.environ.get("JPY_PARENT_PID")
    for info in servers:
        if parent and str(info.get("pid")) == parent:
            return str(info["url"])
    return str(servers[0]["url"]) if len(servers) == 1 else None


def ui_links(
    tracking_uri: str, experiment_id: str, run_id: str, job_id: str
) -> dict[str, str | None]:
    base = ui_base(tracking_uri)
    if base is None:
        return {"run": None, "experiment": None, "logs": None}
    run = f"{base}#/experiments/{experiment_id}/runs/{run_id}"
    return {
        "run": run,
        "experiment": f"{base}#/experiments/{experiment_id}",
        "logs": f"{run}/artifacts",
    }
