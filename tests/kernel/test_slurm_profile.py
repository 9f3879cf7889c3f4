"""A profile of a running job on a Slurm cluster of two nodes (issue 38, item 5): a rank
on each node profiles the same 5 steps when ``air profile`` asks, through the attempt's
folder on the disk the nodes share with this machine; the summary, the merged trace and
each rank's trace land as on a local job."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs.store import JobStore
from tests.air_cli import air
from tests.kernel.test_slurm_backend import cluster  # noqa: F401 (the module's Slurm cluster)
from tests.perf.profile_job import TRAIN, profiled, workload
from tests.slurm_cluster import available
from tests.waits import job_processes, until, wait_settled

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.heavy,
    pytest.mark.slow,
    pytest.mark.skipif(not available(), reason="needs slurm-wlm and munge (make setup)"),
    pytest.mark.usefixtures("cluster"),
]


def test_both_slurm_nodes_ranks_are_profiled_on_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "w.yaml").write_text(
        workload(sys.executable, "slurm", nnodes=2, extra=f"working_dir: {tmp_path}\n")
    )
    submitted = air("run", "-f", "w.yaml")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[1]
    try:
        perf = AttemptDir(JobStore(tmp_path / "home").attempt_dir(job_id, 1)).perf
        profiled(air, job_id, perf, uri)
    finally:
        (tmp_path / "stop").touch()
    assert wait_settled(tmp_path / "home", job_id, 180).status == "SUCCEEDED"
    until(lambda: job_processes(job_id) == [], "the job's ranks gone", 60)
