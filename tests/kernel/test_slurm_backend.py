"""``--backend slurm``: cells, functions, workloads, sessions and schedules on a real
Slurm cluster of two nodes.

The cluster is Debian's ``slurm-wlm`` on this machine (``tests/slurm_cluster``): one
``slurmctld``, two ``slurmd`` named apart, a ``munged`` of its own, started once for
this module. Jobs run 2 nodes x 1 rank with PyTorch's CPU build and gloo.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.backend_contract import (  # the contract's tests, run on this module's cluster
    Engine,
    test_a_failing_rank_stops_the_others_and_fails_the_attempt,  # noqa: F401
    test_a_retry_is_a_new_attempt_with_its_own_run,  # noqa: F401
    test_cancel_stops_every_rank,  # noqa: F401
    test_every_node_s_system_samples_reach_the_attempt_s_run,  # noqa: F401
    test_every_rank_gets_the_torchrun_environment_and_its_own_log,  # noqa: F401
    test_the_timeout_stops_every_rank_and_fails_the_job,  # noqa: F401
)
from tests.slurm_cluster import SlurmCluster, available, slurm_cluster

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(not available(), reason="needs slurm-wlm and munge (make setup)"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """The cluster, and SLURM_CONF naming it for this process and what it starts."""
    with (
        slurm_cluster(tmp_path_factory.mktemp("slurm")) as running,
        pytest.MonkeyPatch.context() as env,
    ):
        env.setenv("SLURM_CONF", str(running.conf))
        for name in [n for n in os.environ if n.startswith("SLURM_JOB")]:
            env.delenv(name)
        yield running


@pytest.fixture
def engine(cluster: SlurmCluster) -> Engine:
    return Engine("slurm", nnodes=2, nproc_per_node=1)
