"""Reaching a Ray cluster and reserving one bundle per node for a job.

Every wait here is bounded: ``ray.init`` on an address nobody answers retries for
minutes, and a placement group the cluster cannot hold waits forever. Errors say what
was asked and what the cluster has, before any rank starts.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..agents import Cancelled, ClusterError

#: Seconds to wait for ``ray.init`` and for the cluster to grant the placement group.
CONNECT_TIMEOUT = float(os.environ.get("AIR_RAY_CONNECT_TIMEOUT", "60"))
PLACEMENT_TIMEOUT = float(os.environ.get("AIR_RAY_PLACEMENT_TIMEOUT", "120"))
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
INSTALL_HINT = "pip install 'jupyter-air[ray]'"


def require_ray() -> None:
    """Refuse early, with the install command, when Ray is not installed."""
    try:
        found = importlib.util.find_spec("ray") is not None
    except ValueError:  # ray in sys.modules as None: imports of it are blocked
        found = False
    if not found:
        raise ClusterError(f"the ray backend needs Ray, which is not installed: {INSTALL_HINT}")


def resolve_address(address: str | None, env: Mapping[str, str] = os.environ) -> str:
    """The option, else ``RAY_ADDRESS``, else ``auto`` (the cluster this machine is part of)."""
    return address or env.get("RAY_ADDRESS") or "auto"


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """A TCP connect to ``host:port`` addresses, which fails in milliseconds where
    ``ray.init`` would retry for minutes. ``auto`` is left to Ray."""
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        return
    host = host.removeprefix("[").removesuffix("]")  # [::1]:6379
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as err:
        raise ClusterError(f"cannot reach the Ray cluster at {address}: {err}", True) from err


def connect(address: str) -> None:
    """Join the cluster as a driver, quietly: rank output travels on our own channel,
    so Ray's log forwarding (and its deduplication) stays off."""
    require_ray()
    check_reachable(address)
    import ray

    outcome: list[BaseException | None] = []

    def init() -> None:
        try:
            ray.init(
                address=address,
                log_to_driver=False,
                logging_level=logging.ERROR,
                namespace="jupyter_air",
            )
            outcome.append(None)
        except BaseException as err:
            outcome.append(err)

    handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    thread = threading.Thread(target=init, name="air-ray-init", daemon=True)
    thread.start()
    thread.join(CONNECT_TIMEOUT)
    _restore(handlers)
    if not outcome:
        raise ClusterError(f"the Ray cluster at {address} did not answer in {CONNECT_TIMEOUT:g} s")
    if outcome[0] is not None and address == "auto":
        raise ClusterError(
            "no Ray cluster found from this machine (no address given, so 'auto'): pass "
            "--ray-address HOST:PORT, or set c.AirMagics.ray_address or RAY_ADDRESS "
            f"({outcome[0]})".replace("\n", " "),
            True,
        )
    if outcome[0] is not None:
        raise ClusterError(f"cannot connect to the Ray cluster at {address}: {outcome[0]}")


def _restore(handlers: dict[signal.Signals, Any]) -> None:
    """Ray's core worker installs its own handlers for SIGTERM and friends, which dump a
    stack and can deadlock; the supervisor's cancel (SIGTERM) must reach its handler."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, handler in handlers.items():
        if handler is not None:
            signal.signal(sig, handler)


@dataclass(frozen=True)
class NodeShape:
    """What one node of the job holds: its ranks, one CPU and (on GPU clusters) one GPU each."""

    nproc: int
    gpus: bool

    def bundle(self) -> dict[str, float]:
        bundle = {"CPU": float(self.nproc)}
        if self.gpus:
            bundle["GPU"] = float(self.nproc)
        return bundle


def node_shape(nproc: int, nodes: list[dict[str, Any]]) -> NodeShape:
    """Ranks get GPUs when the cluster has any, as on one machine."""
    return NodeShape(nproc, any(n["Resources"].get("GPU", 0) > 0 for n in nodes))


def alive_nodes() -> list[dict[str, Any]]:
    import ray

    return [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]


#: Why a node died, by Ray's ``DeathReason`` (its ``NodeDeathInfo.Reason``).
DEATHS = {
    1: "its node was shut down",
    2: "its node died unexpectedly",
    3: "its node was preempted",
    4: "its node was removed as idle",
}


def dead_nodes(node_ids: list[str], timeout: float) -> dict[str, str]:
    """Which of these nodes Ray's node table says are dead, and why in its words
    (``its node was shut down (received SIGTERM)``); ``TimeoutError`` past ``timeout``
    (the table is the GCS's: a cluster losing its head may not answer)."""
    import ray

    table: list[list[dict[str, Any]]] = []
    reader = threading.Thread(
        target=lambda: table.append(ray.nodes()),  # type: ignore[no-untyped-call]
        name="air-ray-nodes",
        daemon=True,
    )
    reader.start()
    reader.join(timeout)
    if not table:
        raise TimeoutError(f"Ray's node table did not answer in {timeout:g} s")
    dead = {}
    for node in table[0]:
        if node.get("NodeID") in node_ids and not node.get("Alive"):
            said = DEATHS.get(node.get("DeathReason", 0), "its node died")
            message = node.get("DeathReasonMessage")
            dead[node["NodeID"]] = f"{said} ({message})" if message else said
    return dead


def check_capacity(
    address: str, nnodes: int, shape: NodeShape, nodes: list[dict[str, Any]]
) -> None:
    """Enough distinct nodes that can each hold one node's ranks, or say what is there."""
    bundle = shape.bundle()
    fits = [n for n in nodes if all(n["Resources"].get(k, 0) >= v for k, v in bundle.items())]
    if len(fits) >= nnodes:
        return
    seen = "; ".join(f"{n['NodeID'][:8]} ({_resources(n['Resources'])})" for n in nodes) or "none"
    raise ClusterError(
        f"asked for {nnodes} nodes with {_resources(bundle)} each; the Ray cluster at {address} "
        f"has {len(nodes)} alive node(s), {len(fits)} of which can hold that: {seen}",
        final=True,
    )


def reserve(nnodes: int, shape: NodeShape, name: str, cancelled: threading.Event) -> Any:
    """One bundle per node, each on a different node (STRICT_SPREAD), granted in time."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([shape.bundle()] * nnodes, strategy="STRICT_SPREAD", name=name)
    ready_ref = group.ready()
    deadline = time.monotonic() + PLACEMENT_TIMEOUT
    ready: list[Any] = []
    try:
        while not ready and not cancelled.is_set() and time.monotonic() < deadline:
            ready, _ = ray.wait([ready_ref], timeout=0.5)
    finally:
        if not ready:
            remove_placement_group(group)
    if not ready:
        if cancelled.is_set():
            raise Cancelled("cancelled while waiting for the cluster's nodes")
        raise ClusterError(
            f"the Ray cluster did not grant {nnodes} nodes with {_resources(shape.bundle())} each "
            f"in {PLACEMENT_TIMEOUT:g} s: other work holds those resources"
        )
    return group


def _resources(resources: Mapping[str, float]) -> str:
    shown = [f"{k} {v:g}" for k, v in resources.items() if k in ("CPU", "GPU")]
    return ", ".join(shown) or "no CPU"
