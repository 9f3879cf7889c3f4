"""The ray backend: one node agent per node of an existing Ray cluster (``nodes``,
``agent``), reached and reserved by ``cluster``. Ray itself is imported only when a
job runs here: ``pip install 'jupyter-air[ray]'``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..base import AttemptContext, Backend, BackendRefused, Nodes, Placement
from .settings import ALIASES, RaySettings


class RayBackend(Backend):
    name = "ray"
    summary = "one node agent per node of a Ray cluster"
    multi_node = True
    settings_model = RaySettings
    aliases = ALIASES
    samples_at_close = True

    def prepare(self, placement: Placement) -> dict[str, Any]:
        """The cluster's address (the submitter's, else ``RAY_ADDRESS``, else ``auto``),
        checked to answer unless this is a dry run."""
        from ..agents import ClusterError
        from .cluster import check_reachable, require_ray, resolve_address

        address = resolve_address(placement.settings.get("address"))
        if placement.reach:
            try:
                require_ray()
                check_reachable(address)
            except ClusterError as err:
                raise BackendRefused(None, str(err)) from None
        return {"address": address}

    def kernel_host(self, settings: Mapping[str, Any]) -> str | None:
        """This machine's address on the route to the cluster: one address, never all."""
        from ...sessions.wire import facing

        try:
            return facing(str(settings["address"]))
        except OSError as err:
            raise BackendRefused(
                None, f"--backend ray: no route to the cluster here: {err}"
            ) from None

    def start(self, attempt: AttemptContext) -> Nodes:
        from .nodes import RayNodes

        return RayNodes.for_attempt(attempt)
