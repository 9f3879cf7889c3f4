"""The jupyter_air server extension application."""

from __future__ import annotations

import threading
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from traitlets import Float, TraitError, validate

from ..gpu.sampler import GpuSampler
from ..jobs.retention import DEFAULT_DAYS, check_days, prune_in_background
from ..jobs.store import JobStore, settle_periodically
from ..metrics.settings import AirMetrics
from ..notify.courier import ensure_courier
from ..tracking.run_tails import resume_pending
from ..tracking.targets import bound_requests
from ..tracking.ui_server import MlflowUi
from .gpu_handlers import GpuHandler, GpuSampleHandler, JobGpuHandler
from .jobs_handlers import JOB, REQUEST_BUSY_TIMEOUT, jobs_handlers
from .metrics_handlers import metrics_handlers
from .mlflow_handlers import mlflow_ui_handlers
from .notifications_handlers import notifications_handlers
from .profile_handlers import profile_handlers
from .runs_handlers import runs_handlers
from .schedules_handlers import keep_scheduler_running, schedules_handlers
from .usage_handlers import usage_handlers


class AirExtension(ExtensionApp):
    """Serves the GPU resources API and the MLflow UI of local stores; owns the server's
    one GPU sampler and the MLflow UI processes."""

    name = "jupyter_air"
    load_other_extensions = True
    classes = [GpuSampler, MlflowUi, AirMetrics]  # noqa: RUF012 (traitlets reads a plain class attribute)

    log_retention_days = Float(
        DEFAULT_DAYS,
        help=(
            "Days the logs of a finished job are kept; older ones are removed when the server "
            "starts (kernels and the CLI read $AIR_LOG_RETENTION_DAYS, default 60)."
        ),
    ).tag(config=True)

    @validate("log_retention_days")
    def _check_retention(self, proposal: dict[str, Any]) -> float:
        try:
            return check_days(proposal["value"])
        except ValueError as err:  # a negative one would remove every finished job's logs
            raise TraitError(f"AirExtension.log_retention_days: {err}") from None

    sampler: GpuSampler
    mlflow_ui: MlflowUi
    store: JobStore

    def initialize_settings(self) -> None:
        bound_requests()  # the runs panel's MLflow calls end in time when a server is down
        self.sampler = GpuSampler(parent=self, log=self.log)
        assert self.serverapp is not None
        self.mlflow_ui = MlflowUi(parent=self, log=self.log, base_url=self.serverapp.base_url)
        self.mlflow_ui.share_with_kernels()
        self.store = JobStore(busy_timeout=REQUEST_BUSY_TIMEOUT)
        AirMetrics(parent=self).share_with_jobs(self.store.home)  # the grid's CO2 intensity
        self._settling = threading.Event()

    def initialize_handlers(self) -> None:
        kwargs = {"sampler": self.sampler, "store": self.store}
        self.handlers.extend(
            [
                (r"/jupyter-air/gpu", GpuHandler, kwargs),
                (r"/jupyter-air/gpu/sample", GpuSampleHandler, kwargs),
                (rf"/jupyter-air/jobs/{JOB}/gpu", JobGpuHandler, {"store": self.store}),
            ]
        )
        self.handlers.extend(mlflow_ui_handlers(self.mlflow_ui))
        self.handlers.extend(jobs_handlers(self.store))
        self.handlers.extend(profile_handlers(self.store))
        self.handlers.extend(runs_handlers(self.store))
        self.handlers.extend(schedules_handlers(self.store))
        self.handlers.extend(notifications_handlers(self.store))
        self.handlers.extend(metrics_handlers(self.sampler, self.store, AirMetrics(parent=self)))
        self.handlers.extend(usage_handlers(self.store, AirMetrics(parent=self)))

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        self.sampler.start()
        self.mlflow_ui.clean_leftovers()
        prune_in_background(self.store, self.log_retention_days)
        settle_periodically(self.store, 30.0, self._settling)  # jobs whose supervisor died
        keep_scheduler_running(self.store, 60.0, self._settling, self.log)
        threading.Thread(target=self._resume_tails, name="air-resume-tails", daemon=True).start()

    def _resume_tails(self) -> None:
        """What a tracking server that was down still owes (runs' points, ends, logs) is
        tried again by the user's tail process: started now and whenever it left with
        something pending (it stays while anything is due); so are the notifications a
        courier that died left unsent."""
        while True:
            resume_pending(self.store.home)
            if self.store.outbox.next_due() is not None:
                ensure_courier(self.store.home)
            if self._settling.wait(60.0):
                return

    async def stop_extension(self) -> None:
        self.sampler.stop()
        self._settling.set()
        self.mlflow_ui.stop()
