"""A profile of a running job on a Ray cluster of two nodes (issue 38, item 5): a rank on
each node profiles the same 5 steps when ``air profile`` asks, through the attempt's
folder on the disk the nodes share with this machine; the summary, the merged trace and
each rank's trace land as on a local job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs.store import JobStore
from tests.kernel.test_ray_backend import (  # the module's two Ray nodes
    RAY_MODULE_TIMEOUT,
    cluster,  # noqa: F401
)
from tests.perf.profile_job import TRAIN, profiled, workload
from tests.waits import job_processes, until, wait_settled

pytestmark = [pytest.mark.ray, pytest.mark.heavy, pytest.mark.slow, RAY_MODULE_TIMEOUT]


def test_both_ray_nodes_ranks_are_profiled_on_request(
    kernel_env: dict[str, str], air_home: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    ray = request.getfixturevalue("cluster")
    env = {**kernel_env, "RAY_ADDRESS": ray.address, "RAY_AUTH_MODE": "disabled"}
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "w.yaml").write_text(workload(sys.executable, "ray", nnodes=2))

    def air(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "jupyter_air.cli", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )

    submitted = air("run", "-f", "w.yaml")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[1]
    try:
        perf = AttemptDir(JobStore(air_home).attempt_dir(job_id, 1)).perf
        profiled(air, job_id, perf, env["MLFLOW_TRACKING_URI"])
    finally:
        (tmp_path / "stop").touch()
    assert wait_settled(air_home, job_id, 180).status == "SUCCEEDED"
    until(lambda: job_processes(job_id) == [], "the job's ranks gone", 60)
