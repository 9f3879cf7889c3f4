"""What the ray backend checks before it places anything: the address, the capacity."""

from __future__ import annotations

import socket

import pytest

from jupyter_air.jobs.backends.agents import ClusterError
from jupyter_air.jobs.backends.ray.cluster import (
    NodeShape,
    check_capacity,
    check_reachable,
    node_shape,
    resolve_address,
)
from jupyter_air.jobs.node.outcome import AttemptEnd, first_failure
from jupyter_air.status import Outcome


def ray_node(node_id: str, cpus: float, gpus: float = 0) -> dict[str, object]:
    """A node as ``ray.nodes()`` describes it."""
    resources = {"CPU": cpus, "memory": 1e9, **({"GPU": gpus} if gpus else {})}
    return {"NodeID": node_id, "Alive": True, "Resources": resources}


def test_the_address_is_the_option_then_ray_address_then_auto() -> None:
    assert resolve_address("10.0.0.1:6379", {"RAY_ADDRESS": "10.0.0.2:6379"}) == "10.0.0.1:6379"
    assert resolve_address(None, {"RAY_ADDRESS": "10.0.0.2:6379"}) == "10.0.0.2:6379"
    assert resolve_address(None, {}) == "auto"


def test_an_address_nobody_listens_on_is_refused_at_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nobody listens
    with pytest.raises(ClusterError, match=rf"cannot reach the Ray cluster at 127.0.0.1:{port}"):
        check_reachable(f"127.0.0.1:{port}")
    check_reachable("auto")  # left to Ray: nothing to connect to here


def test_ranks_get_gpus_when_the_cluster_has_some() -> None:
    assert node_shape(4, [ray_node("a", 8)]).bundle() == {"CPU": 4.0}
    gpu_cluster = [ray_node("head", 8), ray_node("w1", 32, gpus=8)]
    assert node_shape(4, gpu_cluster).bundle() == {"CPU": 4.0, "GPU": 4.0}


def test_too_small_a_cluster_says_what_was_asked_and_what_is_there() -> None:
    nodes = [ray_node("aaaaaaaa11", 8), ray_node("bbbbbbbb22", 32, gpus=8)]
    with pytest.raises(ClusterError) as raised:
        check_capacity("10.0.0.1:6379", 2, NodeShape(4, gpus=True), nodes)
    assert str(raised.value) == (
        "asked for 2 nodes with CPU 4, GPU 4 each; the Ray cluster at 10.0.0.1:6379 has "
        "2 alive node(s), 1 of which can hold that: aaaaaaaa (CPU 8); bbbbbbbb (CPU 32, GPU 8)"
    )
    check_capacity("10.0.0.1:6379", 2, NodeShape(4, gpus=False), nodes)


def test_thefirst_failure_is_the_cause_not_its_consequences() -> None:
    cause = AttemptEnd(Outcome.FAILED, [1], failed_rank=1, message="rank 1 exited", failed_at=100.0)
    peer = AttemptEnd(Outcome.FAILED, [1], failed_rank=0, message="rank 0 exited", failed_at=100.4)
    stopped = AttemptEnd(Outcome.CANCELLED, [-15], message="stopped")
    assert first_failure({0: peer, 1: cause, 2: stopped}) is cause
    assert first_failure({0: stopped}) is None
