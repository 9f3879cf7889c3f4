"""A real job on MIG slices (issue 41, item 4), with ``air run``, its supervisor and its
ranks on the fake driver's H100 in MIG mode (three slices, the 3g.40gb one held by a
process): each rank gets its own free slice's MIG UUID as CUDA_VISIBLE_DEVICES, the run
says which, and while it holds them the next request is refused naming what is busy.
The rules themselves: tests/gpu/test_placement.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_air.jobs.store import JobStore
from tests.air_cli import air
from tests.fake_nvml import FakeGpu, Scenario, build_library, env_for, h100_mig_slices
from tests.mlflow_store import fresh_store
from tests.waits import until, wait_settled

#: ``air run -f FILE``, its start slowed where it has placed its job and not yet recorded
#: it (its tracking check): there it waits up to ``MEET`` s for the other submission to
#: arrive too, which it can only if the two are not kept apart.
MEETING = """\
import pathlib, sys, time
from jupyter_air.jobs import service
from jupyter_air.cli import main

checked = service.tracking_down

def meet(*args, **kwargs):
    pathlib.Path("arrived-" + sys.argv[1]).touch()
    deadline = time.monotonic() + {meet}
    while len(list(pathlib.Path().glob("arrived-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    return checked(*args, **kwargs)

service.tracking_down = meet
sys.exit(main(["run", "-f", sys.argv[1]]))
"""
MEET = 5

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


@pytest.fixture
def mig_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlflow_template: Path) -> str:
    """This folder, where ``air`` runs on the fake H100 in MIG mode; its tracking URI."""
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
    return uri


def workload(name: str, **compute: object) -> str:
    """A workload file here whose ranks hold their devices until the word."""
    command = f"{sys.executable} holds.py"
    Path(name).write_text(
        json.dumps({"experiment_name": "mig", "command": command, "compute": compute})
    )
    return name


@pytest.mark.heavy
def test_a_two_rank_job_gets_a_slice_each_and_holds_them_from_the_next(
    tmp_path: Path, mig_machine: str
) -> None:
    uri = mig_machine
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


@pytest.mark.heavy
def test_two_submissions_at_once_never_take_the_same_slice(
    tmp_path: Path, mig_machine: str
) -> None:
    """Each reads which slices live jobs hold, then records its job: read both before
    either record, they would both take slice 1."""
    (tmp_path / "meeting.py").write_text(MEETING.format(meet=MEET))
    files = [workload(name, nproc_per_node=1, mig="any") for name in ("a.yaml", "b.yaml")]
    submitting = [
        subprocess.Popen(
            [sys.executable, "meeting.py", name], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for name in files
    ]
    said = [process.communicate(timeout=120) for process in submitting]
    assert [p.returncode for p in submitting] == [0, 0], said
    store = JobStore(tmp_path / "air")
    job_ids = [out.decode().split()[1] for out, _ in said]
    devices = {job_id: store.get(job_id).spec.backend.settings["devices"] for job_id in job_ids}
    assert sorted(devices.values()) == [[mig_uuid(1)], [mig_uuid(2)]], devices

    (tmp_path / "go").touch()
    for job_id in job_ids:
        job = wait_settled(tmp_path / "air", job_id)
        assert job.status == "SUCCEEDED", job.message
