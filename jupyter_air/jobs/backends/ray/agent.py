"""The node agent as a Ray actor: who its node is, in Ray's words."""

from __future__ import annotations

from typing import Any

from ...node.agent import NodeAgent


class RayNodeAgent(NodeAgent):
    """``NodeAgent``, naming its node by Ray's node id (simulated nodes share an IP)."""

    def describe(self) -> dict[str, Any]:
        import ray

        return {
            **super().describe(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
        }
