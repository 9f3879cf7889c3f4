"""``GET jupyter-air/gpu/usage?since=24h``: GPU-hours per user for the GPU panel's usage
view (``metrics.gpu_hours``): the caller's own jobs, everyone's for a Hub admin."""

from __future__ import annotations

import time
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..jobs.store import JobStore
from ..metrics.gpu_hours import usage_document
from ..metrics.settings import AirMetrics
from .base import AirHandler
from .jobs_handlers import in_store_thread


class GpuUsageHandler(AirHandler):
    """The usage view's answer; ``since`` is ``24h`` (default), ``7d`` or the like."""

    def initialize(self, store: JobStore, settings: AirMetrics) -> None:
        self.store = store
        self.metrics_settings = settings

    def hub_admin(self) -> bool:
        """Whether the caller is an admin of the Hub (its user model says so); no one is
        without a Hub."""
        hub_user = getattr(self.current_user, "hub_user", None)
        return isinstance(hub_user, dict) and hub_user.get("admin") is True

    @web.authenticated
    @authorized
    async def get(self) -> None:
        window = self.get_query_argument("since", "24h")
        owner = None if self.hub_admin() else self.caller().name
        threshold = self.metrics_settings.idle_threshold
        try:
            doc = await in_store_thread(
                usage_document, self.store, owner, window, time.time(), threshold
            )
        except ValueError as err:
            raise web.HTTPError(400, f"'since': {err}") from None
        doc["all_users"] = owner is None
        self.write_json(doc)


def usage_handlers(store: JobStore, settings: AirMetrics) -> list[tuple[str, Any, dict[str, Any]]]:
    return [(r"/jupyter-air/gpu/usage", GpuUsageHandler, {"store": store, "settings": settings})]
