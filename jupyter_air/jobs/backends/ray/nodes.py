"""The ray backend: one attempt's ranks across the nodes of a Ray cluster.

The supervisor is the Ray driver. It reserves one bundle per node (a placement group,
STRICT_SPREAD) and places a node agent on each as an actor; the calls to them are Ray's
actor calls. The rest (the shape, the polls, the stop rule) is ``AgentNodes``'. A node
whose agent went is looked up in Ray's node table: one Ray says died (removed, its
raylet gone) is named, with Ray's reason, before its peers' broken collectives.
"""

from __future__ import annotations

import os
from typing import Any

from ..agents import ASK_TIMEOUT, AgentNodes, ClusterWord, reason
from .agent import RayNodeAgent
from .cluster import (
    alive_nodes,
    check_capacity,
    connect,
    dead_nodes,
    node_shape,
    reserve,
    resolve_address,
)

METRICS_INTERVAL = float(os.environ.get("AIR_SYSTEM_METRICS_INTERVAL", "10"))
#: Seconds a finished call's value may take to come back from its node.
GET_TIMEOUT = 30.0


class RayNodes(AgentNodes):
    """One actor per node, in a placement group; both go at ``close``."""

    _agents: list[Any]
    _group: Any = None

    def _place(self) -> int:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self._agents = []
        address = resolve_address(self._spec.backend.settings.get("address"))
        compute = self._spec.compute
        if not ray.is_initialized():
            connect(address)
        nodes = alive_nodes()
        shape = node_shape(compute.nproc_per_node, nodes)
        check_capacity(address, compute.nnodes, shape, nodes)
        name = f"air-{self._job_id}-{self._attempt}"
        self._group = reserve(compute.nnodes, shape, name, self._cancel)
        agent_class = ray.remote(RayNodeAgent)
        bundle = shape.bundle()
        for node in range(compute.nnodes):
            strategy = PlacementGroupSchedulingStrategy(
                self._group, placement_group_bundle_index=node
            )
            self._agents.append(
                agent_class.options(
                    num_cpus=bundle["CPU"],
                    num_gpus=bundle.get("GPU", 0),
                    scheduling_strategy=strategy,
                    max_restarts=0,
                    name=f"air-{self._job_id}-{self._attempt}-node-{node}",
                ).remote(METRICS_INTERVAL)
            )
        return len(self._agents)

    def _cluster_error(self, err: Exception) -> str:
        return f"Ray: {reason(err)}"

    def _call(self, node: int, method: str, *args: Any) -> Any:
        return getattr(self._agents[node], method).remote(*args)

    def _ready(self, calls: list[Any], timeout: float) -> list[int]:
        import ray

        ready, _ = ray.wait(calls, num_returns=len(calls), timeout=timeout)
        done = {ref.hex() for ref in ready}
        return [i for i, ref in enumerate(calls) if ref.hex() in done]

    def _answer(self, call: Any) -> Any:
        import ray

        return ray.get(call, timeout=GET_TIMEOUT)

    def _kill(self, node: int) -> None:
        import ray

        ray.kill(self._agents[node])

    def _describe(self, node: int) -> str:
        info = self._nodes[node]
        return f"node {node} ({info['hostname']}, {info['ip']}, Ray node {info['node_id'][:12]})"

    def _label(self, info: dict[str, Any]) -> str:
        return f"Ray node {info['node_id']}"

    def _cluster_word(self) -> ClusterWord | None:
        """This attempt's nodes that Ray says died, and why."""
        dead = dead_nodes([str(n["node_id"]) for n in self._nodes], ASK_TIMEOUT)
        lost = [n for n, info in enumerate(self._nodes) if info["node_id"] in dead]
        if not lost:
            return None
        said = [
            f"{self._describe(n)} was lost: Ray says {dead[self._nodes[n]['node_id']]}"
            for n in lost
        ]
        return ClusterWord(lost, "; ".join(said))

    def _release(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        for agent in getattr(self, "_agents", []):
            ray.kill(agent)
        self._agents = []
        if self._group is not None:
            remove_placement_group(self._group)
            self._group = None
