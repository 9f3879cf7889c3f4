"""The node agent's output channel, without a cluster: what one poll hands the supervisor."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jupyter_air.jobs.backends.ray.nodes import RayNodes
from jupyter_air.jobs.node import agent as node_agent
from jupyter_air.jobs.node.agent import NodeAgent
from jupyter_air.jobs.node.hints import GpuSample, HintRecorder, read_hints
from jupyter_air.jobs.node.launch import in_this_python
from jupyter_air.jobs.supervision.system_feed import SystemMetricsFeed
from jupyter_air.tracking.sampling import Sample, SampleLoop
from tests.conftest import WriteScenario
from tests.factories import job_spec
from tests.fake_nvml import FakeGpu, Scenario
from tests.jobs.test_system_feed import Journaled
from tests.waits import until


def watching(
    attempt_dir: Path,
    clock_offsets: list[float],
    on_metrics: Callable[[int, list[Sample]], None],
    hints: HintRecorder | None = None,
) -> RayNodes:
    """The supervisor's watch over nodes already placed, their clocks that far ahead."""
    nnodes = len(clock_offsets)
    watch = RayNodes(
        job_spec("command", backend="ray", nnodes=nnodes),
        "job",
        1,
        attempt_dir,
        payload=None,
        extra_env={},
        on_metrics=on_metrics,
        hints=hints,
    )
    watch._nodes = [{"clock_offset": offset} for offset in clock_offsets]
    return watch


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
    monkeypatch.setattr(node_agent, "MAX_POLL_BYTES", 16)
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


def dead_pid() -> int:
    """A pid no process runs as now."""
    ended = subprocess.Popen([sys.executable, "-c", ""])
    ended.wait()
    return ended.pid


def test_a_new_agent_removes_the_folders_of_this_user_s_dead_agents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A killed agent (a Ray actor, a SIGKILLed Slurm task) never finishes: the next agent
    on the node removes its folder, and nothing of a running agent, nor what a link
    points to."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    pid = dead_pid()
    dead = tmp_path / f"air-node-{pid}-abc"
    (dead / "attempt_1").mkdir(parents=True)
    (dead / "payload.pkl").write_bytes(b"the notebook's state")
    running = tmp_path / f"air-node-{os.getpid()}-def"
    running.mkdir()
    kept = tmp_path / "kept"
    kept.mkdir()
    link = tmp_path / f"air-node-{pid}-link"
    link.symlink_to(kept, target_is_directory=True)

    node = NodeAgent(metrics_interval=3600)
    try:
        assert not dead.exists(), "the dead agent's folder, with its payload, is gone"
        assert node._dir.parent == tmp_path
        assert node._dir.name.startswith(f"air-node-{os.getpid()}-")
        assert running.is_dir()
        assert link.is_symlink()
        assert kept.is_dir()
    finally:
        node.finish()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory away needs root")
def test_a_new_agent_leaves_another_user_s_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    others = tmp_path / f"air-node-{dead_pid()}-others"
    others.mkdir()
    os.chown(others, 12345, 12345)
    NodeAgent(metrics_interval=3600).finish()
    assert others.is_dir()


def test_a_ray_node_feeds_the_attempt_s_hints_as_the_local_backend_does(
    scenario: WriteScenario, tmp_path: Path
) -> None:
    """The agent's metrics sample carries its GPUs' readings; the supervisor's watch
    turns them into the attempt's hints, named by node on a multi-node job."""
    scenario(
        Scenario(
            gpus=[
                FakeGpu(
                    util=90,
                    mem_total=80 * 1024**3,
                    mem_used=79 * 1024**3,
                    clock_reasons=["sw_thermal"],
                    clocks={"sm": 990},
                    max_clocks={"sm": 1980},
                ),
                FakeGpu(util=90, mem_used=1024**3),
            ]
        )
    )
    node = NodeAgent(metrics_interval=3600)
    try:
        node._rank_gpus = {2: 0, 3: 1}  # as start() sets it for node 1's ranks
        node._metrics.loop.take()  # a metrics sample, as the agent takes every interval
        report = node.poll()
    finally:
        node.finish()
    [readings] = report["hints"]["samples"]
    assert readings[0] == GpuSample(
        util=90,
        mem_used_mib=79 * 1024,
        mem_total_mib=80 * 1024,
        health=readings[0].health,
        max_sm_clock_mhz=1980,
    )
    assert readings[0].health is not None
    assert readings[0].health.clock_reasons == 0x20, "the hardware's figures travel too"
    tags: list[str] = []
    recorder = HintRecorder(tmp_path, lambda key, text: tags.append(key), nnodes=2)
    watch = watching(tmp_path, [0.0, 0.0], lambda node, samples: None, recorder)
    watch._feed_hints(1, report["hints"])
    doc = read_hints(tmp_path)
    assert [h["kind"] for h in doc["hints"]] == ["memory_full", "gpu_throttle"]
    assert doc["hints"][0]["text"].startswith("node 1: GPU 0 memory at 99 % of 80 GiB")
    assert doc["hints"][1]["text"].startswith("node 1: GPU 0 (rank 2): thermal slowdown since ")
    assert doc["hints"][1]["text"].endswith(", 50 % of its clock")
    assert doc["gpus"] == [], "a GPU index is only a node's: the chart's GPUs are not named"
    assert tags == ["air.hint.memory_full", "air.hint.gpu_throttle"]


def test_a_ray_node_s_samples_are_logged_as_the_local_node_s_are(
    scenario: WriteScenario, tmp_path: Path
) -> None:
    """One sampler on every node and one path into MLflow: a one-node Ray job's run gets
    the names a local job's gets, at the supervisor's clock."""
    scenario(Scenario(gpus=[FakeGpu(util=40)]))
    local: list[Sample] = []
    loop = SampleLoop(3600, local.append)
    loop.take()
    loop.finish(last=False)
    node = NodeAgent(metrics_interval=3600)
    try:
        node._metrics.loop.take()  # as the agent's loop takes every interval
        report = node.poll()
    finally:
        node.finish()
    client = Journaled.at(tmp_path)
    feed = SystemMetricsFeed("run", client.attempt, 1)
    watch = watching(tmp_path, [2.0], feed.add)  # the node's clock is 2 s ahead of ours
    watch._absorb(0, report)
    feed.finish()
    logged = client.of("run")
    assert {key for key, *_ in logged} == {f"system/{name}" for name in local[0].metrics}
    assert "system/gpu_0_utilization_percentage" in {key for key, *_ in logged}
    [sample] = report["metrics"]
    assert {t for *_, t in logged} == {int((sample.t - 2.0) * 1000)}


def test_a_node_asked_for_a_sample_sends_one_with_its_next_poll(scenario: WriteScenario) -> None:
    """A session cell ended with no sample in its span: the supervisor asks every node."""
    scenario(Scenario(gpus=[FakeGpu(util=40)]))
    node = NodeAgent(metrics_interval=3600)
    try:
        node._metrics.loop.start()  # as start() does with the ranks
        assert node.poll()["metrics"] == [], "none before the interval"
        node.sample_now()
        sent = until(  # the first sample loads MLflow's monitors
            lambda: node.poll()["metrics"], "a sample after sample_now", 120, step=0.1
        )
    finally:
        node.finish()
    [sample] = sent
    assert sample.step == 0
    assert "gpu_0_utilization_percentage" in sample.metrics


def test_a_command_of_ours_runs_in_the_node_s_python_and_a_user_s_as_given() -> None:
    """A warm session's ranks were named by the kernel's interpreter, which a cluster's
    node may not have; the node runs this package's modules in its own."""
    ours = ["/kernel/venv/bin/python", "-u", "-m", "jupyter_air.jobs.sessions.rank"]
    assert in_this_python(ours) == [sys.executable, *ours[1:]]
    theirs = ["/kernel/venv/bin/python", "-u", "-m", "train", "--lr", "0.1"]
    assert in_this_python(theirs) == theirs
    assert in_this_python(["python", "train.py"]) == ["python", "train.py"]
