"""The node agent's output channel, without Ray: what one poll hands the supervisor."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_air.jobs import ray_agent
from jupyter_air.jobs.ray_agent import NodeAgent


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[NodeAgent]:
    node = NodeAgent(metrics_interval=3600)
    node._logs = {3: tmp_path / "rank_3.log"}  # as start() sets it for a node's ranks
    yield node
    node.finish()


def test_a_poll_hands_over_whole_records_and_keeps_a_partial_one(
    agent: NodeAgent, tmp_path: Path
) -> None:
    log = tmp_path / "rank_3.log"
    log.write_bytes(b"1\tOI\tfirst\n2\tOI\tsec")
    assert agent.poll()["logs"] == {3: b"1\tOI\tfirst\n"}
    with log.open("ab") as f:
        f.write(b"ond\n")
    assert agent.poll()["logs"] == {3: b"2\tOI\tsecond\n"}
    assert agent.poll()["logs"] == {}


def test_a_record_longer_than_one_poll_travels_in_pieces(
    agent: NodeAgent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ray_agent, "MAX_POLL_BYTES", 16)
    record = b"1\tOI\t" + b"x" * 40 + b"\n"
    (tmp_path / "rank_3.log").write_bytes(record)
    pieces = [agent.poll()["logs"].get(3, b"") for _ in range(4)]
    assert all(len(piece) <= 16 for piece in pieces)
    assert b"".join(pieces) == record, "nothing lost, nothing repeated"


def test_finishing_removes_the_node_s_work_dir(tmp_path: Path) -> None:
    node = NodeAgent(metrics_interval=3600)
    work_dir = node._dir
    assert work_dir.is_dir()
    node.finish()
    assert not work_dir.exists(), "the payload (the notebook's data) must not stay on the node"
