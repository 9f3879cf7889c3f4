"""A profile of a running local job (issue 38, item 5), end to end: ``air profile`` turns
torch.profiler on in both ranks of a real 2-rank gloo job for 5 steps, then off; the
summary is printed; each rank's trace and the merged one are kept with the attempt and
on its MLflow run; the job goes on at its speed and ends as it would have."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs.store import JobStore
from jupyter_air.perf import profiles
from tests.air_cli import air
from tests.perf.profile_job import TRAIN, profiled, speeds, workload
from tests.waits import until, wait_settled


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "w.yaml").write_text(workload(sys.executable))
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))  # no server: no links
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.heavy
@pytest.mark.slow
def test_a_running_job_is_profiled_on_request_and_goes_on(workdir: Path) -> None:
    submitted = air("run", "-f", "w.yaml")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[1]
    perf = AttemptDir(JobStore(workdir / "air").attempt_dir(job_id, 1)).perf
    profile = profiled(air, job_id, perf, f"sqlite:///{workdir}/mlflow.db")
    assert "Clocks: one host" in (profile.folder / profiles.SUMMARY_TEXT).read_text()
    first, last = profile.answers()[0]["steps"]

    # the profiler is off again: the steps after it are back to their speed
    until(
        lambda: len([s for s in _marked(perf) if s > last + 1]) >= 30,
        "30 steps after the profile",
        180,
    )
    before, after = speeds(perf, first, last)
    assert after < 1.5 * before, (before, after)
    (workdir / "stop").touch()
    assert wait_settled(workdir / "air", job_id, 180).status == "SUCCEEDED"


def _marked(perf: Path) -> list[int]:
    lines = (perf / "rank-0.jsonl").read_text().splitlines()
    return [doc["s"] for doc in map(json.loads, lines) if "s" in doc]
