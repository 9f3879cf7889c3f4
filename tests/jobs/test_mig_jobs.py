"""A real job on MIG slices (issue 41, item 4), with ``air run``, its supervisor and its
ranks on the fake driver's H100 in MIG mode (three slices, the 3g.40gb one held by a
process): each rank gets its own free slice's MIG UUID as CUDA_VISIBLE_DEVICES, the run
says which, and while it holds them the next request is refused naming what is busy.
The rules themselves: tests/gpu/test_placement.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from jupyter_air.jobs.store import JobStore
from tests.air_cli import air
from tests.fake_nvml import FakeGpu, Scenario, build_library, env_for, h100_mig_slices
from tests.mlflow_store import fresh_store, migrated_template  # noqa: F401  (a fixture)
from tests.waits import until, wait_settled

#: Each rank says which device it was given, then waits for the word.
HOLDS = """\
import os, pathlib, time
rank = os.environ["RANK"]
pathlib.Path("up-" + rank).write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "unset"))
while not pathlib.Path("go").exists():
    time.sleep(0.05)
"""


def mig_uuid(slot: int) -> str:
    """The UUID the fake driver gives slice ``slot`` of GPU 0."""
    return f"MIG-fa4e0000-0000-4000-8000-{slot:012x}"


@pytest.mark.heavy
def test_a_two_rank_job_gets_a_slice_each_and_holds_them_from_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlflow_template: Path
) -> None:
    uri = fresh_store(mlflow_template, tmp_path)
    path = Scenario(gpus=[FakeGpu(mig=True, mig_devices=h100_mig_slices(4242))]).write(
        tmp_path / "nvml.txt"
    )
    for name, value in env_for(build_library(), path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "holds.py").write_text(HOLDS)

    def workload(name: str, **compute: object) -> str:
        command = f"{sys.executable} holds.py"
        (tmp_path / name).write_text(
            json.dumps({"experiment_name": "mig", "command": command, "compute": compute})
        )
        return name

    submitted = air("run", "-f", workload("two.yaml", nproc_per_node=2, mig="any"))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[1]
    until(lambda: all((tmp_path / f"up-{r}").exists() for r in (0, 1)), "both ranks up")
    given = [(tmp_path / f"up-{r}").read_text() for r in (0, 1)]
    assert given == [mig_uuid(1), mig_uuid(2)], "a free slice each; the 3g.40gb one is busy"

    third = air("run", "-f", workload("one.yaml", nproc_per_node=1))
    assert third.returncode != 0
    assert third.stderr.strip().splitlines()[-1] == (
        "air: one.yaml: compute.nproc_per_node: 1 rank needs 1 of the MIG slices (one each), and "
        "none is free; busy: GPU 0 slice 0 (3g.40gb, a process), GPU 0 slice 1 (2g.20gb, "
        f"job {job_id}), GPU 0 slice 2 (1g.10gb, job {job_id}). Wait for one to be freed, "
        "or pass --oversubscribe (compute.oversubscribe: true) to share them"
    )
    assert len(JobStore(tmp_path / "air").jobs()) == 1, "nothing of the refused one exists"

    (tmp_path / "go").touch()
    job = wait_settled(tmp_path / "air", job_id)
    assert job.status == "SUCCEEDED", job.message
    (attempt,) = JobStore(tmp_path / "air").attempts(job_id)
    from mlflow import MlflowClient

    tags = MlflowClient(uri).get_run(str(attempt.run_id)).data.tags
    assert tags["air.cuda_visible_devices"] == f"{mig_uuid(1)},{mig_uuid(2)}"
    assert tags["air.mig_slices"] == "GPU 0 slice 1 (2g.20gb), GPU 0 slice 2 (1g.10gb)"
