"""Where a kernel's distributed call sends its runs: the notebook's experiment, as
MLflow's own calls in the kernel would choose it, or, while the server does not answer,
the experiment by name alone."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from ..tracking.targets import (
    ExperimentRef,
    RunTarget,
    current_tracking_uri,
    default_experiment_name,
)
from .options import OptionError


@dataclass(frozen=True)
class KernelDestination:
    """Where a kernel's call sends its runs (``request.Destination``): resolved here, where
    the notebook's active run, ``MLFLOW_RUN_ID`` and ``mlflow.set_experiment()`` are."""

    experiment: str | None
    user: str
    notebook: str | None
    tracking_uri: str = field(default_factory=current_tracking_uri)

    def resolve(self) -> RunTarget | ExperimentRef:
        if named := self._named():
            return named
        from ..tracking import runs

        with runs.quiet_store_setup():
            return runs.resolve_target(self.experiment, self.user, self.notebook)

    def _named(self) -> ExperimentRef | None:
        """The experiment by name, where the notebook never loaded MLflow (no active run,
        ``set_experiment()`` nor ``set_tracking_uri()`` can have happened), so that the
        kernel imports none (about 2 s of CPU, and the store opened again, for one run):
        ``--experiment``, else ``MLFLOW_EXPERIMENT_NAME``, else ``/Users/<user>/<notebook>``.
        None where MLflow must be asked: it is loaded, or a run to resume or an
        experiment known by its id only is named in the environment."""
        if "mlflow" in sys.modules or os.environ.get("MLFLOW_RUN_ID"):
            return None
        if self.experiment:
            return ExperimentRef(self.tracking_uri, self.experiment)
        if os.environ.get("MLFLOW_EXPERIMENT_ID"):  # it comes before a name
            return None
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME")
        return ExperimentRef(
            self.tracking_uri, name or default_experiment_name(self.user, self.notebook)
        )

    def unanswered(self) -> ExperimentRef:
        return deferred_target(self.experiment, self.user, self.notebook, self.tracking_uri)


def deferred_target(
    option_experiment: str | None, user: str, notebook: str | None, tracking_uri: str
) -> ExperimentRef:
    """The experiment a deferred call's runs go to, by name, without asking the server:
    ``--experiment``, then ``MLFLOW_EXPERIMENT_NAME``, then ``/Users/<user>/<notebook>``.
    A run to resume or nest under, or an experiment known only by its id, needs the
    server: refused."""
    from mlflow.tracking import fluent

    why = "does not answer"
    if os.environ.get("MLFLOW_RUN_ID") or fluent.active_run() is not None:
        raise OptionError(
            f"--tracking deferred: the server {why}, and this call's run is "
            "nested in or resumes a run of it: end that run, or wait for it"
        )
    name = option_experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME")
    if not name and (os.environ.get("MLFLOW_EXPERIMENT_ID") or fluent._active_experiment_id):
        raise OptionError(
            f"--tracking deferred: the server {why}, and the notebook's "
            "experiment is known by its id only: name it with --experiment"
        )
    return ExperimentRef(tracking_uri, name or default_experiment_name(user, notebook))
