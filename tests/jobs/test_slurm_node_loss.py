"""A node that Slurm takes away from 2-node jobs while they train: each job's outcome
names that node, its state and Slurm's reason, never the peer Slurm ended with it,
whichever node's agent went first; nothing of the jobs is left on either node.

Real Slurm (``tests/slurm_cluster``), started for this module with a short
``SlurmdTimeout``, so that a node whose ``slurmd`` is killed is set DOWN in seconds
(slurmctld pings every third of it; ``MessageTimeout`` bounds each ping). Each case
takes the node from three jobs at once, which share the two nodes: three runs of the
race between their agents (which one Slurm's SIGTERM reaches first, which rank's step
breaks first) for the time of one.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs.service import JobService
from jupyter_air.jobs.store import Job
from jupyter_air.status import JobStatus
from tests.air_cli import air
from tests.backend_contract import Engine, ended, rank_lines, submit
from tests.slurm_cluster import NODES, SlurmCluster, agents_of, available, slurm_cluster
from tests.waits import job_processes, until

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(not available(), reason="needs slurm-wlm and munge (make setup)"),
]

#: Seconds slurmctld waits on a silent slurmd before it sets the node DOWN, and on each
#: message (its pings): a killed slurmd's node is DOWN about 10 s later.
FAST_DOWN = {"SlurmdTimeout": "5", "MessageTimeout": "2"}

#: Two ranks in lockstep, a byte each way per step as a collective would (PyTorch's
#: import alone takes seconds on a loaded machine, times 9 runs): when one rank goes,
#: the other's next step breaks.
TRAINING = """\
import os, socket, time
address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
if os.environ["RANK"] == "0":
    peer, _ = socket.create_server(address).accept()
else:
    deadline = time.monotonic() + 60
    while True:
        try:
            peer = socket.create_connection(address)
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
print("training", flush=True)
while True:
    peer.sendall(b"x")
    if not peer.recv(1):
        raise SystemExit("the peer's step broke")
    time.sleep(0.05)
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """The cluster, and SLURM_CONF naming it for this process and what it starts."""
    with (
        slurm_cluster(tmp_path_factory.mktemp("slurm"), changed=FAST_DOWN) as running,
        pytest.MonkeyPatch.context() as env,
    ):
        env.setenv("SLURM_CONF", str(running.conf))
        for name in [n for n in os.environ if n.startswith("SLURM_JOB")]:
            env.delenv(name)
        yield running


@pytest.fixture(autouse=True)
def nodes_back(cluster: SlurmCluster) -> Iterator[None]:
    """After every test: every node's slurmd runs, and both nodes are back in service."""
    yield
    for node in NODES:
        if cluster.slurmd[node].poll() is not None:
            cluster.start_slurmd(node)
        if cluster.node_state(node).rstrip("*") not in ("idle", "mixed", "allocated"):
            cluster.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)

    def states() -> dict[str, str]:
        return {node: cluster.node_state(node) for node in NODES}

    until(lambda: set(states().values()) == {"idle"}, "both nodes idle", 60)


def set_down(cluster: SlurmCluster, node: str) -> str:
    """An administrator sets the node DOWN (a failed health check): Slurm ends its jobs."""
    cluster.run("scontrol", "update", f"nodename={node}", "state=down", "reason=bad gpu")
    return r"down: bad gpu"


def drain_then_cancel(cluster: SlurmCluster, node: str) -> str:
    """An administrator drains the node, then cancels the jobs on it (a drain that
    cannot wait for them: Slurm itself lets running jobs finish on a draining node)."""
    cluster.run("scontrol", "update", f"nodename={node}", "state=drain", "reason=maintenance")
    cluster.run("scancel", f"--nodelist={node}")
    return r"drain(ing|ed): maintenance"


def kill_slurmd(cluster: SlurmCluster, node: str) -> str:
    """The node's slurmd dies (its host stops answering): once SlurmdTimeout has passed,
    slurmctld sets it DOWN and ends its jobs. The job's task there runs on meanwhile."""
    cluster.kill_slurmd(node)
    return r"down: Not responding"


CASES: dict[str, Callable[[SlurmCluster, str], str]] = {
    "set down": set_down,
    "drained": drain_then_cancel,
    "slurmd killed": kill_slurmd,
}


def training(service: JobService, job: Job) -> list[dict[str, object]]:
    """Once both ranks train: the job's nodes, as its attempt recorded them."""

    def both() -> bool:
        return all(
            "training" in " ".join(rank_lines(service, job, 1, node, node)) for node in (0, 1)
        )

    until(both, "both ranks training", 180)
    return AttemptDir(service.store.attempt_dir(job.id, 1)).read_nodes()


#: Jobs each case takes a node from, at once (the nodes hold 4 one-CPU tasks each).
JOBS = 3


@pytest.mark.parametrize(
    ("case", "taken"), [("set down", "air-n2"), ("drained", "air-n1"), ("slurmd killed", "air-n2")]
)
def test_the_node_slurm_took_away_is_named_with_slurm_s_reason_not_its_peer(
    cluster: SlurmCluster, module_home: Path, monkeypatch: pytest.MonkeyPatch, case: str, taken: str
) -> None:
    monkeypatch.setenv("AIR_HOME", str(module_home))
    engine = Engine("slurm", nnodes=2, nproc_per_node=1)
    jobs = [submit(engine, module_home, TRAINING) for _ in range(JOBS)]
    nodes = [training(service, job) for service, job in jobs]
    taken_at = time.monotonic()
    state = CASES[case](cluster, taken)

    for (service, job), job_nodes in zip(jobs, nodes, strict=True):
        job = ended(service, job)
        took = time.monotonic() - taken_at
        (lost,) = [n["node"] for n in job_nodes if n["node_id"] == taken]
        (peer,) = [n for n in job_nodes if n["node"] != lost]
        message = job.message or ""
        assert job.status is JobStatus.FAILED, message
        assert re.fullmatch(
            rf"node {lost} \({taken}, [^,]+, Slurm job \d+\) was taken away by Slurm "
            rf"\({state}\); node {peer['node']} \(Slurm node {peer['node_id']}\) was ended with it",
            message,
        ), message
        (attempt,) = service.store.attempts(job.id)
        assert attempt.message == message
        assert attempt.exit_codes is not None
        assert None not in attempt.exit_codes, "each rank's end is known: Slurm's SIGTERM, relayed"
        limit = 30 if case == "slurmd killed" else 15  # there: SlurmdTimeout, then a ping
        assert took < limit, f"the outcome came {took:.1f} s after the node was taken"

    def left() -> list[psutil.Process]:
        return [p for _, job in jobs for p in job_processes(job.id) + agents_of(job.id)]

    until(lambda: left() == [], "the jobs' agents and ranks gone from both nodes", 60)

    if case != "set down":
        return
    shown = air("get", jobs[0][1].id).stdout  # as a user reads it (once: a new process)
    assert f"Slurm node {taken}" in shown, shown
    assert "Ray node" not in shown, shown
    assert re.search(r"exit codes \[(SIGTERM|1), (SIGTERM|1)\]", shown), shown


def test_a_job_slurm_cancels_says_so_naming_no_node(
    cluster: SlurmCluster, module_home: Path
) -> None:
    """``scancel`` of the Slurm job (its owner's, an administrator's): no node was taken,
    and Slurm said why it ended the step."""
    service, job = submit(Engine("slurm", nnodes=2, nproc_per_node=1), module_home, TRAINING)
    training(service, job)
    (slurm_job,) = [q.split("|")[0] for q in cluster.queue() if f"|air-{job.id}-1|" in q]
    cluster.run("scancel", slurm_job)

    job = ended(service, job)
    assert job.status is JobStatus.FAILED, job.message
    assert job.message == f"Slurm ended Slurm job {slurm_job}: CANCELLED"
    (attempt,) = service.store.attempts(job.id)
    assert attempt.exit_codes is not None
    assert None not in attempt.exit_codes, "each rank's end is known: Slurm's SIGTERM, relayed"

    def gone() -> bool:
        return job_processes(job.id) + agents_of(job.id) == []

    until(gone, "the job gone from both nodes", 60)
