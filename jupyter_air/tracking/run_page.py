"""What MLflow's UI shows of the experiments and runs that jobs make.

Our users train models, so their experiments are of MLflow's model-training kind (not
GenAI), and every run's description links to its job's logs, the way the managed
product shows a job's logs on its run page. Imports no MLflow: ``air run`` and the
kernel's link code use it without paying for ``import mlflow``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .ui_links import UI_URL_ENV, is_local_store, logs_url

if TYPE_CHECKING:
    from mlflow import MlflowClient

#: The experiment tag MLflow 3 reads an experiment's kind from, and its model-training value.
EXPERIMENT_KIND = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"
#: The run tag MLflow's UI shows as the run's description (markdown).
DESCRIPTION = "mlflow.note.content"
#: Starts the description's logs line, so that it is added once.
LOGS_HEADING = "**Logs of job"


def mark_model_training(client: MlflowClient, experiment_id: str) -> None:
    """Give the experiment the model-training kind, unless it has a kind: a user's own
    choice (a GenAI experiment they use for training too) stays."""
    experiment = client.get_experiment(experiment_id)
    if not experiment.tags.get(EXPERIMENT_KIND):
        client.set_experiment_tag(experiment_id, EXPERIMENT_KIND, MODEL_TRAINING)


def logs_line(job_id: str, tracking_uri: str, environ: Mapping[str, str] | None = None) -> str:
    """The description's markdown line: the job's logs view in JupyterLab (when a Jupyter
    server is known) and the ``air logs`` command that prints them anywhere.

    The MLflow UI of a local store is served by that same Jupyter server, so the link is
    its path (right behind JupyterHub too); another UI gets the server's own URL.
    """
    env = os.environ if environ is None else environ
    ours = is_local_store(tracking_uri) and not env.get(UI_URL_ENV)
    url = logs_url(job_id, absolute=not ours, environ=env)
    view = f"[open them in JupyterLab]({url}) or run " if url else "run "
    return f"{LOGS_HEADING} {job_id}:** {view}`air logs {job_id}`"


def describe_run(
    description: str | None,
    job_id: str,
    tracking_uri: str,
    environ: Mapping[str, str] | None = None,
) -> str:
    """``description`` with the job's logs line added after it (once): the user's own
    text is kept as written."""
    text = (description or "").rstrip()
    if f"{LOGS_HEADING} {job_id}:**" in text:
        return text
    line = logs_line(job_id, tracking_uri, environ)
    return f"{text}\n\n{line}" if text else line
