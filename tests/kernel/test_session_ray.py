"""``%air_session start --backend ray --nnodes 2``: a warm session whose ranks run on the
node agents of a Ray cluster (two simulated nodes, as in ``test_ray_backend``), reaching
the kernel over TCP with the session's secret."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from jupyter_air.job_dir import JobDir
from jupyter_air.jobs.store import JobStore
from tests.kernel.conftest import Kernel, job_processes
from tests.kernel.test_distributed_magic import supervised_until_its_end, wait_done
from tests.kernel.test_ray_backend import cluster, kernel_env, wait_released  # noqa: F401
from tests.kernel.test_session import SESSION_JOB, cell

pytestmark = pytest.mark.ray


def test_a_session_on_two_ray_nodes_keeps_its_ranks_and_their_process_group(
    kernel: Kernel,
    air_home: Path,
    kernel_env: dict[str, str],  # noqa: F811 (the fixture, imported)
) -> None:
    started = kernel.run("%air_session start --backend ray --nnodes 2 -n 1")
    assert started.error is None, started.traceback
    assert "2 ranks on 2 Ray nodes" in started.text
    found = SESSION_JOB.search(started.text)
    assert found, started.text
    job_id = found.group(1)

    made = (
        "import os, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\nseen = 0\n"
        "print('on node', os.environ['GROUP_RANK'], flush=True)\n"
        "dist.get_world_size()"
    )
    first = kernel.run(f"%%air_distributed --session\n{made}")
    assert first.value() == "2"
    assert "[node 1 rank 1] on node 1" in first.stdout  # both nodes' output, in the cell
    for expected in ("3", "6"):  # the warm group across nodes, `seen` kept on each rank
        body = "seen += 1\nt = torch.tensor([seen * (dist.get_rank() + 1)])\ndist.all_reduce(t)\n"
        assert cell(kernel, body + "int(t)") == expected

    # The ranks reach the kernel over TCP at one address facing the cluster; once they
    # are in, the door is shut, and the secret is neither in their environment nor left
    # in the job's directory.
    address = kernel.run(
        "from jupyter_air.kernel.warm_session import WarmSession\n"
        "WarmSession.current.session.ticket.address"
    ).value()
    kind, host, port = address.strip("'").split(":")
    assert kind == "tcp"
    assert host not in ("0.0.0.0", "::")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=5).close()
    assert cell(kernel, "'AIR_SESSION_TICKET' in os.environ") == "False"
    assert not JobDir(JobStore(air_home).job_dir(job_id)).session_ticket.exists()

    kernel.run("%air_session stop")
    job = wait_done(air_home, job_id)
    assert job.status == "SUCCEEDED"
    supervised_until_its_end(job)
    deadline = time.monotonic() + 30
    while job_processes(job_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert job_processes(job_id) == []
    wait_released(kernel_env)  # no placement group, no CPU left held on the cluster
