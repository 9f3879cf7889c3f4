"""``GET jupyter-air/metrics``: Prometheus's text format, for the operator's scraper.

Its one credential is the metrics token (``Authorization: Bearer``, see
``metrics.settings``): Jupyter's own token or a browser's login cookie are refused, and
the metrics token opens no other route, so the per-user labels reach the scraper only.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import allow_unauthenticated
from jupyter_server.base.handlers import JupyterHandler
from prometheus_client import generate_latest
from tornado import web

from ..gpu.sampler import GpuSampler
from ..jobs.service import JobService
from ..jobs.store import JobStore
from ..metrics.collector import AirCollector
from ..metrics.settings import AirMetrics, TokenError, bearer_matches, read_token
from .base import server_user
from .gpu_handlers import kernel_owners
from .jobs_handlers import in_store_thread

#: The text format every Prometheus reads; ``generate_latest`` writes it for our names,
#: all of them valid in it.
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


class MetricsHandler(JupyterHandler):
    """The scrape: the token checked, the kernels' notebooks noted, then the collector.

    Not an API handler: a scrape is no user's activity (it must not keep an idle server
    from being culled), and it answers in text, errors too.
    """

    def initialize(self, collector: AirCollector, settings: AirMetrics) -> None:
        self.collector = collector
        self.metrics_settings = settings

    @allow_unauthenticated  # its own token authenticates it, whatever Jupyter's login says
    async def get(self) -> None:
        if not self.metrics_settings.token_file:
            raise web.HTTPError(404, "metrics are off: set c.AirMetrics.token_file")
        try:
            token = read_token(self.metrics_settings.token_file)
        except TokenError as err:
            self.log.error("jupyter-air/metrics refused: %s", err)
            raise web.HTTPError(
                503, "the metrics token is not usable: see the server log"
            ) from None
        if self.token and token == self.token:
            self.log.error("jupyter-air/metrics refused: its token is the server's own token")
            raise web.HTTPError(503, "the metrics token is not usable: see the server log")
        if not bearer_matches(self.request.headers.get("Authorization"), token):
            raise web.HTTPError(403, "the metrics token is needed (Authorization: Bearer)")
        owners = await kernel_owners(self)
        self.collector.kernels = {pid: owner["name"] or "" for pid, owner in owners.items()}
        body = await in_store_thread(generate_latest, self.collector.registry)
        self.set_header("Content-Type", TEXT_FORMAT)
        self.set_header("Cache-Control", "no-store")
        self.finish(body)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = exc.log_message if isinstance(exc, web.HTTPError) else None
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(f"{status_code}: {message or self._reason}\n")


def metrics_handlers(
    sampler: GpuSampler, store: JobStore, settings: AirMetrics
) -> list[tuple[str, type[MetricsHandler], dict[str, Any]]]:
    """The route, with the server's one collector (its counters last as the server does);
    jobs are seen as the server's user sees them."""
    collector = AirCollector(sampler, JobService(store, server_user()), settings)
    return [
        (r"/jupyter-air/metrics", MetricsHandler, {"collector": collector, "settings": settings})
    ]
